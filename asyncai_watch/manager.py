"""WatchManager: the async shell around the pure watch core.

The manager owns one task group. In it run the shared subscriptions
(:class:`~asyncai_watch.subscriptions.Feed`, one per server and URI) and one loop per watch.
A watch's loop waits for whichever comes first, the next thing its feed hands it or its
debounce deadline (on the injectable :class:`~asyncai_watch.clock.Clock`), and feeds the pure
:class:`~asyncai_watch.core.watch.Watch`, which says what to send. A read's events go
through the watch's filter in a job of the loop's own, so a slow filter never holds back a
notice that is due. Nothing runs while the subscriptions are quiet.

The manager never calls a model: the agent consumes :attr:`WatchManager.notices`.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal, Self

import anyio
import anyio.abc
import attrs
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from asyncai_watch import log
from asyncai_watch.catalog import Catalogs
from asyncai_watch.clock import Clock, SystemClock, move_on_at
from asyncai_watch.core.events import shape_for_mime_type
from asyncai_watch.core.limits import Limits
from asyncai_watch.core.notice import SOURCE_RESTORE, Notice
from asyncai_watch.core.watch import Body, EventRecord, Line, Pending, Retry, Watch
from asyncai_watch.errors import (
    FilterEngineError,
    FilterError,
    InvalidWatchNameError,
    LimitError,
    NotWatchableError,
    ProtocolVersionError,
    StateFileError,
    WatchError,
)
from asyncai_watch.filters import FilterEngine, FilterSession, default_engine, sample_event, validate_on_event
from asyncai_watch.info import ResourceInfo, WatchInfo
from asyncai_watch.shapes import resource_dicts
from asyncai_watch.source import MODERN_PROTOCOL_VERSION, ResourceSource
from asyncai_watch.state_file import StateFile, WatchSpec
from asyncai_watch.subscriptions import LARGE_BODY, Feed, describe
from asyncai_watch.tools import ReadOnlyCatalog, list_tools, tool_names

__all__ = ["WatchManager"]

_NAME_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}")

_Status = Literal["starting", "running", "failed", "restore_failed"]


@attrs.frozen
class _Up:
    attempt: int


@attrs.frozen
class _Down:
    retry: Retry
    reason: str


@attrs.frozen
class _GaveUp:
    attempts: int
    reason: str


@attrs.define(eq=False)
class _Run:
    """One watch's I/O side: the pure core, its feed, its filter, and its mailbox.

    The feed puts into the mailbox (it is the feed's :class:`~asyncai_watch.subscriptions.Subscriber`);
    only the watch's loop takes out. A newer body replaces one not yet taken: a state diff
    against the newest read is the net change, and an event log's newest read holds the
    newer events (or reports the GAP).
    """

    spec: WatchSpec
    status: _Status = "starting"
    core: Watch | None = None
    server: str | None = None
    error: str | None = None
    feed: Feed | None = None
    session: FilterSession | None = None
    scope: anyio.CancelScope | None = None
    done: anyio.Event = attrs.field(factory=anyio.Event)
    settled: anyio.Event = attrs.field(factory=anyio.Event)
    _body: Body | None = None
    _read_error: str | None = None
    _lifecycle: list[_Up | _Down | _GaveUp] = attrs.field(factory=list)
    _result: tuple[list[Line], list[EventRecord]] | None = None
    _wake: anyio.Event = attrs.field(factory=anyio.Event)

    # Subscriber (called by the feed)
    def body(self, body: Body) -> None:
        self._body = body
        self._wake.set()

    def read_failed(self, error: str) -> None:
        self._read_error = error
        self._wake.set()

    def up(self, attempt: int) -> None:
        self._lifecycle.append(_Up(attempt))
        self._wake.set()

    def down(self, retry: Retry, reason: str) -> None:
        self._lifecycle.append(_Down(retry, reason))
        self._wake.set()

    def gave_up(self, attempts: int, reason: str) -> None:
        self._lifecycle.append(_GaveUp(attempts, reason))
        self._wake.set()

    # the loop's side
    def job_done(self, result: tuple[list[Line], list[EventRecord]]) -> None:
        self._result = result
        self._wake.set()

    async def wait(self) -> None:
        await self._wake.wait()
        self._wake = anyio.Event()

    def take_lifecycle(self) -> list[_Up | _Down | _GaveUp]:
        items, self._lifecycle = self._lifecycle, []
        return items

    def take_result(self) -> tuple[list[Line], list[EventRecord]] | None:
        result, self._result = self._result, None
        return result

    def take_update(self) -> Body | str | None:
        """The next read to process: a failed read's error first, then the newest body."""
        if self._read_error is not None:
            error, self._read_error = self._read_error, None
            return error
        body, self._body = self._body, None
        return body

    def info(self) -> WatchInfo:
        core = self.core
        return WatchInfo(
            name=self.spec.name,
            uri=self.spec.uri,
            status="running" if self.status == "starting" else self.status,
            shape=core.shape if core is not None else None,
            server=self.server,
            on_event=self.spec.on_event,
            events=core.events if core is not None else 0,
            notices=core.notices if core is not None else 0,
            error=self.error,
        )


class WatchManager:
    """Owns every watch of one agent; use as ``async with WatchManager(sources) as m:``.

    ``sources`` are connected servers (:class:`~asyncai_watch.source.ResourceSource`).
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
        names = [s.name for s in sources]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise WatchError(
                f"WatchManager: server names must be unique, got {', '.join(dupes)} twice; "
                "pass name=... when connecting"
            )
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
        self._runs: dict[str, _Run] = {}
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
                if source.protocol_version == MODERN_PROTOCOL_VERSION:
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
            if tg is None:
                return None
            tg.cancel_scope.cancel()
            try:
                return await tg.__aexit__(exc_type, exc, tb)
            except BaseExceptionGroup as group:
                # The task group wraps the body's own exception; hand it back unwrapped.
                if exc is not None and len(group.exceptions) == 1 and group.exceptions[0] is exc:
                    raise exc from exc.__cause__
                raise
        finally:
            for run in self._runs.values():
                if run.status in ("running", "starting"):
                    self._log("watch.stopped", run, reason="manager closed")
            self._send.close()

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
        await self._end(run)
        self._log("watch.stopped", run, reason="watch_stop")
        return True

    def watch_list(self) -> list[WatchInfo]:
        """Every watch, started ones in start order (``failed`` / ``restore_failed`` included)."""
        return [run.info() for run in self._runs.values() if run.status != "starting"]

    async def list_resources(self) -> list[ResourceInfo]:
        """Every server's resources and templates (listed afresh, concurrently)."""
        out: list[ResourceInfo] = []
        for listing in await self._catalogs.listings(refresh=True):
            catalog = listing.catalog
            if catalog is None:
                continue  # unreachable: logged by the catalog
            out += [
                ResourceInfo(
                    uri=r.uri,
                    template=False,
                    server=catalog.name,
                    name=r.name,
                    description=r.description,
                    mime_type=r.mime_type,
                    watchable=catalog.subscribable,
                )
                for r in catalog.resources
            ]
            out += [
                ResourceInfo(
                    uri=t.uri_template,
                    template=True,
                    server=catalog.name,
                    name=t.name,
                    description=t.description,
                    mime_type=t.mime_type,
                    watchable=catalog.subscribable,
                )
                for t in catalog.templates
            ]
        return out

    async def read_resource(self, uri: str) -> Any:
        """Read ``uri`` from the server that serves it: parsed JSON, else the text."""
        if not isinstance(uri, str) or not uri:
            raise WatchError(f"read_resource: uri must be a non-empty string, got {uri!r}")
        source, _ = await self._catalogs.route(uri, what="read_resource")
        result = await source.read(uri)
        if len(result.text) > LARGE_BODY:
            return (await anyio.to_thread.run_sync(Body.parse, result.text)).value
        return Body.parse(result.text).value

    # -- starting --------------------------------------------------------------------------------

    async def _start(self, name: str, uri: str, on_event: str | None, *, restoring: bool) -> WatchInfo:
        self._check_open()
        _check_name(name)
        if not isinstance(uri, str) or not uri.strip():
            raise WatchError(f"watch_start: uri must be a non-empty string, got {uri!r}")
        _check_on_event(on_event)
        previous = self._runs.get(name)
        if previous is not None and previous.status in ("starting", "running"):
            raise WatchError(
                f"watch_start: a watch named {name!r} already exists (uri {previous.spec.uri}); "
                f"pick another name, or watch_stop(name={name!r}) first"
            )
        others = [run for n, run in self._runs.items() if n != name]
        if len(others) >= self.limits.max_watches:
            listed = ", ".join(
                r.spec.name + ("" if r.status == "running" else f" ({r.status})") for r in others
            )
            raise LimitError(
                f"watch_start: at most {self.limits.max_watches} watches "
                f"(Limits.max_watches={self.limits.max_watches}); already: {listed}. "
                "Stop one with watch_stop(name=...) first"
            )
        run = _Run(WatchSpec(name=name, uri=uri, on_event=on_event))
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
                await self._end(run)
                raise
        return run.info()

    async def _launch(self, run: _Run) -> None:
        """Route, check the filter, subscribe (or join a subscription), take the baseline, and
        start the watch's loop; any failure leaves nothing running."""
        spec = run.spec
        source, found = await self._catalogs.route(spec.uri, what="watch_start")
        if not source.watchable:
            raise _not_watchable(source)
        run.server = source.name
        async with AsyncExitStack() as stack:
            if spec.on_event is not None:
                # A SyntaxError (or a function's repr) fails here, before anything is subscribed.
                validate_on_event(spec.on_event, engine=self._engine)
                tools = tool_names(await list_tools(self.sources, on_error=self._tools_failed))
                catalog = ReadOnlyCatalog(
                    tools, read_resource=self.read_resource, list_resources=self._code_mode_resources
                )
                session = await self._engine.open(spec.on_event, catalog=catalog, limits=self.limits)
                stack.push_async_callback(session.aclose)
                # A dry run: NameError and the like fail watch_start; a KeyError on the sample is fine.
                await session.dry_run(
                    sample_event(
                        watch=spec.name,
                        uri=spec.uri,
                        event_log=shape_for_mime_type(found.mime_type) == "event-log",
                    )
                )
                run.session = session
            core = Watch(spec.name, spec.uri, self.limits)
            body = await self._subscribe(run, source)
            try:
                core.baseline(body)
            except BaseException:
                self._leave(run)
                raise
            run.core = core
            assert self._tg is not None
            await self._tg.start(self._loop, run, stack.pop_all())

    async def _subscribe(self, run: _Run, source: ResourceSource) -> Body:
        """The baseline read of ``run``'s URI, on the feed that carries it (made if need be)."""
        key = (source.name, run.spec.uri)
        feed = self._feeds.get(key)
        if feed is None:
            feed = self._feeds[key] = Feed(
                source, run.spec.uri, limits=self.limits, clock=self.clock, on_end=self._feed_ended
            )
            run.feed = feed
            assert self._tg is not None
            body: Body = await self._tg.start(feed.run, run)
            return body
        run.feed = feed
        return await feed.join(run)

    def _feed_ended(self, feed: Feed) -> None:
        key = (feed.source.name, feed.uri)
        if self._feeds.get(key) is feed:
            del self._feeds[key]

    def _leave(self, run: _Run) -> None:
        feed, run.feed = run.feed, None
        if feed is not None:
            feed.leave(run)

    # -- the watch's loop ------------------------------------------------------------------------

    async def _loop(
        self, run: _Run, stack: AsyncExitStack, *, task_status: anyio.abc.TaskStatus[None]
    ) -> None:
        """The watch's task: serve it until it is stopped or its subscription gives up."""
        try:
            with anyio.CancelScope() as run.scope:
                task_status.started()
                async with stack:  # the filter session, closed after the last job
                    async with anyio.create_task_group() as jobs:
                        gave_up = await self._serve(run, jobs)
                        jobs.cancel_scope.cancel()
                    await self._give_up(run, gave_up)
        finally:
            self._leave(run)
            run.done.set()

    async def _serve(self, run: _Run, jobs: anyio.abc.TaskGroup) -> _GaveUp:
        """Wait for the feed or the debounce deadline, whichever is first; feed the core."""
        core = run.core
        assert core is not None
        busy = False  # a read is being processed: newer ones wait in the mailbox (newest wins)
        while True:
            async with move_on_at(self.clock, core.deadline):
                await run.wait()
            notice = core.due(self.clock.now())
            if notice is not None:
                await self._send_notice(run, notice)
            for item in run.take_lifecycle():
                if isinstance(item, _GaveUp):
                    return item
                if isinstance(item, _Up):
                    self._log("watch.subscribed", run, server=run.server, attempt=item.attempt)
                else:
                    self._log(
                        "watch.resubscribing",
                        run,
                        attempt=item.retry.attempt,
                        delay=item.retry.delay,
                        reason=item.reason,
                    )
            result = run.take_result()
            if result is not None:
                busy = False
                lines, records = result
                self._log_events(run, [*records, *core.add(lines, self.clock.now())])
            if not busy and (update := run.take_update()) is not None:
                busy = True
                jobs.start_soon(self._process, run, update)

    async def _process(self, run: _Run, update: Body | str) -> None:
        """One read (or read failure) of ``run``'s URI -> lines, through the filter if any."""
        core = run.core
        assert core is not None
        try:
            pending: Pending
            if isinstance(update, str):
                pending = core.read_failed(update)
            elif len(update.text) > LARGE_BODY:
                pending = await anyio.to_thread.run_sync(core.read, update)
            else:
                pending = core.read(update)
            if run.session is None or not pending.events:
                result = core.lines(pending)
            else:
                dicts = [ev.to_filter_dict(watch=run.spec.name, uri=run.spec.uri) for ev in pending.events]
                try:
                    result = core.lines(pending, await run.session.run(dicts))
                except Exception as exc:
                    result = core.filter_failed(pending, describe(exc))
        except Exception as exc:
            # A body no part of the pipeline expected must not end the watch: report it and go on.
            result = ([Line(f"ERROR processing a read of {run.spec.uri}: {describe(exc)}")], [])
        run.job_done(result)

    async def _give_up(self, run: _Run, gave_up: _GaveUp) -> None:
        assert run.core is not None
        run.status = "failed"
        run.error = gave_up.reason
        self._leave(run)
        notices = run.core.failed(gave_up.reason, gave_up.attempts)
        for notice in notices[:-1]:
            await self._send_notice(run, notice)
        self._log("watch.failed", run, attempts=gave_up.attempts, reason=gave_up.reason)
        await self._send_notice(run, notices[-1])

    async def _send_notice(self, run: _Run, notice: Notice) -> None:
        if self._restore_sent is not None:
            await self._restore_sent.wait()
        extra = {k: v for k, v in notice.meta.items() if k not in ("name", "uri")}
        self._log("watch.notice", run, lines=notice.text.count("\n") + 1, text=notice.text, **extra)
        # If nobody reads notices any more (the agent closed its end), the log above still has it.
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await self._send.send(notice)

    async def _end(self, run: _Run) -> None:
        """Stop ``run``'s loop; when it was the last watch on its feed, wait until the
        subscription is closed too."""
        feed = run.feed
        if run.scope is not None:
            run.scope.cancel()
            await run.done.wait()
        else:
            self._leave(run)
        if feed is not None and not feed.subscribers:
            await feed.ended.wait()

    # -- persistence -----------------------------------------------------------------------------

    async def _save(self, *, without: str | None = None) -> None:
        if self._state is None:
            return
        async with self._save_lock:
            specs = [r.spec for n, r in self._runs.items() if r.status != "starting" and n != without]
            await anyio.to_thread.run_sync(self._state.save, specs)

    async def _restore(self, specs: Sequence[WatchSpec]) -> None:
        assert self._state is not None
        restored: list[WatchSpec] = []
        kept: list[tuple[WatchSpec, str]] = []
        dropped: list[tuple[WatchSpec, str]] = []
        for spec in specs:
            try:
                await self._start(spec.name, spec.uri, spec.on_event, restoring=True)
            except (InvalidWatchNameError, FilterError) as exc:
                if not isinstance(exc, FilterEngineError):  # a spec that can never start
                    dropped.append((spec, describe(exc)))
                    continue
                kept.append((spec, describe(exc)))  # the engine failed, not the spec
            except Exception as exc:  # a server down, a limit reached, ...: may pass, so keep it
                kept.append((spec, describe(exc)))
            else:
                restored.append(spec)
                continue
            self._runs[spec.name] = _Run(spec, status="restore_failed", error=kept[-1][1])
        if dropped:
            await self._save()
        lines = [
            f"Restored {len(restored)} of {len(specs)} watches from {self._state.path} "
            "(baselines are fresh: changes made while the agent was down may be missing)."
        ]
        lines += [f"- {s.name} {s.uri}: restored" for s in restored]
        lines += [
            f"- {s.name} {s.uri}: restore failed, kept (watch_start it again or watch_stop it): {err}"
            for s, err in kept
        ]
        lines += [f"- {s.name} {s.uri}: dropped, it can never start: {err}" for s, err in dropped]
        log.emit(
            "watch.restored",
            verbose=self.verbose,
            path=str(self._state.path),
            restored=[s.name for s in restored],
            restore_failed=[s.name for s, _ in kept],
            dropped=[s.name for s, _ in dropped],
        )
        await self._send.send(
            Notice(
                SOURCE_RESTORE,
                "\n".join(lines),
                meta={
                    "path": str(self._state.path),
                    "restored": str(len(restored)),
                    "restore_failed": str(len(kept)),
                    "dropped": str(len(dropped)),
                },
            )
        )

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

    def _log(self, event: str, run: _Run, **fields: Any) -> None:
        log.emit(event, verbose=self.verbose, watch=run.spec.name, uri=run.spec.uri, **fields)

    def _log_events(self, run: _Run, records: Sequence[EventRecord]) -> None:
        for rec in records:
            ev = rec.event
            log.emit(
                "watch.event",
                verbose=self.verbose,
                watch=run.spec.name,
                uri=run.spec.uri,
                type=ev.type,
                key=ev.key,
                seq=ev.seq,
                kept=rec.outcome == "kept",
                outcome=rec.outcome,
                line=rec.line,
            )


def _not_watchable(source: ResourceSource) -> NotWatchableError:
    if source.protocol_version != MODERN_PROTOCOL_VERSION:
        return ProtocolVersionError(
            f"watch_start: server {source.name!r} speaks MCP {source.protocol_version}; "
            f"watches need MCP {MODERN_PROTOCOL_VERSION} (subscriptions/listen). "
            "Its tools still work; read_resource works too."
        )
    return NotWatchableError(
        f"watch_start: server {source.name!r} is not watchable: it does not advertise "
        "resources.subscribe (it serves no subscriptions/listen). Its tools and read_resource still "
        "work; docs/server-contract.md says what makes a server watchable."
    )


def _check_name(name: object) -> None:
    if not isinstance(name, str):
        raise InvalidWatchNameError(f"watch_start: name must be a string, got {_kind(name)}")
    if not _NAME_RE.fullmatch(name):
        raise InvalidWatchNameError(
            f"watch_start: invalid watch name {name!r}; use 1-64 characters from letters, digits, "
            "'_', '-', '.', starting with a letter or '_' (e.g. \"notes\", \"cm-default\")"
        )


def _check_on_event(on_event: object) -> None:
    if on_event is not None and not isinstance(on_event, str):
        raise FilterError(
            "watch_start: on_event must be Python source text (a str) or None, got "
            f"{_kind(on_event)}. A function object cannot cross into the filter sandbox: "
            "pass the code as a string, e.g. "
            """on_event='event["type"] + " " + str(event["key"])'"""
        )
    if on_event is not None and not on_event.strip():
        raise FilterError("watch_start: on_event is empty; pass None for the default line or Python source")


def _kind(value: object) -> str:
    if callable(value):
        return f"{type(value).__name__} {getattr(value, '__name__', repr(value))!r}"
    return f"{type(value).__name__} {value!r}"[:120]
