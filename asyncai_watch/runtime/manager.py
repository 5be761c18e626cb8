"""WatchManager: the async shell around the pure watch core.

The manager owns one task group. In it run the shared subscriptions
(:class:`~asyncai_watch.runtime.subscriptions.Feed`, one per server and URI) and one
:class:`~asyncai_watch.runtime.watch_task.WatchTask` loop per watch, which waits for its feed or its
debounce deadline (on the injectable :class:`~asyncai_watch.clock.Clock`) and feeds the pure
:class:`~asyncai_watch.core.watch.Watch`. The manager names, starts, stops, persists and
restores watches, routes URIs to servers, and passes notices on. Nothing runs while the
subscriptions are quiet.

The manager never calls a model: the agent consumes :attr:`WatchManager.notices`.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from asyncai_watch import log
from asyncai_watch._tasks import exit_task_group
from asyncai_watch.clock import Clock, SystemClock
from asyncai_watch.core.events import shape_for_mime_type
from asyncai_watch.core.limits import Limits
from asyncai_watch.core.notice import Notice
from asyncai_watch.core.restore import Restore, fate
from asyncai_watch.core.spec import WatchSpec, check_room
from asyncai_watch.core.watch import Body, Watch
from asyncai_watch.errors import (
    LimitError,
    NotWatchableError,
    StateFileError,
    WatchError,
)
from asyncai_watch.filters import FilterEngine, default_engine
from asyncai_watch.info import ResourceInfo, WatchInfo, resource_infos
from asyncai_watch.mcp.source import MODERN_PROTOCOL_VERSION, ResourceSource
from asyncai_watch.runtime.catalog import Catalogs
from asyncai_watch.runtime.filtering import open_filter
from asyncai_watch.runtime.offload import Offload
from asyncai_watch.runtime.subscriptions import LARGE_BODY, Feed, describe
from asyncai_watch.runtime.tools import ReadOnlyCatalog, list_tools, tool_names
from asyncai_watch.runtime.watch_task import WatchTask
from asyncai_watch.shapes import resource_dicts
from asyncai_watch.state_file import StateFile

__all__ = ["WatchManager"]


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
        self._runs: dict[str, WatchTask] = {}
        self._feeds: dict[tuple[str, str], Feed] = {}
        self._save_lock = anyio.Lock()
        self._restore_sent: anyio.Event | None = None  # set once a restore's notice is queued
        self._send: MemoryObjectSendStream[Notice]
        self.notices: MemoryObjectReceiveStream[Notice]
        """Every notice, in order; iterate it (``async for notice in m.notices``)."""
        self._send, self.notices = anyio.create_memory_object_stream[Notice](notice_buffer)
        self._tg: anyio.abc.TaskGroup | None = None
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._tg is not None or self._closed:
            raise RuntimeError("WatchManager can be entered once")
        # Load first: a corrupt state file stops us before anything runs or is written.
        specs = self._state.load() if self._state is not None else []
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        try:
            for source in self.sources:
                # "": not connected yet (serve's upstreams connect in the background); a legacy
                # server ends its follower at once (NotWatchableError).
                if source.protocol_version in (MODERN_PROTOCOL_VERSION, ""):
                    tg.start_soon(self._catalogs.follow_list_changes, source)
            if specs:
                # Restored watches run at once, but their notices wait for the restore notice: a
                # burst from them could otherwise fill the buffer before it, and this would never return.
                self._restore_sent = anyio.Event()
                await self._restore(specs)
                self._restore_sent.set()
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
            # Watches first, so their filter sessions close before the engine they run on.
            with anyio.CancelScope(shield=True):
                runs = list(self._runs.values())
                for run in runs:
                    if run.scope is not None:
                        run.scope.cancel()
                for run in runs:
                    if run.scope is not None:
                        await run.done.wait()
                await self._offload.aclose()
            if tg is None:
                return None
            return await exit_task_group(tg, exc_type, exc, tb)
        finally:
            for run in self._runs.values():
                if run.status in ("running", "starting"):
                    self._log("watch.stopped", run, reason="manager closed")
            self._send.close()
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
        run = self._runs.get(name)
        if run is None:
            return False
        if run.status == "starting":
            await run.settled.wait()
            if self._runs.get(name) is not run:
                return False
        await self._save(without=name)
        del self._runs[name]
        await run.end()
        self._log("watch.stopped", run, reason="watch_stop")
        return True

    async def flush(self) -> None:
        """Send every watch's pending lines now, without waiting out the debounce quiet time (for a
        graceful close: Ctrl-C must not drop a change that was still being debounced). When it
        returns, the notices are on :attr:`notices`."""
        self._check_open()
        for run in list(self._runs.values()):
            await run.flush(self._send_notice)

    def watch_list(self) -> list[WatchInfo]:
        """Every watch, started ones in start order (``failed`` / ``restore_failed`` included)."""
        return [run.info() for run in self._runs.values() if run.status != "starting"]

    async def list_resources(self) -> list[ResourceInfo]:
        """Every server's resources and templates (listed afresh, concurrently)."""
        listings = await self._catalogs.listings(refresh=True)
        return [
            info for entry in listings if entry.catalog is not None for info in resource_infos(entry.catalog)
        ]

    async def read_resource(self, uri: str) -> Any:
        """Read ``uri`` from the server that serves it: parsed JSON, else the text."""
        if not isinstance(uri, str) or not uri:
            raise WatchError(f"read_resource: uri must be a non-empty string, got {uri!r}")
        source, _ = await self._catalogs.route(uri, what="read_resource")
        result = await source.read(uri)
        if len(result.text) > LARGE_BODY:
            return (await anyio.to_thread.run_sync(Body.parse, result.text)).value
        return Body.parse(result.text).value

    async def state_saved(self) -> None:
        """Return once no write of the ``watch_state`` file is in flight (each start and stop
        has saved before it returned, so what was acknowledged is on disk then)."""
        async with self._save_lock:
            pass

    # -- starting --------------------------------------------------------------------------------

    async def _start(self, name: str, uri: str, on_event: str | None, *, restoring: bool) -> WatchInfo:
        self._check_open()
        spec = WatchSpec.checked(name, uri, on_event)
        check_room(spec, {n: (r.spec.uri, r.status) for n, r in self._runs.items()}, self.limits.max_watches)
        previous = self._runs.get(name)
        run = WatchTask(spec)
        # Reserve the name now: two concurrent starts of one name must not both win.
        self._runs[name] = run
        try:
            await self._launch(run)
        except BaseException:
            if self._runs.get(name) is run:
                if previous is not None:
                    self._runs[name] = previous  # a failed restart keeps the saved failed spec
                else:
                    del self._runs[name]
            run.settled.set()
            raise
        run.status = "running"
        run.settled.set()
        assert run.core is not None
        self._log("watch.subscribed", run, server=run.server, attempt=0)
        self._log(
            "watch.started",
            run,
            shape=run.core.shape,
            server=run.server,
            filtered=on_event is not None,
            restored=restoring,
        )
        if not restoring:
            try:
                await self._save()
            except StateFileError:
                if self._runs.get(name) is run:
                    del self._runs[name]
                await run.end()
                raise
        return run.info()

    async def _launch(self, run: WatchTask) -> None:
        """Route, check the filter, subscribe (or join a subscription), take the baseline, and
        start the watch's loop; any failure leaves nothing running."""
        spec = run.spec
        source, found = await self._catalogs.route(spec.uri, what="watch_start")
        if not source.watchable:
            raise NotWatchableError.for_server(source.name, source.protocol_version, MODERN_PROTOCOL_VERSION)
        run.server = source.name
        async with AsyncExitStack() as stack:
            if spec.on_event is not None:
                tools = tool_names(await list_tools(self.sources, on_error=self._tools_failed))
                catalog = ReadOnlyCatalog(
                    tools, read_resource=self.read_resource, list_resources=self._code_mode_resources
                )
                event_log = shape_for_mime_type(found.mime_type) == "event-log"
                run.session = await open_filter(
                    self._engine, spec, catalog=catalog, limits=self.limits, event_log=event_log, stack=stack
                )
            core = Watch(spec.name, spec.uri, self.limits)
            body = await self._subscribe(run, source)
            try:
                if body.parsed:
                    core.baseline(body)
                else:
                    await self._offload.baseline(core, body)
            except BaseException:
                run.leave()
                raise
            run.core = core
            assert self._tg is not None
            await self._tg.start(
                functools.partial(
                    run.run,
                    stack.pop_all(),
                    clock=self.clock,
                    offload=self._offload,
                    deliver=self._send_notice,
                    verbose=self.verbose,
                )
            )

    async def _subscribe(self, run: WatchTask, source: ResourceSource) -> Body:
        """The baseline read of ``run``'s URI, on the feed that carries it (made if need be)."""
        key = (source.name, run.spec.uri)
        feed = self._feeds.get(key)
        if feed is None:
            feed = self._feeds[key] = Feed(
                source, run.spec.uri, limits=self.limits, clock=self.clock, on_end=self._feed_ended
            )
            run.feed = feed
            assert self._tg is not None
            body: Body = await self._tg.start(feed.run, run.inbox)
            return body
        run.feed = feed
        return await feed.join(run.inbox)

    def _feed_ended(self, feed: Feed) -> None:
        key = (feed.source.name, feed.uri)
        if self._feeds.get(key) is feed:
            del self._feeds[key]

    async def _send_notice(self, run: WatchTask, notice: Notice) -> None:
        if self._restore_sent is not None:
            await self._restore_sent.wait()
        extra = {k: v for k, v in notice.meta.items() if k not in ("name", "uri")}
        self._log("watch.notice", run, lines=notice.text.count("\n") + 1, text=notice.text, **extra)
        # If nobody reads notices any more (the agent closed its end), the log above still has it.
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await self._send.send(notice)

    # -- persistence -----------------------------------------------------------------------------

    async def _save(self, *, without: str | None = None) -> None:
        if self._state is None:
            return
        async with self._save_lock:
            specs = [r.spec for n, r in self._runs.items() if r.status != "starting" and n != without]
            await anyio.to_thread.run_sync(self._state.save, specs)

    async def _restore(self, specs: Sequence[WatchSpec]) -> None:
        assert self._state is not None
        outcome = Restore(str(self._state.path))
        for spec in specs:
            try:
                await self._start(spec.name, spec.uri, spec.on_event, restoring=True)
            except Exception as exc:
                outcome.add(spec, exc, describe(exc))
                if fate(exc) == "kept":  # listed restore_failed, still saved
                    self._runs[spec.name] = WatchTask(spec, status="restore_failed", error=describe(exc))
            else:
                outcome.add(spec, None)
        if outcome.dropped:
            await self._save()
        log.emit(
            "watch.restored",
            verbose=self.verbose,
            path=outcome.path,
            restored=[s.name for s in outcome.restored],
            restore_failed=[s.name for s, _ in outcome.kept],
            dropped=[s.name for s, _ in outcome.dropped],
        )
        await self._send.send(outcome.notice())

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

    def _log(self, event: str, run: WatchTask, **fields: Any) -> None:
        run.log(event, verbose=self.verbose, **fields)
