"""The injectable clock: everything time-based (debounce, backoff) waits through it.

:class:`SystemClock` is anyio's monotonic clock. :class:`FakeClock` only moves
when a test calls :meth:`FakeClock.advance`, and lets the test wait until a
task is parked on it (:meth:`FakeClock.wait_for_sleepers`), so debounce and
backoff are tested without real waits and without polling.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Protocol, runtime_checkable

import anyio
import anyio.lowlevel

__all__ = ["Clock", "FakeClock", "SystemClock", "fail_after"]


@runtime_checkable
class Clock(Protocol):
    """A monotonic clock in seconds, and a way to sleep until a point on it."""

    def now(self) -> float: ...

    async def sleep_until(self, deadline: float) -> None:
        """Return once ``now() >= deadline`` (at once, after a checkpoint, if it already is)."""
        ...


class SystemClock:
    """anyio's event-loop clock (monotonic)."""

    def now(self) -> float:
        return anyio.current_time()

    async def sleep_until(self, deadline: float) -> None:
        await anyio.sleep_until(deadline)

    def __repr__(self) -> str:
        return "SystemClock()"


class FakeClock:
    """A clock that moves only on :meth:`advance`.

    Sleepers park on an :class:`anyio.Event`; ``advance`` sets the events of
    every sleeper whose deadline has been reached. A cancelled sleeper removes
    itself. Tests call ``await clock.wait_for_sleepers(n)`` to know that ``n``
    tasks are parked before advancing.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        # heap of (deadline, tiebreak, event); cancelled entries are removed lazily by identity.
        self._sleepers: list[tuple[float, int, anyio.Event]] = []
        self._counter = itertools.count()
        self._changed: anyio.Event | None = None

    def now(self) -> float:
        return self._now

    @property
    def sleepers(self) -> int:
        """How many tasks are parked in :meth:`sleep_until` right now."""
        return len(self._sleepers)

    @property
    def next_deadline(self) -> float | None:
        """The earliest deadline a parked task waits for, or None."""
        return self._sleepers[0][0] if self._sleepers else None

    def deadlines(self) -> list[float]:
        """Every parked task's deadline, earliest first."""
        return sorted(d for d, _, _ in self._sleepers)

    async def sleep_until(self, deadline: float) -> None:
        if deadline <= self._now:
            await anyio.lowlevel.checkpoint()
            return
        event = anyio.Event()
        entry = (float(deadline), next(self._counter), event)
        heapq.heappush(self._sleepers, entry)
        self._notify()
        try:
            await event.wait()
        finally:
            if not event.is_set():
                # Cancelled while parked: drop our entry so the count stays true.
                self._sleepers.remove(entry)
                heapq.heapify(self._sleepers)
                self._notify()

    def advance(self, seconds: float) -> None:
        """Move time forward and wake every sleeper whose deadline has passed."""
        if seconds < 0:
            raise ValueError(f"FakeClock.advance expects seconds >= 0, got {seconds!r}")
        self.set_time(self._now + seconds)

    def set_time(self, now: float) -> None:
        """Jump to ``now`` (not backwards) and wake the sleepers that are due."""
        if now < self._now:
            raise ValueError(f"FakeClock cannot go backwards: {now!r} < {self._now!r}")
        self._now = float(now)
        woke = False
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, event = heapq.heappop(self._sleepers)
            event.set()
            woke = True
        if woke:
            self._notify()

    async def wait_for_sleepers(self, n: int = 1) -> None:
        """Return once at least ``n`` tasks are parked in :meth:`sleep_until`."""
        while len(self._sleepers) < n:
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()

    async def wait_for_deadline(self, deadline: float) -> None:
        """Return once some task is parked until exactly ``deadline``."""
        while not any(d == deadline for d, _, _ in self._sleepers):
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def __repr__(self) -> str:
        return f"FakeClock(now={self._now!r}, sleepers={len(self._sleepers)})"


@asynccontextmanager
async def fail_after(clock: Clock, seconds: float | None) -> AsyncIterator[None]:
    """:func:`anyio.fail_after` on ``clock``: cancel the block and raise ``TimeoutError`` at ``now() + seconds``.

    ``None`` means no deadline. On :class:`SystemClock` this is anyio's own scope; on any
    other clock a helper task sleeps on the clock and cancels the block, so a
    :class:`FakeClock` test reaches the deadline with ``advance`` instead of waiting. Either
    way the block's own exceptions come out as they are (never in an exception group), and
    ``TimeoutError`` is raised only if the deadline actually cancelled the block.
    """
    if seconds is None:
        yield
        return
    if isinstance(clock, SystemClock):
        with anyio.fail_after(seconds):
            yield
        return
    deadline = clock.now() + seconds
    done = expired = False
    raised: BaseException | None = None
    async with anyio.create_task_group() as tg:

        async def expire() -> None:
            nonlocal expired
            await clock.sleep_until(deadline)
            if not done:  # the block may have finished while this task was being woken
                expired = True
                tg.cancel_scope.cancel()

        tg.start_soon(expire)
        try:
            yield
        except anyio.get_cancelled_exc_class():
            if not expired:
                raise  # an outer cancellation: the task group passes it on
            # The deadline's own cancellation: the task group absorbs it; TimeoutError below.
        except BaseException as exc:
            # Raised out of the task group it would arrive wrapped in an exception group.
            raised = exc
        else:
            expired = False  # finished (e.g. shielded) despite the deadline: no timeout
        finally:
            done = True
            tg.cancel_scope.cancel()
    if raised is not None:
        raise raised
    if expired:
        raise TimeoutError
