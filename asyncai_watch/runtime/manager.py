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

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream

from asyncai_watch import log
from asyncai_watch._tasks import exit_task_group
from asyncai_watch.clock import Clock, SystemClock
from asyncai_watch.core.echo import quoted
from asyncai_watch.core.events import shape_for_mime_type
from asyncai_watch.core.extract import Body
from asyncai_watch.core.limits import Limits
from asyncai_watch.core.notice import Notice
from asyncai_watch.core.restore import Restore, fate, restored_later
from asyncai_watch.core.spec import WatchSpec, check_room
from asyncai_watch.errors import LimitError, NotWatchableError, StateFileError, WatchError, describe
from asyncai_watch.filters import FilterEngine, default_engine
from asyncai_watch.info import ResourceInfo, WatchInfo, resource_infos
from asyncai_watch.mcp.source import MODERN_PROTOCOL_VERSION, ResourceSource, TriableSource
from asyncai_watch.runtime.catalog import Catalogs
from asyncai_watch.runtime.gcpause import gc_paused
from asyncai_watch.runtime.notices import Notices
from asyncai_watch.runtime.offload import Offload
from asyncai_watch.runtime.runner import Runner
from asyncai_watch.runtime.tools import ReadOnlyCatalog, list_tools, tool_names
from asyncai_watch.runtime.topic import LARGE_BODY
from asyncai_watch.runtime.watcher import Watcher, open_filter
from asyncai_watch.shapes import resource_dicts
from asyncai_watch.state_file import SavedWatch, StateFile

__all__ = ["WatchManager"]

_RESTORE_AT_ONCE: Final = 256  # saved watches started at once on entry


