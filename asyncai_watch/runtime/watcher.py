"""One running watch, as the shell holds it: its spec, its pure delivery, its filter.

A :class:`Watcher` has no task of its own while it has no filter: its connection's runner hands
it each read's events (:meth:`Watcher.take`), it turns them into lines and queues them for the
notice (:class:`~asyncai_watch.core.deliver.Delivery`) at once, and the manager's one debounce
task (:mod:`asyncai_watch.runtime.notices`) sends the notice when it is due. A watch with an
``on_event`` filter has one task, :meth:`Watcher.filter_events`: it takes the events from a
one-slot mailbox (events that come while the filter runs are joined into the slot, never
dropped) and adds the filter's lines when the worker answers. Everything goes forward: update
signal -> read -> extraction -> :meth:`take` -> lines -> debounce -> notice.
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
from asyncai_watch.core.spec import WatchSpec
from asyncai_watch.errors import describe
from asyncai_watch.filters import (
    Catalog,
    FilterEngine,
    FilterSession,
    refuse_denied_calls,
    sample_event,
    validate_on_event,
)
from asyncai_watch.info import WatchInfo

__all__ = ["Status", "Watcher", "open_filter"]

Status = Literal["starting", "running", "failed", "restore_failed"]


@attrs.define(eq=False)
class _Filter:
    """A filtered watch's task state: the one-slot mailbox and the task's scope."""

    session: FilterSession
    mailbox: Pending | None = None
    mail: anyio.Event = attrs.field(factory=anyio.Event)
    scope: anyio.CancelScope = attrs.field(factory=anyio.CancelScope)
    running: bool = False
    done: anyio.Event = attrs.field(factory=anyio.Event)


@attrs.define(eq=False)
class Watcher:
    """One watch (see the module docstring). Identity is the watch: two watchers never compare equal."""

    spec: WatchSpec
    limits: Limits = attrs.field(factory=Limits)
    status: Status = "starting"
    server: str | None = None
    protocol: str | None = None
    """The MCP version the watch's server speaks (its era: listen or legacy subscribe)."""
    watchable_by_trial: bool = False
    """Its server does not advertise subscriptions but accepted the one it was tried with."""
    error: str | None = None
    shape: Shape | None = None
    verbose: bool = False
    scheduled: float | None = None
    """The debounce deadline the notice task holds for this watch (see notices.py)."""
    delivery: Delivery = attrs.field(init=False)
    settled: anyio.Event | None = None
    """While the watch starts: set once the start is settled, begun on a read or failed
    (:attr:`start_error`). ``None`` before and after, so a running watch holds no event."""
    start_error: str | None = None
    start_cause: BaseException | None = None
    _on_lines: Callable[[Watcher], None] | None = None
    _filter: _Filter | None = None

    def __attrs_post_init__(self) -> None:
        self.delivery = Delivery(self.spec.name, self.spec.uri, self.limits)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def uri(self) -> str:
        return self.spec.uri

    @property
    def session(self) -> FilterSession | None:
        return self._filter.session if self._filter is not None else None

    def info(self) -> WatchInfo:
        return WatchInfo(
            name=self.spec.name,
            uri=self.spec.uri,
            status="running" if self.status == "starting" else self.status,
            shape=self.shape,
            server=self.server,
            protocol=self.protocol,
            watchable_by_trial=self.watchable_by_trial,
            on_event=self.spec.on_event,
            events=self.delivery.events,
            notices=self.delivery.notices,
            error=self.error,
        )

    def log(self, event: str, **fields: object) -> None:
        """A ``watch.*`` record: the watch, its URI and its server's protocol (the era it rides), then ``fields``."""
        if self.protocol is not None:
            fields.setdefault("protocol", self.protocol)
        log.emit(event, verbose=self.verbose, watch=self.spec.name, uri=self.spec.uri, **fields)

    # -- what the runner hands it ----------------------------------------------------------------

    def begin(self, shape: Shape, on_lines: Callable[[Watcher], None]) -> None:
        """The watch began on its URI's state; ``on_lines`` is told whenever lines were queued."""
        self.shape = shape
        self._on_lines = on_lines
        if self.settled is not None:
            self.settled.set()

    def fail_start(self, error: str, cause: BaseException | None = None) -> None:
        self.start_error, self.start_cause = error, cause
        if self.settled is not None:
            self.settled.set()

    def take(self, pending: Pending, now: float) -> None:
        """A read's events: lines at once without a filter, else into the filter's mailbox."""
        filtering = self._filter
        if filtering is None:
            self._add(*self.delivery.lines(pending), now)
            return
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
            if not pending.events:
                self._add(*self.delivery.lines(pending), clock_now())
                continue
            dicts = [ev.to_filter_dict(watch=self.spec.name, uri=self.spec.uri) for ev in pending.events]
            try:
                outcome = self.delivery.lines(pending, await filtering.session.run(dicts))
            except Exception as exc:  # the session itself failed: one error line, go on
                outcome = self.delivery.filter_failed(pending, describe(exc))
            self._add(*outcome, clock_now())


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
