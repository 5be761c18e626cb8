"""The reactor: input sources, the notice stream and the runtime, multiplexed with anyio.

Input and notices take the same path (docs/design.md, "Delivery to the agent"): add a
user-role message, which runs the thread. Coalescing is the library's turn rule
(:class:`asyncai_watch.Turns`, in the runtime). Reply routing:

- every input carries its reply channel and stays *unclaimed* until a run
  starts; the new run claims all unclaimed inputs and replies to the most
  recent claimed channel;
- a run that claimed no input (notices only) replies to the channel of the
  last addressed input, otherwise the default channel.

The loop is idle when no input is unclaimed, no run is active or queued, and
no notice sent to ``notice_tx`` (or picked up by a forwarder) is still on its
way into the thread; :meth:`Orchestrator.wait_idle` is what shutdown waits for.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterable, Callable
from types import TracebackType
from typing import Final, Protocol

import anyio
import attrs
from anyio.abc import ObjectSendStream, TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from asyncai_agent.events import (
    AgentEvent,
    InputReceived,
    NoticeReceived,
    ReplyChannel,
    ReplyPublished,
    ReplySuppressed,
    RunCompleted,
    RunFailed,
    RunStarted,
)
from asyncai_agent.runtime import AgentRuntime, Run
from asyncai_agent.thread import Message
from asyncai_watch import Notice, is_no_reply, render_notice
from asyncai_watch.log import emit, logger

__all__ = ["Executor", "Input", "NoticeSender", "Orchestrator"]

NOTICE_BUFFER: Final = 64
"""Notices are already debounced; a small buffer only absorbs a burst from several watches."""


class Executor(Protocol):
    """One run of the model over the thread (see :class:`asyncai_agent.agent.Agent`)."""

    async def __call__(
        self, run: Run, thread: list[Message], emit: Callable[[AgentEvent], None]
    ) -> str | None: ...


@attrs.frozen
class Input:
    """A line of input and the channel its reply belongs to."""

    text: str
    channel: ReplyChannel


@attrs.define(eq=False)
class _Sent:
    """A notice on its way to the pump; ``withdrawn`` when its send raised before it was taken."""

    notice: Notice
    withdrawn: bool = False
    taken: bool = False


class _InFlight:
    """Counts notices sent but not yet taken into the thread, and signals each one that leaves."""

    def __init__(self) -> None:
        self.count = 0
        self.left = anyio.Event()

    def add(self) -> None:
        self.count += 1

    def remove(self) -> None:
        self.count -= 1
        self.left.set()
        self.left = anyio.Event()


class NoticeSender(ObjectSendStream[Notice]):
    """The send end of the orchestrator's notice stream (:attr:`Orchestrator.notice_tx`).

    A memory object send stream that also counts what it sent until the reactor takes it,
    so :meth:`Orchestrator.wait_idle` can tell a buffered notice from an idle agent.
    """

    def __init__(self, inner: MemoryObjectSendStream[_Sent], in_flight: _InFlight) -> None:
        self._inner = inner
        self._in_flight = in_flight

    async def send(self, item: Notice) -> None:
        sent = self._enter(item)
        try:
            await self._inner.send(sent)
        except BaseException:
            self._withdraw(sent)
            raise

    def send_nowait(self, item: Notice) -> None:
        """Raises ``anyio.WouldBlock`` when the buffer is full (the notice was not sent)."""
        sent = self._enter(item)
        try:
            self._inner.send_nowait(sent)
        except BaseException:
            self._withdraw(sent)
            raise

    def clone(self) -> NoticeSender:
        """Another send end, for a source that closes its own when it ends."""
        return NoticeSender(self._inner.clone(), self._in_flight)

    def close(self) -> None:
        self._inner.close()

    async def aclose(self) -> None:
        self.close()

    def _enter(self, item: Notice) -> _Sent:
        self._in_flight.add()
        return _Sent(item)

    def _withdraw(self, sent: _Sent) -> None:
        # A cancelled send can raise although its item reached the buffer in the same instant.
        # Unless the pump already took it, it counts as not sent: the pump skips a withdrawn item,
        # so each notice leaves the count exactly once.
        if sent.taken:
            return
        sent.withdrawn = True
        self._in_flight.remove()


class Orchestrator:
    """Use as ``async with Orchestrator(executor, default_channel=...) as orch:``.

    ``notice_tx`` accepts :class:`~asyncai_watch.core.notice.Notice` from any
    background source; :meth:`submit` / :meth:`add_input` take input;
    :meth:`subscribe` yields every :class:`~asyncai_agent.events.AgentEvent`.
    """

    def __init__(
        self,
        executor: Executor,
        *,
        default_channel: ReplyChannel,
        observers: tuple[Callable[[AgentEvent], None], ...] = (),
        verbose: bool = False,
        notice_taken: Callable[[Notice], None] | None = None,
    ) -> None:
        self._executor = executor
        # Told of each notice once the run that read it completed (WatchManager.notice_taken:
        # with --watch-state, a notice whose run did not complete is handed over again).
        self._notice_taken = notice_taken
        self._reading: dict[int, Notice] = {}  # id() of the message a notice became -> the notice
        self.default_channel = default_channel
        self.verbose = verbose
        self.runtime = AgentRuntime(self._execute)
        self.runtime.listener = self
        self._observers: list[Callable[[AgentEvent], None]] = list(observers)
        self._subscribers: list[MemoryObjectSendStream[AgentEvent]] = []
        self._unclaimed: list[Input] = []
        self._last_addressed: ReplyChannel | None = None
        self._in_flight = _InFlight()
        tx, self._notice_rx = anyio.create_memory_object_stream[_Sent](NOTICE_BUFFER)
        self._notice_tx = NoticeSender(tx, self._in_flight)
        self._tg: TaskGroup | None = None

    # -- lifecycle --------------------------------------------------------------------------------

    async def __aenter__(self) -> Orchestrator:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        self._tg.start_soon(self.runtime.serve)
        self._tg.start_soon(self._pump_notices)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        assert self._tg is not None
        # The reactor runs until its owner leaves: in-flight work is cancelled, never orphaned.
        self._tg.cancel_scope.cancel()
        try:
            return await self._tg.__aexit__(exc_type, exc, tb)
        finally:
            self._tg = None
            for stream in self._subscribers:
                stream.close()
            self._notice_tx.close()

    # -- inputs -----------------------------------------------------------------------------------

    @property
    def notice_tx(self) -> NoticeSender:
        """Send notices here (``clone()`` it for a source that closes its end).

        A notice counts against :attr:`idle` from the moment its send starts until it is taken.
        """
        return self._notice_tx

    def submit(self, text: str, channel: ReplyChannel) -> None:
        """Take one input: add it as a user message and run the thread."""
        item = Input(text, channel)
        self._unclaimed.append(item)
        self._last_addressed = channel
        self._emit(InputReceived(text=text, channel=channel.name))
        self.runtime.add_message(Message(role="user", text=text))

    def add_input(self, source: AsyncIterable[Input]) -> None:
        """Consume ``source`` in the reactor's task group until it ends."""
        self._task_group.start_soon(self._pump_input, source)

    async def feed(self, source: AsyncIterable[Input]) -> None:
        """Consume ``source`` here until it ends (e.g. stdin until EOF)."""
        await self._pump_input(source)

    def forward_notices(self, source: AsyncIterable[Notice]) -> None:
        """Forward a notice stream (e.g. ``WatchManager.notices``) into ``notice_tx``."""
        self._task_group.start_soon(self._forward, source)

    def take_notice(self, notice: Notice) -> None:
        """A notice: the same path as input, minus the claim (a notice has no reply channel)."""
        rendered = render_notice(notice)
        self._emit(NoticeReceived(notice=notice, rendered=rendered))
        emit("agent.notice", verbose=self.verbose, source=notice.source, task_id=rendered.task_id)
        message = Message(role="user", text=rendered.text)
        if self._notice_taken is not None:
            self._reading[id(message)] = notice
        self.runtime.add_message(message)

    async def _pump_input(self, source: AsyncIterable[Input]) -> None:
        async for item in source:
            self.submit(item.text, item.channel)

    async def _forward(self, source: AsyncIterable[Notice]) -> None:
        async with self._notice_tx.clone() as tx:
            async for notice in source:
                # No checkpoint between receiving and this send: a notice in hand is already counted.
                await tx.send(notice)

    async def _pump_notices(self) -> None:
        async for sent in self._notice_rx:
            if sent.withdrawn:
                continue
            sent.taken = True
            try:
                self.take_notice(sent.notice)
            finally:
                self._in_flight.remove()

    # -- state ------------------------------------------------------------------------------------

    @property
    def idle(self) -> bool:
        """No input unclaimed, no run active or queued, no notice sent but not yet taken."""
        return not self._unclaimed and self.runtime.idle and self._in_flight.count == 0

    async def wait_idle(self) -> None:
        """Return once :attr:`idle` holds: nothing unclaimed, running, queued or in flight."""
        # Each wait ends on a change (a notice taken or withdrawn, the runtime going idle), never on
        # a timer, and the condition is checked again without a checkpoint in between. Every input
        # and every notice taken requests a run, so "runtime idle" covers "nothing unclaimed".
        while not self.idle:
            if self._in_flight.count:
                await self._in_flight.left.wait()
            else:
                await self.runtime.wait_idle()

    def subscribe(self) -> MemoryObjectReceiveStream[AgentEvent]:
        """A stream of every event from now on (unbounded, so the reactor never blocks on it)."""
        tx, rx = anyio.create_memory_object_stream[AgentEvent](math.inf)
        self._subscribers.append(tx)
        return rx

    def add_observer(self, observer: Callable[[AgentEvent], None]) -> None:
        self._observers.append(observer)

    @property
    def _task_group(self) -> TaskGroup:
        if self._tg is None:
            raise RuntimeError("Orchestrator is not running: use it as 'async with Orchestrator(...)'")
        return self._tg

    def _emit(self, event: AgentEvent) -> None:
        for observer in self._observers:
            observer(event)
        for stream in list(self._subscribers):
            try:
                stream.send_nowait(event)
            except anyio.BrokenResourceError:  # the subscriber went away
                self._subscribers.remove(stream)

    # -- runtime listener -------------------------------------------------------------------------

    def run_created(self, run: Run) -> None:
        claimed, self._unclaimed = self._unclaimed, []
        if claimed:
            channel = claimed[-1].channel
        else:
            channel = self._last_addressed if self._last_addressed is not None else self.default_channel
        run.channel = channel
        self._emit(
            RunStarted(
                run_id=run.id, channel=channel.name, claimed=len(claimed), picked_up=len(run.picked_up)
            )
        )
        emit("agent.run", verbose=self.verbose, run=run.id, channel=channel.name, claimed=len(claimed))

    async def run_completed(self, run: Run) -> None:
        channel: ReplyChannel = run.channel if run.channel is not None else self.default_channel
        read = [n for m in run.picked_up if (n := self._reading.pop(id(m), None)) is not None]
        if run.error is None and self._notice_taken is not None:
            for notice in read:
                self._notice_taken(notice)
        if run.error is not None:
            # Reported to whoever is waiting for the answer, and logged: never swallowed.
            logger.error("agent.error", extra={"run": run.id, "channel": channel.name, "error": run.error})
            self._emit(RunFailed(run_id=run.id, channel=channel.name, error=run.error))
            await self._publish(run, channel, f"error: {run.error}")
        elif is_no_reply(run.reply):
            emit(
                "reply.suppressed",
                verbose=self.verbose,
                run=run.id,
                channel=channel.name,
                reply=run.reply or "",
            )
            self._emit(ReplySuppressed(run_id=run.id, channel=channel.name, text=run.reply or ""))
        else:
            assert run.reply is not None
            if await self._publish(run, channel, run.reply):
                self._emit(ReplyPublished(run_id=run.id, channel=channel.name, text=run.reply))
        self._emit(RunCompleted(run_id=run.id))

    async def _publish(self, run: Run, channel: ReplyChannel, text: str) -> bool:
        try:
            await channel.send(text)
        except Exception as exc:  # a broken channel must not take the reactor down with it
            logger.error(
                "agent.publish_failed",
                extra={"run": run.id, "channel": channel.name, "error": f"{type(exc).__name__}: {exc}"},
            )
            return False
        return True

    async def _execute(self, run: Run, thread: list[Message]) -> str | None:
        result: str | None = await self._executor(run, thread, self._emit)
        return result
