"""The injectable clock: everything time-based (debounce, backoff) waits through it.

:class:`SystemClock` is anyio's monotonic clock; :class:`WallClock` is Unix time, for deadlines
that other processes read (the switchboard's leases); :class:`asyncai_watch.testing.FakeClock`
only moves when a test says so.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Protocol, runtime_checkable

import anyio
import anyio.lowlevel

__all__ = ["Clock", "SystemClock", "WallClock", "fail_after", "move_on_at"]


@runtime_checkable
class Clock(Protocol):
    """A monotonic clock in seconds, and a way to sleep until a point on it."""

    def now(self) -> float:
        """The current time in seconds on this clock."""
        ...

    async def sleep_until(self, deadline: float) -> None:
        """Return once ``now() >= deadline`` (at once, after a checkpoint, if it already is)."""
        ...


class SystemClock:
    """anyio's event-loop clock (monotonic)."""

    def now(self) -> float:
        """anyio's monotonic event-loop time."""
        return anyio.current_time()

    async def sleep_until(self, deadline: float) -> None:
        """Return once :meth:`now` reaches ``deadline``."""
        await anyio.sleep_until(deadline)

    def __repr__(self) -> str:
        return "SystemClock()"


class WallClock:
    """Unix time: the same instant to every process, machine and restart (a monotonic clock's
    zero is per boot). For deadlines kept where others read them, e.g. a shared database; it
    jumps when the system time is set, so anything local uses :class:`SystemClock`."""

    def now(self) -> float:
        """Unix time, in seconds."""
        return time.time()

    async def sleep_until(self, deadline: float) -> None:
        """Return once the Unix time reaches ``deadline``."""
        await anyio.sleep(max(0.0, deadline - time.time()))

    def __repr__(self) -> str:
        return "WallClock()"


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


@asynccontextmanager
async def move_on_at(clock: Clock, deadline: float | None) -> AsyncIterator[anyio.CancelScope]:
    """:func:`anyio.move_on_at` on ``clock``: the block is cancelled quietly at ``deadline``.

    ``None`` means no deadline. On :class:`SystemClock` this is anyio's own scope; on any other
    clock a helper task sleeps on the clock and cancels the block, so a :class:`FakeClock`
    test reaches the deadline with ``advance``. The yielded scope's ``cancelled_caught`` says
    whether the deadline ended the block.
    """
    if deadline is None:
        with anyio.CancelScope() as scope:
            yield scope
        return
    if isinstance(clock, SystemClock):
        with anyio.move_on_at(deadline) as scope:
            yield scope
        return
    raised: BaseException | None = None
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:

            async def expire() -> None:
                await clock.sleep_until(deadline)
                scope.cancel()

            tg.start_soon(expire)
            try:
                yield scope
            except anyio.get_cancelled_exc_class():
                raise  # the deadline's (caught by ``scope``) or an outer one (passed on)
            except BaseException as exc:
                # Raised out of the task group it would arrive wrapped in an exception group.
                raised = exc
            finally:
                tg.cancel_scope.cancel()
    if raised is not None:
        raise raised