class WatchManager:
    """Owns every watch of one agent; use as ``async with WatchManager(sources) as m:``.

    ``sources`` are connected servers (:class:`~asyncai_watch.mcp.source.ResourceSource`).
    ``watch_state`` is the ``--watch-state`` file: specs are saved on every start and stop
    and restored on entry. ``filter_engine`` runs ``on_event`` filters (default: the
    RestrictedPython worker engine). Leaving the ``async with`` block cancels every watch
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
    ) -> None:
        if isinstance(notice_buffer, bool) or not isinstance(notice_buffer, int) or notice_buffer < 1:
            # 0 would make the restore notice, sent before ``async with`` returns, wait for a reader forever.
            raise LimitError(f"WatchManager: notice_buffer must be an int >= 1, got {notice_buffer!r}")
        if limits is not None and not isinstance(limits, Limits):
            raise LimitError(f"WatchManager: limits must be a Limits value, got {type(limits).__name__}")
        self.sources: tuple[ResourceSource, ...] = tuple(sources)
        self.limits = limits if limits is not None else Limits()
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.verbose = verbose
        self._state = StateFile(watch_state) if watch_state is not None else None
        self._engine: FilterEngine = (
            filter_engine if filter_engine is not None else default_engine(self.limits)
        )
        self._catalogs = Catalogs(
            self.sources, describe=describe, on_list_failed=self._list_failed, clock=self.clock
        )
        self._offload = Offload()
        self._watchers: dict[str, Watcher] = {}
        self._runners: dict[str, Runner] = {}
        self._save_lock = anyio.Lock()
        self._restoring = anyio.CapacityLimiter(_RESTORE_AT_ONCE)
        self.notices: MemoryObjectReceiveStream[Notice]
        """Every notice, in order; iterate it (``async for notice in m.notices``)."""
        send, self.notices = anyio.create_memory_object_stream[Notice](notice_buffer)
        self._notices = Notices(self.clock, send)
        self._tg: anyio.abc.TaskGroup | None = None
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._tg is not None or self._closed:
            raise RuntimeError("WatchManager can be entered once")
        # Load first: a corrupt state file stops us before anything runs or is written.
        saved = self._state.load(max_watches=self.limits.max_watches) if self._state is not None else []
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        try:
            tg.start_soon(self._notices.run, name="notices")
            for source in self.sources:
                runner = self._runners[source.name] = Runner(
                    source,
                    limits=self.limits,
                    clock=self.clock,
                    offload=self._offload,
                    notices=self._notices,
                    tg=tg,
                )
                tg.start_soon(runner.run, name=f"runner {source.name}")
                # "": not connected yet (serve's upstreams connect in the background); a legacy
                # server ends its follower at once (NotWatchableError).
                if source.protocol_version in (MODERN_PROTOCOL_VERSION, ""):
                    tg.start_soon(self._catalogs.follow_list_changes, source)
            if saved:
                # Restored watches run at once, but their notices wait for the restore notice: a
                # burst from them could otherwise fill the buffer before it, and this would never return.
                await self._restore(saved)
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
                watchers = list(self._watchers.values())
                for watcher in watchers:
                    watcher.stop_filter()
                for watcher in watchers:
                    await watcher.filter_stopped()
                await self._offload.aclose()
            if tg is None:
                return None
            return await exit_task_group(tg, exc_type, exc, tb)
        finally:
            for watcher in self._watchers.values():
                if watcher.live:
                    watcher.log("watch.stopped", reason="manager closed")
            self._notices.close()
            if self._state is not None:
                self._state.close()  # the file's lock: the next owner may start now

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
        watcher = self._watchers.get(name)
        if watcher is None:
            return False
        await watcher.start_settled()
        if self._watchers.get(name) is not watcher:
            return False
        await self._save(without=name)
        del self._watchers[name]
        await self._end(watcher)
        watcher.log("watch.stopped", reason="watch_stop")
        return True

    def watch_list(self) -> list[WatchInfo]:
        """Every watch, started ones in start order (``failed`` / ``restore_failed`` included)."""
        return [w.info() for w in self._watchers.values() if w.status != "starting"]

    async def flush(self) -> None:
        """Send every watch's pending lines now, each as a notice, without waiting for its
        debounce: what a process does on a graceful exit, so no change is dropped on the way out."""
        self._check_open()
        await self._notices.flush(list(self._watchers.values()))

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
        async with self._save_lock:
            pass

    # -- starting --------------------------------------------------------------------------------

    async def _start(self, name: str, uri: str, on_event: str | None, *, restoring: bool) -> WatchInfo:
        watcher, previous = self._reserve(name, uri, on_event)
        return await self._run(watcher, previous, restoring=restoring)

    def _reserve(self, name: str, uri: str, on_event: str | None) -> tuple[Watcher, Watcher | None]:
        """Check the spec and that a slot is free, and take the name: two concurrent starts of one
        name must not both win. Returns the new watcher and the one it replaces (a saved watch
        that failed), if any."""
        self._check_open()
        spec = WatchSpec.checked(name, uri, on_event)
        check_room(spec, _Slots(self._watchers), self.limits.max_watches)
        previous = self._watchers.get(name)
        watcher = Watcher(spec, self.limits, verbose=self.verbose)
        self._watchers[name] = watcher
        return watcher, previous

    async def _run(self, watcher: Watcher, previous: Watcher | None, *, restoring: bool) -> WatchInfo:
        """Launch a reserved watcher; on failure its name goes back to what it replaced."""
        name = watcher.name
        try:
            await self._launch(watcher)
        except BaseException:
            if self._watchers.get(name) is watcher:
                if previous is not None:
                    self._watchers[name] = previous  # a failed restart keeps the saved failed spec
                else:
                    del self._watchers[name]
            watcher.abandon()
            raise
        watcher.started(restored=restoring)
        if not restoring:
            try:
                await self._save()
            except StateFileError:
                if self._watchers.get(name) is watcher:
                    del self._watchers[name]
                await self._end(watcher)
                raise
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

    # -- persistence -----------------------------------------------------------------------------

    async def _save(self, *, without: str | None = None) -> None:
        if self._state is None:
            return
        async with self._save_lock:
            saved = [
                SavedWatch(w.spec, w.saved_error)
                for n, w in self._watchers.items()
                if w.status != "starting" and n != without
            ]
            await anyio.to_thread.run_sync(self._state.save, saved)

    async def _restore(self, saved: Sequence[SavedWatch]) -> None:
        """Start every saved watch. One that cannot start is listed ``restore_failed`` with its
        reason and stays saved; one that may start later is tried again in the background
        (:func:`~asyncai_watch.core.restore.fate`). No saved spec is ever dropped."""
        assert self._state is not None
        assert self._tg is not None
        delays = self.limits.backoff.delays()
        outcome = Restore(str(self._state.path), delays)
        failed: dict[str, Exception] = {}

        def keep(spec: WatchSpec, exc: Exception) -> None:
            # Listed restore_failed, saved with its reason, in its slot (saved specs keep theirs).
            failed[spec.name] = exc
            self._watchers[spec.name] = Watcher.restore_failed(
                spec, self.limits, describe(exc), verbose=self.verbose
            )

        async def launch(watcher: Watcher) -> None:
            async with self._restoring:
                try:
                    await self._run(watcher, None, restoring=True)
                except Exception as exc:
                    keep(watcher.spec, exc)

        # Slots are taken in saved order, then the starts run at once (a bridge restarting with
        # thousands of watches): the connection's feed groups their subscriptions.
        async with anyio.create_task_group() as tg:
            for entry in saved:
                spec = entry.spec
                try:
                    watcher, _ = self._reserve(spec.name, spec.uri, spec.on_event)
                except Exception as exc:
                    keep(spec, exc)
                else:
                    tg.start_soon(launch, watcher)
        for entry in saved:
            spec = entry.spec
            error = failed.get(spec.name)
            if error is None:
                outcome.add(spec, None)
            elif outcome.add(spec, error, describe(error)) == "retry" and delays:
                self._tg.start_soon(self._retry_restore, spec, name=f"restore {spec.name}")
        # watch_list in saved order, whichever start finished first.
        order = {entry.spec.name: i for i, entry in enumerate(saved)}
        self._watchers = dict(sorted(self._watchers.items(), key=lambda item: order.get(item[0], len(order))))
        if outcome.retrying or outcome.broken:
            await self._save()  # each reason goes into the file with its spec
        log.emit(
            "watch.restored",
            verbose=self.verbose,
            path=outcome.path,
            restored=[s.name for s in outcome.restored],
            retrying=[s.name for s, _ in outcome.retrying],
            restore_failed=[s.name for s, _ in (*outcome.retrying, *outcome.broken)],
        )
        await self._notices.open(outcome.notice())  # before any other notice

    async def _retry_restore(self, spec: WatchSpec) -> None:
        """Try a saved watch again after each of the backoff's delays, while it is still the one
        that could not start (the user may have started it another way, or stopped it)."""
        for attempt, delay in enumerate(self.limits.backoff.delays(), 1):
            await self.clock.sleep_until(self.clock.now() + delay)
            waiting = self._watchers.get(spec.name)
            if waiting is None or waiting.status != "restore_failed" or waiting.spec != spec:
                return
            try:
                await self._start(spec.name, spec.uri, spec.on_event, restoring=True)
            except Exception as exc:
                waiting.retry_failed(describe(exc), attempt=attempt, fate=fate(exc))
                await self._save()
                if fate(exc) == "broken":
                    return
            else:
                await self._save()
                self._notices.now(None, [restored_later(spec, attempt)])
                return

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


class _Slots(Mapping[str, tuple[str, str]]):
    """The manager's watches as ``check_room`` reads them (name -> (uri, status)), without a copy."""

    def __init__(self, watchers: dict[str, Watcher]) -> None:
        self._watchers = watchers

    def __getitem__(self, name: str) -> tuple[str, str]:
        watcher = self._watchers[name]
        return watcher.spec.uri, watcher.status

    def __iter__(self) -> Iterator[str]:
        return iter(self._watchers)

    def __len__(self) -> int:
        return len(self._watchers)
