"""WatchManager: the async shell around the pure watch core.

The manager owns one task group. In it run, per connected server, a
:class:`~asyncai_watch.runtime.runner.Runner` that executes that connection's pure
:class:`~asyncai_watch.core.feed.Feed` (listens, reads, resubscribes); one task
(:class:`~asyncai_watch.runtime.notices.Notices`) that sends every notice when its debounce
deadline comes (on the injectable :class:`~asyncai_watch.clock.Clock`); and one task per watch
that has an ``on_event`` filter. A watch without a filter is no task at all: a
:class:`~asyncai_watch.runtime.watcher.Watcher` that its runner hands each read's events. The
manager names, starts, stops, persists and restores watches, routes URIs to servers, and passes
notices on. Nothing runs while the subscriptions are quiet.

The manager never calls a model: the agent consumes :attr:`WatchManager.notices`.
"""

from __future__ import annotations

import random as _random
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import anyio
import anyio.abc
import attrs
from anyio.streams.memory import MemoryObjectReceiveStream

from asyncai_watch import log
from asyncai_watch._tasks import exit_task_group
from asyncai_watch.clock import Clock, SystemClock
from asyncai_watch.core.echo import quoted
from asyncai_watch.core.events import shape_for_mime_type
from asyncai_watch.core.extract import Body
from asyncai_watch.core.limits import Limits
from asyncai_watch.core.notice import Notice
from asyncai_watch.core.resume import (
    CatchUp,
    Checkpoint,
    Outcome,
    away_notice,
    catch_up_log,
    catch_up_state,
    redelivered,
)
from asyncai_watch.core.spec import WatchSpec
from asyncai_watch.errors import LimitError, NotWatchableError, StateFileError, WatchError, describe
from asyncai_watch.filters import FilterEngine, default_engine
from asyncai_watch.info import ResourceInfo, WatchInfo, resource_infos
from asyncai_watch.mcp.source import MODERN_PROTOCOL_VERSION, ResourceSource, TriableSource
from asyncai_watch.runtime.catalog import Catalogs
from asyncai_watch.runtime.gcpause import gc_paused
from asyncai_watch.runtime.notices import Notices
from asyncai_watch.runtime.offload import Offload
from asyncai_watch.runtime.persistence import Persistence
from asyncai_watch.runtime.resume import Resume
from asyncai_watch.runtime.runner import Runner
from asyncai_watch.runtime.tools import ReadOnlyCatalog, list_tools, tool_names
from asyncai_watch.runtime.topic import LARGE_BODY, parse
from asyncai_watch.runtime.watcher import Watcher, open_filter
from asyncai_watch.runtime.watches import Watches
from asyncai_watch.shapes import resource_dicts

__all__ = ["WatchManager"]


