"""The agent runtime: one thread, at most one active run, coalescing by the library's turn rules.

Messages added while a run is active wait in the inbox; when the run completes, ONE follow-up
run takes the whole inbox (:class:`asyncai_watch.Turns`). So N notices during a run cost one
extra run, not N. A run only ever sees whole messages: nothing is inserted between a tool call
and its result.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import anyio
import attrs

from asyncai_agent.backends.base import BackendError
from asyncai_agent.thread import Message
from asyncai_watch import Turns

__all__ = ["AgentRuntime", "Executor", "Run", "RuntimeListener"]


@attrs.define(eq=False)
class Run:
    id: int
    picked_up: tuple[Message, ...]
    """The messages this run is the first to see (drained from the inbox)."""
    reply: str | None = None
    error: str | None = None
    channel: Any = None
    """Set by the orchestrator when the run is created: where its reply goes."""


class Executor(Protocol):
    async def __call__(self, run: Run, thread: list[Message]) -> str | None:
        """Run the model over ``thread`` (appending to it); return the final reply text."""
        ...


class RuntimeListener(Protocol):
    def run_created(self, run: Run) -> None:
        """Called synchronously as the run drains the inbox, so claims match what the run sees."""
        ...

    async def run_completed(self, run: Run) -> None:
        """Called before the run stops being active (e.g. to publish its reply)."""
        ...


class AgentRuntime:
    def __init__(self, execute: Executor | Callable[[Run, list[Message]], Awaitable[str | None]]) -> None:
        self._execute = execute
        self.listener: RuntimeListener | None = None
        self.thread: list[Message] = []
        self.turns: Turns[Message] = Turns()
        self.active: Run | None = None
        self.runs_started = 0
        self._requested = False
        self._wake = anyio.Event()
        self._idle = anyio.Event()
        self._idle.set()

    @property
    def inbox(self) -> list[Message]:
        """Messages no run has taken yet."""
        return self.turns.inbox

    @property
    def queued_run(self) -> bool:
        """A follow-up run will start when the active one completes."""
        return self.turns.active and bool(self.turns.inbox)

    @property
    def idle(self) -> bool:
        return self.active is None and not self._requested and not self.queued_run

    def add_message(self, message: Message) -> None:
        """Add ``message`` and ask for a run: one now, or, while a run is active, one follow-up."""
        if self.turns.add(message):
            self._requested = True
            self._wake.set()
        if self._idle.is_set():
            self._idle = anyio.Event()

    async def wait_idle(self) -> None:
        """Return once no run is active or requested."""
        # The event is only replaced after it was set, so a waiter never waits on a stale one.
        await self._idle.wait()

    async def serve(self) -> None:
        """Run forever (until cancelled), one run at a time."""
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            self._requested = False
            picked_up = self.turns.begin()
            self.runs_started += 1
            run = Run(id=self.runs_started, picked_up=tuple(picked_up))
            self.thread.extend(picked_up)
            self.active = run
            if self.listener is not None:
                self.listener.run_created(run)
            try:
                run.reply = await self._execute(run, self.thread)
            except BackendError as exc:  # reported to the user by the listener, never swallowed
                run.error = str(exc)
            except Exception as exc:
                run.error = f"{type(exc).__name__}: {exc}"
            if self.listener is not None:
                await self.listener.run_completed(run)
            self.active = None
            if self.turns.end():
                self._requested = True
                self._wake.set()
            elif self.idle:
                self._idle.set()
