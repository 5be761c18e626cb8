"""The notice -> turn loop every framework integration shares.

:class:`TurnRunner` applies the library's turn rules (:mod:`asyncai_watch.core.turns`) around one
framework-specific step, "run one turn with this user text and return the reply text"
(:data:`TurnFn`):

- at most one run at a time; notices and messages that arrive during a run become ONE
  follow-up run (:class:`~asyncai_watch.Turns`);
- a run's user text is the notices rendered as ``<watch-event ...>`` messages
  (:func:`~asyncai_watch.render_turn`), after any messages sent with :meth:`TurnRunner.send`;
- a reply that :func:`~asyncai_watch.is_no_reply` is not published; any other reply goes to the
  ``publish`` callback.

The runner owns its tasks (an anyio task group, entered with ``async with``); leaving the block
cancels a run in progress. Tests and programs wait on :meth:`TurnRunner.wait` (woken by each
change of :class:`RunnerStats`, never by a timer).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import AsyncIterable, Awaitable, Callable
from types import TracebackType
from typing import Self

import anyio
import anyio.abc
import attrs

from asyncai_watch._tasks import exit_task_group
from asyncai_watch.core.notice import Notice
from asyncai_watch.core.turns import Turns, is_no_reply, render_turn
from asyncai_watch.errors import describe

__all__ = ["Publish", "RunRecord", "RunnerStats", "TurnFn", "TurnRunner"]

TurnFn = Callable[[str], Awaitable[str | None]]
"""Run one framework turn with this user text (history kept by the framework side); return the reply."""
Publish = Callable[[str], Awaitable[None]]
"""Where a reply goes (a chat channel, a log, ``print``)."""

logger = logging.getLogger("asyncai_watch.integrations")


@attrs.frozen(kw_only=True)
class RunRecord:
    """One finished run: what it took, what it answered, and whether the answer was published."""

    number: int
    """1 for the first run of this runner, then 2, ..."""
    prompt: str
    """The user text the framework got."""
    notices: tuple[Notice, ...]
    """The notices this run took (several when they arrived during the previous run)."""
    messages: tuple[str, ...]
    """The messages (:meth:`TurnRunner.send`) this run took."""
    reply: str | None
    """The framework's reply (``None`` when the run failed)."""
    published: bool
    """The reply went to ``publish``: not ``NO_REPLY``, not empty, and ``publish`` did not fail."""
    error: str | None = None
    """Why the run (or publishing its reply) failed, ``Type: message``."""


@attrs.frozen(kw_only=True)
class RunnerStats:
    """Counters a test or program can wait on (:meth:`TurnRunner.wait`)."""

    notices: int = 0
    """Notices received (queued for a run)."""
    messages: int = 0
    """Messages received through :meth:`TurnRunner.send` / :meth:`TurnRunner.ask`."""
    runs_started: int = 0
    runs_completed: int = 0
    """Runs finished, failed ones included."""
    published: int = 0
    suppressed: int = 0
    """Replies not published because they were ``NO_REPLY`` (or empty)."""
    failed: int = 0
    """Runs whose framework call raised, or whose reply could not be published."""
    active: bool = False
    """A run is in progress."""
    queued: int = 0
    """Notices and messages waiting for the next run."""


@attrs.define(eq=False)
class _Message:
    text: str
    done: anyio.Event = attrs.field(factory=anyio.Event)
    record: RunRecord | None = None


_Item = Notice | _Message


