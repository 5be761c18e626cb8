"""One running watch, as the shell holds it: its spec, its pure delivery, its filter.

A :class:`Watcher` has no task of its own while it has no filter: its connection's runner hands
it each read's events (:meth:`Watcher.take`), it turns them into lines and queues them for the
notice (:class:`~asyncai_watch.core.deliver.Delivery`) at once, and the manager's one debounce
task (:mod:`asyncai_watch.runtime.notices`) sends the notice when it is due. A watch with an
``on_event`` filter has one task, :meth:`Watcher.filter_events`: it takes the events from a
one-slot mailbox (events that come while the filter runs are joined into the slot, never
dropped) and adds the filter's lines when the worker answers. Everything goes forward: update
signal -> read -> extraction -> :meth:`take` -> lines -> debounce -> notice.

A watcher owns its life: ``starting`` -> ``running`` (:meth:`Watcher.started`) -> ``failed``
(:meth:`Watcher.give_up`), or ``restore_failed`` (:meth:`Watcher.restore_failed`). The manager
and the runner say what happened to it by method; what they keep about it (the debounce heap, the
name table) they keep in maps of their own.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Literal

import anyio
import anyio.abc
import attrs

from asyncai_watch import log
from asyncai_watch.core.deliver import Delivery, EventRecord, Line
from asyncai_watch.core.events import Shape
from asyncai_watch.core.extract import MAX_MERGED_EVENTS, Pending
from asyncai_watch.core.limits import Limits
from asyncai_watch.core.notice import Notice
from asyncai_watch.core.resume import Checkpoint
from asyncai_watch.core.spec import WatchSpec
from asyncai_watch.errors import BaselineError, NotWatchableError, WatchError, describe
from asyncai_watch.filters import (
    Catalog,
    FilterEngine,
    FilterSession,
    refuse_denied_calls,
    sample_event,
    validate_on_event,
)
from asyncai_watch.info import WatchInfo

__all__ = ["Marks", "Status", "Watcher", "open_filter"]

Marks = Callable[[str, Checkpoint | None, bool], None]
"""Told after each read's lines were queued: the watch, where it stands, whether lines wait
(:meth:`asyncai_watch.runtime.resume.Resume.mark`)."""

Status = Literal["starting", "running", "failed", "restore_failed"]


@attrs.define(eq=False)
class _Filter:
    """A filtered watch's task state: the one-slot mailbox and the task's scope."""

    session: FilterSession
    mailbox: Pending | None = None
    checkpoint: Checkpoint | None = None  # where the mailbox's newest read leaves the watch
    mail: anyio.Event = attrs.field(factory=anyio.Event)
    scope: anyio.CancelScope = attrs.field(factory=anyio.CancelScope)
    running: bool = False
    done: anyio.Event = attrs.field(factory=anyio.Event)


@attrs.define(eq=False)
class _Start:
    """A start on its connection: settled once the watch began on a read or failed."""

    settled: anyio.Event = attrs.field(factory=anyio.Event)
    error: str | None = None
    cause: BaseException | None = None


@attrs.define(eq=False)
class Watcher:
    """One watch (see the module docstring). Identity is the watch: two watchers never compare equal.

    It owns its life: the manager and the runner say what happened to it (:meth:`routed`,
    :meth:`joining`, :meth:`begin`, :meth:`fail_start`, :meth:`started`, :meth:`give_up`, ...)
    and read what it is; none of them sets its fields.
    """

    spec: WatchSpec
    limits: Limits = attrs.field(factory=Limits)
    verbose: bool = False
    _status: Status = attrs.field(default="starting", init=False)
    _server: str | None = attrs.field(default=None, init=False)
    _protocol: str | None = attrs.field(default=None, init=False)
    """The MCP version the watch's server speaks (its era: listen or legacy subscribe)."""
    _by_trial: bool = attrs.field(default=False, init=False)
    """Its server does not advertise subscriptions but accepted the one it was tried with."""
    _error: str | None = attrs.field(default=None, init=False)
    _shape: Shape | None = attrs.field(default=None, init=False)
    delivery: Delivery = attrs.field(init=False)
    _start: _Start | None = attrs.field(default=None, init=False)
    """While its connection starts it (:meth:`joining` to :meth:`started`); ``None`` before and
    after, so a running watch holds no event."""
    _on_lines: Callable[[Watcher], None] | None = attrs.field(default=None, init=False)
    _filter: _Filter | None = attrs.field(default=None, init=False)
    _marks: Marks | None = attrs.field(default=None, init=False)
    _checkpoint: Checkpoint | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        self.delivery = Delivery(self.spec.name, self.spec.uri, self.limits)

    @classmethod
    def restore_failed(cls, spec: WatchSpec, limits: Limits, error: str, *, verbose: bool) -> Watcher:
        """A saved watch that could not start: listed ``restore_failed`` with ``error``, kept saved."""
        watcher = cls(spec, limits, verbose=verbose)
        watcher._status, watcher._error = "restore_failed", error
        return watcher

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def uri(self) -> str:
        return self.spec.uri

    @property
    def status(self) -> Status:
        return self._status

    @property
    def server(self) -> str | None:
        return self._server

    @property
    def live(self) -> bool:
        """Starting or running: it holds (or is taking) a subscription."""
        return self._status in ("starting", "running")

    @property
    def saved_error(self) -> str | None:
        """The reason the watch-state file keeps with its spec: why a restore failed."""
        return self._error if self._status == "restore_failed" else None

    @property
    def checkpoint(self) -> Checkpoint | None:
        """Where the watch stands as of the lines it has queued (with a resume store): what its
        next notice, once handed, lets it resume from."""
        return self._checkpoint

    @property
    def session(self) -> FilterSession | None:
        return self._filter.session if self._filter is not None else None

    def info(self) -> WatchInfo:
        return WatchInfo(
            name=self.spec.name,
            uri=self.spec.uri,
            status="running" if self._status == "starting" else self._status,
            shape=self._shape,
            server=self._server,
            protocol=self._protocol,
            watchable_by_trial=self._by_trial,
            on_event=self.spec.on_event,
            events=self.delivery.events,
            notices=self.delivery.notices,
            error=self._error,
        )

    def log(self, event: str, **fields: object) -> None:
        """A ``watch.*`` record: the watch, its URI and its server's protocol (the era it rides), then ``fields``."""
        if self._protocol is not None:
            fields.setdefault("protocol", self._protocol)
        log.emit(event, verbose=self.verbose, watch=self.spec.name, uri=self.spec.uri, **fields)

    # -- its life, as the manager tells it -------------------------------------------------------

    def routed(self, server: str, protocol: str, *, by_trial: bool) -> None:
        """Its URI is served by ``server``, which speaks ``protocol`` (``by_trial``: a server that
        does not advertise subscriptions took the one it was tried with)."""
        self._server, self._protocol, self._by_trial = server, protocol, by_trial

    def started(self, *, restored: bool) -> None:
        """It began and its filter runs: it is running now."""
        self._status, self._start = "running", None
        self.log("watch.subscribed", server=self._server, attempt=0)
        self.log(
            "watch.started",
            shape=self._shape,
            server=self._server,
            filtered=self.spec.on_event is not None,
            restored=restored,
        )

    def abandon(self) -> None:
        """Its start failed or was cancelled: whoever waits for it to settle goes on."""
        if self._start is not None:
            self._start.settled.set()

    async def start_settled(self) -> None:
        """Return once its start on its connection has settled (at once when it is not starting there)."""
        if self._start is not None:
            await self._start.settled.wait()

    def retry_failed(self, error: str, *, attempt: int, fate: str) -> None:
        """A saved watch's restore was tried again and failed: ``error`` is its reason now."""
        self._error = error
        self.log("watch.restore_retry", attempt=attempt, error=error, fate=fate)

    # -- its life, as its connection's runner tells it --------------------------------------------

    def joining(self) -> None:
        """Its runner joins it to its URI: from now on its start settles (:meth:`begun`)."""
        self._start = _Start()

    @property
    def joined_unsettled(self) -> bool:
        """Joined to its URI, and neither begun nor failed yet."""
        return self._start is not None and not self._start.settled.is_set()

    async def begun(self) -> BaseException | None:
        """Wait until it began on a read (``None``) or failed to: then the error to raise."""
        start = self._start
        assert start is not None, "begun() before joining()"
        await start.settled.wait()
        if start.error is None:
            return None
        cause = start.cause
        if isinstance(cause, NotWatchableError | BaselineError):
            return cause  # already says what to do (a server that cannot be watched, a bad baseline)
        error = WatchError(f"watch_start: {start.error}")
        error.__cause__ = cause
        return error

    def begin(
        self,
        shape: Shape,
        on_lines: Callable[[Watcher], None],
        marks: Marks | None = None,
        checkpoint: Checkpoint | None = None,
    ) -> None:
        """The watch began on its URI's state; ``on_lines`` is told whenever lines were queued,
        ``marks`` (with a resume store) after every read, from ``checkpoint`` on."""
        self._shape = shape
        self._on_lines = on_lines
        self._marks, self._checkpoint = marks, checkpoint
        if self._start is not None:
            self._start.settled.set()

    def fail_start(self, error: str, cause: BaseException | None = None) -> None:
        if self._start is not None:
            self._start.error, self._start.cause = error, cause
            self._start.settled.set()

    def give_up(self, attempts: int, reason: str, *, error: str | None = None) -> list[Notice]:
        """Its subscription gave up after ``attempts`` resubscribes (the last failing with
        ``reason``, an ``error`` of that type name): it is failed, its filter ends; returns its
        notices (what was pending, then the failure)."""
        self._status, self._error = "failed", reason
        notices = self.delivery.failed(reason, attempts, error=error)
        self.log("watch.failed", attempts=attempts, reason=reason, error=error)
        self.stop_filter()
        return notices

    def take(self, pending: Pending, now: float, checkpoint: Checkpoint | None = None) -> None:
        """A read's events (``checkpoint``: where they leave the watch, with a resume store): lines
        at once without a filter, else into the filter's mailbox."""
        filtering = self._filter
        if filtering is None:
            if checkpoint is not None:
                self._checkpoint = checkpoint
            self._add(*self.delivery.lines(pending), now)
            return
        if checkpoint is not None:
            filtering.checkpoint = checkpoint
        mailbox = filtering.mailbox
        filtering.mailbox = (
            pending if mailbox is None else mailbox.then(pending, max_events=MAX_MERGED_EVENTS)
        )
        filtering.mail.set()

    def read_failed(self, error: str, now: float) -> None:
        self._add(self.delivery.read_failed(error), [], now)

    def _add(self, lines: list[Line], records: list[EventRecord], now: float) -> None:
        # The kept/deduped records only when the log takes them (usually it does not).
        wanted = log.events_enabled(verbose=self.verbose)
        kept = self.delivery.add(lines, now, records=wanted)
        if records or kept:
            log.events([*records, *kept], watch=self.spec.name, uri=self.spec.uri, verbose=self.verbose)
        if self._on_lines is not None and self.delivery.deadline is not None:
            self._on_lines(self)
        if self._marks is not None:
            self._marks(self.spec.name, self._checkpoint, self.delivery.deadline is not None)

    # -- the filter's task -----------------------------------------------------------------------

    def use_filter(self, session: FilterSession) -> None:
        """Run ``session`` over this watch's events (in :meth:`filter_events`)."""
        self._filter = _Filter(session)

    def stop_filter(self) -> None:
        """End the filter's task (its session is closed on the way out)."""
        if self._filter is not None:
            self._filter.scope.cancel()

    async def filter_stopped(self) -> None:
        """Return once the filter's task has ended and its session is closed (at once without one)."""
        if self._filter is not None and self._filter.running:
            await self._filter.done.wait()

    async def filter_events(
        self,
        stack: AsyncExitStack,
        clock_now: Callable[[], float],
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run the filter over each read's events until :meth:`stop_filter`; ``stack`` holds the session."""
        filtering = self._filter
        assert filtering is not None
        filtering.running = True
        task_status.started()
        try:
            with filtering.scope:
                async with stack:
                    await self._filter_loop(filtering, clock_now)
        finally:
            filtering.done.set()

    async def _filter_loop(self, filtering: _Filter, clock_now: Callable[[], float]) -> None:
        while True:
            await filtering.mail.wait()
            filtering.mail = anyio.Event()
            pending, filtering.mailbox = filtering.mailbox, None
            if pending is None:
                continue
            if filtering.checkpoint is not None:
                # The lines queued below are of the reads up to it (later ones wait in the mailbox).
                self._checkpoint, filtering.checkpoint = filtering.checkpoint, None
            self._add(*await self.filtered_lines(pending), clock_now())

    async def filtered_lines(self, pending: Pending) -> tuple[list[Line], list[EventRecord]]:
        """``pending``'s lines from the watch's delivery, its events through the ``on_event``
        filter when the watch has one (live reads and the catch-up after a restart alike)."""
        session = self.session
        if session is None or not pending.events:
            return self.delivery.lines(pending)
        dicts = [ev.to_filter_dict(watch=self.spec.name, uri=self.spec.uri) for ev in pending.events]
        try:
            return self.delivery.lines(pending, await session.run(dicts))
        except Exception as exc:  # the session itself failed: one error line, go on
            return self.delivery.filter_failed(pending, describe(exc))


async def open_filter(
    engine: FilterEngine,
    spec: WatchSpec,
    *,
    catalog: Catalog,
    limits: Limits,
    event_log: bool,
    stack: AsyncExitStack,
) -> FilterSession:
    """Validate ``spec.on_event``, open its session (closed by ``stack``) and dry-run it on a
    sample event: a SyntaxError, a NameError and the like fail here, before anything is
    subscribed; a KeyError on the sample is fine."""
    assert spec.on_event is not None
    validate_on_event(spec.on_event, engine=engine)
    refuse_denied_calls(spec.on_event, catalog)
    session = await engine.open(spec.on_event, catalog=catalog, limits=limits)
    stack.push_async_callback(session.aclose)
    await session.dry_run(sample_event(watch=spec.name, uri=spec.uri, event_log=event_log))
    return session