class WatchManager:
    """Owns every watch of one agent; use as ``async with WatchManager(sources) as m:``.

    ``sources`` are connected servers (:class:`~asyncai_watch.mcp.source.ResourceSource`).
    ``watch_state`` is the ``--watch-state`` file: specs are saved on every start and stop
    and restored on entry. ``filter_engine`` runs ``on_event`` filters (default: the
    RestrictedPython worker engine). ``clock`` (default: the system's) and ``random`` (a
    function drawing a number in [0, 1) for the resubscribe jitter, default :func:`random.random`)
    are injectable for reproducible tests. Leaving the ``async with`` block cancels every watch
    and closes :attr:`notices`.
    """

    def __init__(
        self,
        sources: Sequence[ResourceSource],
        *,
        limits: Limits | None = None,
        clock: Clock | None = None,
        watch_state: Path | str | None = None,
        verbose: bool = False,
        filter_engine: FilterEngine | None = None,
        notice_buffer: int = 64,
        random: Callable[[], float] | None = None,
    ) -> None:
        if isinstance(notice_buffer, bool) or not isinstance(notice_buffer, int) or notice_buffer < 1:
            # 0 would make the restore notice, sent before ``async with`` returns, wait for a reader forever.
            raise LimitError(f"WatchManager: notice_buffer must be an int >= 1, got {notice_buffer!r}")
        if limits is not None and not isinstance(limits, Limits):
            raise LimitError(f"WatchManager: limits must be a Limits value, got {type(limits).__name__}")
        self.sources: tuple[ResourceSource, ...] = tuple(sources)
        self.limits = limits if limits is not None else Limits()
        self.clock: Clock = clock if clock is not None else SystemClock()
        # Draws the resubscribe jitter (Limits.resubscribe_jitter): inject a seeded one, like the
        # clock, for a reproducible run.
        self._random: Callable[[], float] = random if random is not None else _random.random
        self.verbose = verbose
        self._engine: FilterEngine = (
            filter_engine if filter_engine is not None else default_engine(self.limits)
        )
        self._catalogs = Catalogs(
            self.sources, describe=describe, on_list_failed=self._list_failed, clock=self.clock
        )
        self._offload = Offload()
        self._watches = Watches(self.limits, verbose=verbose)
        self._runners: dict[str, Runner] = {}
        self.notices: MemoryObjectReceiveStream[Notice]
        """Every notice, in order; iterate it (``async for notice in m.notices``)."""
        send, self.notices = anyio.create_memory_object_stream[Notice](notice_buffer)
        self._resume = Resume(watch_state, self.clock, verbose=verbose)
        self._notices = Notices(self.clock, send, resume=self._resume)
        self._state = Persistence(
            watch_state,
            self._watches,
            limits=self.limits,
            clock=self.clock,
            notices=self._notices,
            verbose=verbose,
        )
        self._tg: anyio.abc.TaskGroup | None = None
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._tg is not None or self._closed:
            raise RuntimeError("WatchManager can be entered once")
        # Load first: a corrupt state file stops us before anything runs or is written.
        saved = self._state.load()
        try:
            checkpoints = self._resume.open()  # beside the file, which is ours now
        except BaseException:
            self._state.close()
            raise
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        try:
            tg.start_soon(self._notices.run, name="notices")
            if self._resume.on:
                tg.start_soon(self._resume.run, name="resume store")
            for source in self.sources:
                runner = self._runners[source.name] = Runner(
                    source,
                    limits=self.limits,
                    clock=self.clock,
                    offload=self._offload,
                    notices=self._notices,
                    tg=tg,
                    marks=self._resume.mark if self._resume.on else None,
                    random=self._random,
                )
                tg.start_soon(runner.run, name=f"runner {source.name}")
                # "": not connected yet (serve's upstreams connect in the background); a legacy
                # server ends its follower at once (NotWatchableError).
                if source.protocol_version in (MODERN_PROTOCOL_VERSION, ""):
                    tg.start_soon(self._catalogs.follow_list_changes, source)
            # Notices handed before a restart whose turns did not complete: again, flagged.
            self._notices.now(None, [redelivered(n) for n in self._resume.pending()])
            if saved:
                # Restored watches run at once, but their notices wait for the restore notice: a
                # burst from them could otherwise fill the buffer before it, and this would never return.
                await self._state.restore(
                    saved,
                    launch=self._restored,
                    start=self._start_saved,
                    tg=tg,
                    catch_up=(lambda w: self._catch_up(w, checkpoints.get(w.name)))
                    if self._resume.on
                    else None,
                )
            await self._notices.open()
        except BaseException as exc:
            await self.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        tg, self._tg = self._tg, None
        self._closed = True
        try:
            # Filters first, so their sessions close before the engine they run on.
            with anyio.CancelScope(shield=True):
                watchers = list(self._watches)
                for watcher in watchers:
                    watcher.stop_filter()
                for watcher in watchers:
                    await watcher.filter_stopped()
                await self._offload.aclose()
            if tg is None:
                return None
            return await exit_task_group(tg, exc_type, exc, tb)
        finally:
            for watcher in self._watches:
                if watcher.live:
                    watcher.log("watch.stopped", reason="manager closed")
            self._notices.close()
            self._resume.close()
            self._state.close()

    # -- public API ------------------------------------------------------------------------------

    async def watch_start(self, name: str, uri: str, on_event: str | None = None) -> WatchInfo:
        """Start a watch and return it. The baseline read happens inside the call, so a server
        that rejects the URI fails it, and a bad filter fails it before anything is subscribed.

        Raises :class:`~asyncai_watch.InvalidWatchNameError`, :class:`~asyncai_watch.WatchError`
        (duplicate name, read/subscribe failure), :class:`~asyncai_watch.FilterError`,
        :class:`~asyncai_watch.LimitError`, :class:`~asyncai_watch.RoutingError` or
        :class:`~asyncai_watch.NotWatchableError`.
        """
        return await self._start(name, uri, on_event, restoring=False)

    async def watch_stop(self, name: str) -> bool:
        """Stop and forget watch ``name``; ``False`` when there is none by that name.

        With a ``watch_state`` file the file is written first: if that fails, the watch keeps
        running and :class:`~asyncai_watch.StateFileError` says why (memory and file agree).
        """
        self._check_open()
        watcher = self._watches.get(name)
        if watcher is None:
            return False
        await watcher.start_settled()
        if self._watches.get(name) is not watcher:
            return False
        await self._state.save(without=name)
        self._resume.forget(name)
        self._watches.release(watcher)
        await self._end(watcher)
        watcher.log("watch.stopped", reason="watch_stop")
        return True

    def watch_list(self) -> list[WatchInfo]:
        """Every watch, started ones in start order (``failed`` / ``restore_failed`` included)."""
        return [w.info() for w in self._watches if w.status != "starting"]

    def notice_taken(self, notice: Notice) -> None:
        """The turn that read ``notice`` completed. With a ``watch_state`` file a watch's notice is
        kept until then: a process killed before it hands the notice over again after its restart,
        flagged ``meta["redelivered"] == "1"``. Without one (or for any other notice) nothing happens."""
        self._resume.taken(notice)

    async def flush(self) -> None:
        """Send every watch's pending lines now, each as a notice, without waiting for its
        debounce: what a process does on a graceful exit, so no change is dropped on the way out."""
        self._check_open()
        await self._notices.flush(self._watches)

    async def list_resources(self) -> list[ResourceInfo]:
        """Every server's resources and templates (listed afresh, concurrently)."""
        listings = await self._catalogs.listings(refresh=True)
        return [
            info for entry in listings if entry.catalog is not None for info in resource_infos(entry.catalog)
        ]

    async def read_resource(self, uri: str) -> Any:
        """Read ``uri`` from the server that serves it: parsed JSON, else the text."""
        if not isinstance(uri, str) or not uri:
            raise WatchError(f"read_resource: uri must be a non-empty string, got {quoted(uri)}")
        source, _ = await self._catalogs.route(uri, what="read_resource")
        result = await source.read(uri)
        if len(result.text) > LARGE_BODY:
            return (await anyio.to_thread.run_sync(_parse_large, result.text)).value
        return Body.parse(result.text).value

    async def state_saved(self) -> None:
        """Return once no write of the ``watch_state`` file is in flight (each start and stop
        has saved before it returned, so what was acknowledged is on disk then)."""
        await self._state.saved()

    # -- starting --------------------------------------------------------------------------------

    async def _start(self, name: str, uri: str, on_event: str | None, *, restoring: bool) -> WatchInfo:
        watcher, previous = self._reserve(name, uri, on_event)
        return await self._run(watcher, previous, restoring=restoring)

    def _reserve(self, name: str, uri: str, on_event: str | None) -> tuple[Watcher, Watcher | None]:
        """Take the name (see :meth:`Watches.reserve`) while the manager is open."""
        self._check_open()
        return self._watches.reserve(name, uri, on_event)

    async def _restored(self, watcher: Watcher) -> None:
        await self._run(watcher, None, restoring=True)

    async def _start_saved(self, spec: WatchSpec) -> None:
        await self._start(spec.name, spec.uri, spec.on_event, restoring=True)

    async def _run(self, watcher: Watcher, previous: Watcher | None, *, restoring: bool) -> WatchInfo:
        """Launch a reserved watcher; on failure its name goes back to what it replaced."""
        try:
            await self._launch(watcher)
        except BaseException:
            self._watches.release(watcher, previous)
            watcher.abandon()
            raise
        watcher.started(restored=restoring)
        if not restoring:
            try:
                await self._state.save()
            except StateFileError:
                self._watches.release(watcher)
                await self._end(watcher)
                raise
            self._resume.started(watcher.name, watcher.checkpoint)
        return watcher.info()

    async def _launch(self, watcher: Watcher) -> None:
        """Route, check the filter, subscribe and take the baseline (on the URI's connection),
        and start the filter's task; any failure leaves nothing running."""
        spec = watcher.spec
        source, found = await self._catalogs.route(spec.uri, what="watch_start")
        if not source.watchable:
            if not isinstance(source, TriableSource):
                raise NotWatchableError.for_server(source.name, source.protocol_version)
            # The capability fallback: subscriptions not advertised are tried once, on this URI.
            await source.try_subscription(spec.uri)
        watcher.routed(
            source.name,
            source.protocol_version,
            by_trial=isinstance(source, TriableSource) and source.watchability == "accepted",
        )
        runner = self._runners[source.name]
        async with AsyncExitStack() as stack:
            if spec.on_event is not None:
                tools = tool_names(await list_tools(self.sources, on_error=self._tools_failed))
                catalog = ReadOnlyCatalog(
                    tools, read_resource=self.read_resource, list_resources=self._code_mode_resources
                )
                event_log = shape_for_mime_type(found.mime_type) == "event-log"
                watcher.use_filter(
                    await open_filter(
                        self._engine,
                        spec,
                        catalog=catalog,
                        limits=self.limits,
                        event_log=event_log,
                        stack=stack,
                    )
                )
            await runner.join(watcher)
            if watcher.session is not None:
                assert self._tg is not None
                await self._tg.start(watcher.filter_events, stack.pop_all(), self.clock.now)

    async def _end(self, watcher: Watcher) -> None:
        """Leave the watch's subscription (closing it if it was the last) and end its filter."""
        runner = self._runners.get(watcher.server or "")
        if runner is not None and watcher.live:
            await runner.leave(watcher)
        watcher.stop_filter()
        with anyio.CancelScope(shield=True):
            await watcher.filter_stopped()

    # -- resuming --------------------------------------------------------------------------------

    async def _catch_up(self, watcher: Watcher, saved: Checkpoint | None) -> tuple[Outcome, Notice | None]:
        """A restored watch's outcome (resumed / caught up / fresh baseline and why) and its one
        ``while you were away`` notice: the events after its saved position up to its baseline
        (an event log, read from that position), or its saved body diffed against the baseline."""
        runner = self._runners.get(watcher.server or "")
        topic = runner.topics.get(watcher.uri) if runner is not None else None
        baseline = watcher.checkpoint
        if topic is None or baseline is None:
            got = CatchUp(Outcome("fresh", reason="its baseline is kept in the large-body worker"))
        elif saved is not None and saved.uri != watcher.uri:
            got = CatchUp(Outcome("fresh", reason=f"the saved checkpoint is of another URI ({saved.uri})"))
        elif topic.shape == "event-log":
            if saved is None or saved.position is None:
                got = CatchUp(Outcome("fresh", reason="no position was saved for it"))
            else:
                assert runner is not None
                try:
                    body = parse(await runner.source.read(watcher.uri, after=saved.position))
                except Exception as exc:
                    got = CatchUp(
                        Outcome("fresh", reason=f"reading from its saved position failed: {describe(exc)}")
                    )
                else:
                    value = body.parsed_body()
                    got = _upto(
                        catch_up_log(saved.position, value.value if value.error is None else value.text)[0],
                        baseline,
                    )
        elif baseline.body is None:
            got = CatchUp(Outcome("fresh", reason=baseline.skipped or "its body is not kept"))
        else:
            got = catch_up_state(saved, Body.of(baseline.body, baseline.mime_type))
        if not got.events:
            self._resume.started(watcher.name, baseline)
            return got.outcome, None
        self._resume.mark(watcher.name, None, True)  # held until the notice is handed
        return got.outcome, away_notice(watcher.name, watcher.uri, got.events)

    # -- helpers ---------------------------------------------------------------------------------

    async def _code_mode_resources(self) -> list[dict[str, Any]]:
        return resource_dicts(await self.list_resources())

    def _check_open(self) -> None:
        if self._tg is None or self._closed:
            raise RuntimeError("WatchManager is not running: use it as `async with WatchManager(...) as m:`")

    def _list_failed(self, source: ResourceSource, exc: BaseException) -> None:
        # One unreachable server must not hide the others; the log says why it is missing.
        log.emit("watch.list_failed", verbose=self.verbose, server=source.name, error=describe(exc))

    def _tools_failed(self, source: ResourceSource, exc: Exception) -> None:
        # A server whose tools cannot be listed offers none to the filter; the watch still starts.
        log.emit("watch.tools_unavailable", verbose=self.verbose, server=source.name, error=describe(exc))


def _parse_large(text: str) -> Body:
    with gc_paused(len(text)):
        return Body.parse(text)


def _upto(got: CatchUp, baseline: Checkpoint) -> CatchUp:
    """``got`` without the events after the watch's baseline (the watch delivers those itself)."""
    if baseline.position is None:
        return got
    _, seq = baseline.position
    events = tuple(ev for ev in got.events if ev.seq is None or ev.seq <= seq)
    if len(events) == len(got.events):
        return got
    changes = sum(1 for ev in events if ev.type != "GAP")
    if not events:
        return CatchUp(Outcome("resumed"))
    return CatchUp(attrs.evolve(got.outcome, changes=changes), events)