class TurnRunner:
    """Feed ``notices`` (and messages) to a framework as turns; publish what is worth saying.

    ``turn`` runs one turn (the framework modules build one that keeps the conversation's
    history); ``notices`` is usually :attr:`WatchManager.notices <asyncai_watch.WatchManager.notices>`;
    ``publish`` receives each reply that is not ``NO_REPLY``; ``taken`` (usually
    :meth:`WatchManager.notice_taken <asyncai_watch.WatchManager.notice_taken>`) is told of each
    notice whose run completed without an error, so with ``--watch-state`` a notice whose run did
    not complete is handed over again after a restart. Use as ``async with TurnRunner(...) as runner:``.
    """

    def __init__(
        self,
        turn: TurnFn,
        notices: AsyncIterable[Notice] | None = None,
        *,
        publish: Publish,
        taken: Callable[[Notice], None] | None = None,
    ) -> None:
        self._turn = turn
        self._taken = taken
        self._notices = notices
        self._publish = publish
        self._turns: Turns[_Item] = Turns()
        self._wake = anyio.Event()
        self._changed = anyio.Event()
        self._stats = RunnerStats()
        self._batch: list[_Item] = []  # what the run in progress took
        self._tg: anyio.abc.TaskGroup | None = None
        self._closed = False
        self.runs: list[RunRecord] = []
        """Every finished run, oldest first."""

    # -- lifecycle -------------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._tg is not None or self._closed:
            raise RuntimeError("TurnRunner can be entered once")
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        tg.start_soon(self._serve)
        if self._notices is not None:
            tg.start_soon(self._pump, self._notices)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        tg, self._tg = self._tg, None
        self._closed = True
        try:
            if tg is None:
                return None
            return await exit_task_group(tg, exc_type, exc, tb)
        finally:
            # Whoever still waits in ask() learns the runner is gone instead of waiting forever.
            for item in [*self._batch, *self._turns.inbox]:
                if isinstance(item, _Message):
                    item.done.set()
            self._changed_now()  # and so does whoever waits in wait()

    # -- input -----------------------------------------------------------------------------------

    def send(self, text: str) -> None:
        """Queue a message (e.g. the user's request) for the next run; its reply is published."""
        self._add_message(text)

    async def ask(self, text: str) -> RunRecord:
        """Queue ``text`` like :meth:`send` and wait for the run that takes it; return that run."""
        message = self._add_message(text)
        await message.done.wait()
        if message.record is None:
            raise RuntimeError("TurnRunner closed before a run took the message")
        return message.record

    def _add_message(self, text: str) -> _Message:
        if not isinstance(text, str):
            raise TypeError(f"TurnRunner: a message must be a str, got {type(text).__name__}")
        if self._tg is None:
            raise RuntimeError("TurnRunner is not running: use it as `async with TurnRunner(...) as runner:`")
        message = _Message(text)
        self._stats = attrs.evolve(self._stats, messages=self._stats.messages + 1)
        self._add(message)
        return message

    def _add(self, item: _Item) -> None:
        if self._turns.add(item):
            self._wake.set()
        self._changed_now()

    async def _pump(self, notices: AsyncIterable[Notice]) -> None:
        # The stream ends (or is closed) when its WatchManager closes; messages still run.
        with contextlib.suppress(anyio.ClosedResourceError):
            async for notice in notices:
                self._stats = attrs.evolve(self._stats, notices=self._stats.notices + 1)
                self._add(notice)

    # -- observing -------------------------------------------------------------------------------

    @property
    def stats(self) -> RunnerStats:
        """The counters now."""
        return attrs.evolve(self._stats, active=self._turns.active, queued=len(self._turns.inbox))

    async def wait(self, until: Callable[[RunnerStats], bool]) -> RunnerStats:
        """Return the stats once ``until(stats)`` holds; woken by each change, never by a timer.

        E.g. ``await runner.wait(lambda s: s.published >= 1)``. Raises :class:`RuntimeError`
        when the runner closes first.
        """
        while not until(stats := self.stats):
            if self._closed:
                raise RuntimeError("TurnRunner closed before the awaited condition held")
            await self._changed.wait()
        return stats

    async def wait_idle(self) -> RunnerStats:
        """Return once no run is active and nothing waits for one."""
        return await self.wait(lambda s: not s.active and s.queued == 0)

    def _changed_now(self) -> None:
        changed, self._changed = self._changed, anyio.Event()
        changed.set()

    # -- the loop --------------------------------------------------------------------------------

    async def _serve(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            batch = self._batch = self._turns.begin()
            self._stats = attrs.evolve(self._stats, runs_started=self._stats.runs_started + 1)
            self._changed_now()
            record = await self._run(self._stats.runs_started, batch)
            self.runs.append(record)
            logger.debug(
                "integration.run",
                extra={
                    "run": record.number,
                    "notices": len(record.notices),
                    "messages": len(record.messages),
                    "published": record.published,
                    "error": record.error,
                },
            )
            self._stats = attrs.evolve(
                self._stats,
                runs_completed=self._stats.runs_completed + 1,
                published=self._stats.published + record.published,
                suppressed=self._stats.suppressed + (record.error is None and not record.published),
                failed=self._stats.failed + (record.error is not None),
            )
            if record.error is None and self._taken is not None:
                for notice in record.notices:
                    self._taken(notice)  # its turn completed: not handed over again after a restart
            for item in batch:
                if isinstance(item, _Message):
                    item.record = record
                    item.done.set()
            self._batch = []
            if self._turns.end():
                self._wake.set()
            self._changed_now()

    async def _run(self, number: int, batch: list[_Item]) -> RunRecord:
        notices = tuple(item for item in batch if isinstance(item, Notice))
        messages = tuple(item.text for item in batch if isinstance(item, _Message))
        # People's messages first, then what the watches saw (one <watch-event> each).
        prompt = "\n\n".join([*messages, *([render_turn(notices)] if notices else [])])
        record = RunRecord(
            number=number, prompt=prompt, notices=notices, messages=messages, reply=None, published=False
        )
        try:
            reply = await self._turn(prompt)
        except Exception as exc:
            # Reported (log and record), never swallowed; the next notice still gets its run.
            _report("integration.run_failed", number, exc)
            return attrs.evolve(record, error=describe(exc))
        record = attrs.evolve(record, reply=reply)
        if reply is None or is_no_reply(reply):
            return record
        try:
            await self._publish(reply)
        except Exception as exc:
            _report("integration.publish_failed", number, exc)
            return attrs.evolve(record, error=f"publish: {describe(exc)}")
        return attrs.evolve(record, published=True)


def _report(event: str, number: int, exc: BaseException) -> None:
    """Log a failed run at ERROR; with no logging configured, say why on stderr instead.

    Python's fallback for an unconfigured logger prints the message alone ("integration.run_failed"),
    without the error, and the program then waits for a run that never comes."""
    if logger.hasHandlers():
        logger.error(event, extra={"run": number, "error": describe(exc)})
        return
    causes: list[str] = []
    seen = {id(exc)}
    cause = exc.__cause__ or exc.__context__
    while cause is not None and id(cause) not in seen and len(causes) < 5:
        seen.add(id(cause))
        if describe(cause) not in (causes[-1:] or [describe(exc)]):  # a re-raise says it again
            causes.append(describe(cause))
        cause = cause.__cause__ or cause.__context__
    why = describe(exc) + "".join(f" (caused by {c})" for c in causes)
    print(f"{event}: run {number} failed: {why}", file=sys.stderr, flush=True)
