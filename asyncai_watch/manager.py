"""WatchManager: the async shell around the pure core.

One anyio task group per manager; one child task per watch, each with its own
cancel scope. A watch task subscribes (``ResourceSource.listen``), does the
baseline read, and then, per update signal, re-reads, extracts events
(event-log seq or state diff), annotates, filters, dedupes and debounces them
into :class:`~asyncai_watch.notice.Notice` values on one memory stream. A
second child task per watch waits for the debounce deadline on the injectable
:class:`~asyncai_watch.clock.Clock`. Nothing runs while a subscription is
healthy and quiet: the only waits are the subscription, the debounce timer
after a line, and the backoff after a failure.

The manager never calls a model: the agent consumes :attr:`WatchManager.notices`.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal, Self

import anyio
import anyio.abc
import attrs
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from asyncai_watch import log
from asyncai_watch.changes import annotate
from asyncai_watch.clock import Clock, SystemClock
from asyncai_watch.codemode import call_tool, list_tools, tool_names
from asyncai_watch.debounce import Debouncer
from asyncai_watch.dedupe import Deduper
from asyncai_watch.diff import diff_state, parse_state
from asyncai_watch.errors import (
    FilterEngineError,
    FilterError,
    LimitError,
    ProtocolVersionError,
    RoutingError,
    StateFileError,
    SubscriptionLostError,
    WatchError,
)
from asyncai_watch.eventlog import Sequencer
from asyncai_watch.events import Event, Shape, shape_for_mime_type
from asyncai_watch.filters import (
    FilterEngine,
    FilterOutcome,
    FilterSession,
    default_engine,
    sample_event,
    validate_on_event,
)
from asyncai_watch.limits import Limits
from asyncai_watch.lines import default_line
from asyncai_watch.notice import SOURCE_RESTORE, SOURCE_WATCH, Notice
from asyncai_watch.routing import ServerCatalog, route
from asyncai_watch.source import MODERN_PROTOCOL_VERSION, ReadResult, ResourceSource, ToolInfo
from asyncai_watch.state_file import StateFile, WatchSpec

__all__ = ["InvalidWatchNameError", "WatchManager", "resource_example"]

_NAME_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}")
_EXAMPLE_RE: Final = re.compile(r"Example:\s*(.+?)\s*$", re.MULTILINE)

_Status = Literal["starting", "running", "failed", "restore_failed"]


class InvalidWatchNameError(WatchError):
    """A watch name is empty, too long, or has characters outside ``[A-Za-z0-9_.-]``."""


def resource_example(description: str) -> str | None:
    """The text of a description's last ``Example:`` line (the code-mode call), or None."""
    found = _EXAMPLE_RE.findall(description or "")
    return found[-1] if found else None


@attrs.define(eq=False)
class _StartFailed:
    error: BaseException


@attrs.define(eq=False)
class _Watch:
    """A watch's mutable state; owned by its task (the manager only reads counters)."""

    spec: WatchSpec
    status: _Status = "starting"
    source: ResourceSource | None = None
    shape: Shape | None = None
    events: int = 0
    notices: int = 0
    error: str | None = None
    scope: anyio.CancelScope | None = None
    done: anyio.Event = attrs.field(factory=anyio.Event)
    start_settled: anyio.Event = attrs.field(factory=anyio.Event)
    sequencer: Sequencer = attrs.field(factory=Sequencer)
    previous: Any = None
    deduper: Deduper = attrs.field(factory=Deduper)
    debouncer: Debouncer | None = None
    wake: anyio.Event = attrs.field(factory=anyio.Event)
    sleep_scope: anyio.CancelScope | None = None
    sleeping_until: float | None = None
    session: FilterSession | None = None
    mime_hint: str | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def uri(self) -> str:
        return self.spec.uri


class WatchManager:
    """Owns every watch of one agent; use as ``async with WatchManager(sources) as m:``.

    ``sources`` are connected servers (:class:`~asyncai_watch.source.ResourceSource`).
    ``watch_state`` is the ``--watch-state`` file: specs are saved on every
    start and stop and restored on entry. ``filter_engine`` runs ``on_event``
    filters (default: the RestrictedPython worker engine). Leaving the
    ``async with`` block cancels every watch and closes :attr:`notices`.
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
            raise ValueError(f"WatchManager: notice_buffer must be an int >= 1, got {notice_buffer!r}")
        names = [s.name for s in sources]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"WatchManager: server names must be unique, got {', '.join(dupes)} twice")
        self.sources: tuple[ResourceSource, ...] = tuple(sources)
        self.limits = limits if limits is not None else Limits()
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.verbose = verbose
        self._state = StateFile(watch_state) if watch_state is not None else None
        self._engine: FilterEngine = (
            filter_engine if filter_engine is not None else default_engine(self.limits)
        )
        self._watches: dict[str, _Watch] = {}
        self._save_lock = anyio.Lock()
        self._restore_sent: anyio.Event | None = None  # set once a restore's notice is queued
        self._send: MemoryObjectSendStream[Notice]
        self.notices: MemoryObjectReceiveStream[Notice]
        self._send, self.notices = anyio.create_memory_object_stream[Notice](notice_buffer)
        self._stack: AsyncExitStack | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------
    async def __aenter__(self) -> Self:
        if self._stack is not None or self._closed:
            raise RuntimeError("WatchManager can be entered once")
        # Load first: a corrupt state file stops us before anything runs or is written.
        specs = self._state.load() if self._state is not None else []
        stack = AsyncExitStack()
        await stack.__aenter__()
        try:
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            self._stack = stack
            if specs:
                # Restored watches run at once, but their notices wait for the restore notice: a
                # burst from them could otherwise fill the buffer before it, and this would never return.
                self._restore_sent = anyio.Event()
                await self._restore(specs)
                self._restore_sent.set()
        except BaseException as exc:
            self._stack = None
            await stack.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        stack, self._stack = self._stack, None
        self._closed = True
        try:
            # Watches first, so their filter sessions close before the engine they run on.
            with anyio.CancelScope(shield=True):
                for w in list(self._watches.values()):
                    if w.scope is not None:
                        w.scope.cancel()
                for w in list(self._watches.values()):
                    if w.scope is not None:
                        await w.done.wait()
            if self._tg is not None:
                self._tg.cancel_scope.cancel()
            if stack is not None:
                try:
                    return await stack.__aexit__(exc_type, exc, tb)
                except BaseExceptionGroup as group:
                    # The task group wraps the body's own exception; hand it back unwrapped.
                    if exc is not None and len(group.exceptions) == 1 and group.exceptions[0] is exc:
                        raise exc from exc.__cause__
                    raise
            return None
        finally:
            for w in self._watches.values():
                if w.status in ("running", "starting"):
                    self._log("watch.stopped", w, reason="manager closed")
            self._send.close()

    # -- public API ------------------------------------------------------------------
    async def watch_start(self, name: str, uri: str, on_event: str | None = None) -> dict[str, Any]:
        """Start a watch; returns ``{"name", "uri", "shape"}``.

        The baseline read happens inside the call, so a server that rejects the
        URI fails it. Raises :class:`InvalidWatchNameError`, :class:`WatchError`
        (duplicate name, read/subscribe failure), :class:`FilterError`,
        :class:`LimitError`, :class:`RoutingError` or :class:`ProtocolVersionError`.
        """
        result = await self._start(name, uri, on_event, restoring=False)
        return result

    async def watch_stop(self, name: str) -> bool:
        """Stop and forget watch ``name``; False when there is none by that name."""
        self._check_open()
        w = self._watches.get(name)
        if w is None:
            return False
        if w.status == "starting":
            await w.start_settled.wait()
            if self._watches.get(name) is not w:
                return False
        self._watches.pop(name, None)
        if w.scope is not None:
            w.scope.cancel()
            await w.done.wait()
        self._log("watch.stopped", w, reason="watch_stop")
        await self._save()
        return True

    def watch_list(self) -> list[dict[str, Any]]:
        """``[{"name", "uri", "shape", "events", "notices"}]``, plus ``failed`` / ``restore_failed``."""
        out: list[dict[str, Any]] = []
        for w in self._watches.values():
            if w.status == "starting":
                continue
            item: dict[str, Any] = {
                "name": w.name,
                "uri": w.uri,
                "shape": w.shape,
                "events": w.events,
                "notices": w.notices,
            }
            if w.status == "failed":
                item["failed"] = True
                item["error"] = w.error
            elif w.status == "restore_failed":
                item["restore_failed"] = True
                item["error"] = w.error
            out.append(item)
        return out

    async def list_resources(self) -> list[dict[str, Any]]:
        """Every server's resources and templates, ADR code-mode shape."""
        out: list[dict[str, Any]] = []
        for source in self.sources:
            try:
                resources = await source.list_resources()
                templates = await source.list_templates()
            except Exception as exc:
                # One unreachable server must not hide the others; the log says why it is missing.
                log.emit("watch.list_failed", verbose=self.verbose, server=source.name, error=_describe(exc))
                continue
            for r in resources:
                out.append(
                    {
                        "uri": r.uri,
                        "template": False,
                        "name": r.name,
                        "description": r.description,
                        "example": resource_example(r.description),
                        "mime_type": r.mime_type,
                        "server": source.name,
                        "subscribable": source.subscribable,
                    }
                )
            for t in templates:
                out.append(
                    {
                        "uri": t.uri_template,
                        "template": True,
                        "name": t.name,
                        "description": t.description,
                        "example": resource_example(t.description),
                        "mime_type": t.mime_type,
                        "server": source.name,
                        "subscribable": source.subscribable,
                    }
                )
        return out

    async def read_resource(self, uri: str) -> Any:
        """Read ``uri`` from the server that serves it: parsed JSON, else the text."""
        if not isinstance(uri, str) or not uri:
            raise WatchError(f"read_resource: uri must be a non-empty string, got {uri!r}")
        source = await self._route(uri)
        result = await source.read(uri)
        return parse_state(result.text)

    # -- starting ----------------------------------------------------------------------
    async def _start(self, name: str, uri: str, on_event: str | None, *, restoring: bool) -> dict[str, Any]:
        self._check_open()
        _check_name(name)
        if not isinstance(uri, str) or not uri.strip():
            raise WatchError(f"watch_start: uri must be a non-empty string, got {uri!r}")
        if on_event is not None and not isinstance(on_event, str):
            raise FilterError(
                "watch_start: on_event must be Python source text (a str) or None, got "
                f"{_kind(on_event)}. A function object cannot cross into the filter sandbox: "
                "pass the code as a string, e.g. "
                """on_event='event["type"] + " " + str(event["key"])'"""
            )
        if on_event is not None and not on_event.strip():
            raise FilterError(
                "watch_start: on_event is empty; pass None for the default line or Python source"
            )
        previous = self._watches.get(name)
        if previous is not None and previous.status in ("starting", "running"):
            raise WatchError(
                f"watch_start: a watch named {name!r} already exists (uri {previous.uri}); "
                f"pick another name, or watch_stop(name={name!r}) first"
            )
        others = [w for n, w in self._watches.items() if n != name]
        if len(others) >= self.limits.max_watches:
            listed = ", ".join(
                f"{w.name}" + ("" if w.status == "running" else f" ({w.status})") for w in others
            )
            raise LimitError(
                f"watch_start: at most {self.limits.max_watches} watches "
                f"(Limits.max_watches={self.limits.max_watches}); already: {listed}. "
                "Stop one with watch_stop(name=...) first"
            )
        spec = WatchSpec(name=name, uri=uri, on_event=on_event)
        w = _Watch(spec=spec)
        # Reserve the name now: two concurrent starts of one name must not both win.
        self._watches[name] = w
        try:
            source, w.mime_hint = await self._route_hint(uri, for_watch=True)
            if source.protocol_version != MODERN_PROTOCOL_VERSION:
                raise ProtocolVersionError(
                    f"watch_start: server {source.name!r} speaks MCP {source.protocol_version}; "
                    f"watches need MCP {MODERN_PROTOCOL_VERSION} (subscriptions/listen). "
                    "Its tools still work; read_resource works too."
                )
            w.source = source
            if on_event is not None:
                # A SyntaxError (or a function's repr) fails here, before anything is subscribed.
                validate_on_event(on_event, engine=self._engine)
            assert self._tg is not None
            started = await self._tg.start(self._run_watch, w)
            if isinstance(started, _StartFailed):
                raise started.error
        except BaseException:
            if self._watches.get(name) is w:
                if previous is not None:
                    self._watches[name] = previous  # a failed restart keeps the saved failed spec
                else:
                    del self._watches[name]
            w.start_settled.set()
            raise
        w.status = "running"
        w.start_settled.set()
        self._log(
            "watch.started",
            w,
            shape=w.shape,
            server=source.name,
            filtered=on_event is not None,
            restored=restoring,
        )
        if not restoring:
            try:
                await self._save()
            except StateFileError:
                await self._cancel_and_forget(w)
                raise
        return {"name": name, "uri": uri, "shape": w.shape}

    async def _route(self, uri: str, *, for_watch: bool = False) -> ResourceSource:
        source, _ = await self._route_hint(uri, for_watch=for_watch)
        return source

    async def _route_hint(self, uri: str, *, for_watch: bool) -> tuple[ResourceSource, str | None]:
        """The server for ``uri`` and the mimeType its listing declares for it (a shape hint)."""
        catalogs: list[ServerCatalog] = []
        unreachable: list[str] = []
        for source in self.sources:
            try:
                catalogs.append(
                    ServerCatalog(
                        name=source.name,
                        resources=await source.list_resources(),
                        templates=await source.list_templates(),
                        subscribable=source.subscribable,
                    )
                )
            except Exception as exc:
                unreachable.append(f"{source.name} ({_describe(exc)})")
        what = "watch_start" if for_watch else "read_resource"
        if not catalogs:
            raise RoutingError(
                f"{what}: no connected server can serve {uri!r}"
                + (
                    f"; unreachable: {', '.join(unreachable)}"
                    if unreachable
                    else "; no servers are connected"
                )
            )
        try:
            found = route(uri, catalogs)
        except RoutingError as exc:
            if unreachable:
                raise RoutingError(f"{exc} (unreachable servers: {', '.join(unreachable)})") from exc
            raise
        by_name = {c.name: c for c in catalogs}
        for source in self.sources:
            if source.name == found.server and source.name in by_name:
                catalog = by_name[source.name]
                hint: str | None = None
                if found.template is None:
                    hint = next((r.mime_type for r in catalog.resources if r.uri == uri), None)
                else:
                    hint = next(
                        (t.mime_type for t in catalog.templates if t.uri_template == found.template), None
                    )
                return source, hint
        raise RoutingError(f"{what}: routing chose unknown server {found.server!r}")  # pragma: no cover

    # -- the watch task --------------------------------------------------------------
    async def _run_watch(self, w: _Watch, *, task_status: anyio.abc.TaskStatus[Any]) -> None:
        settled = False

        def settle(value: Any) -> None:
            nonlocal settled
            if not settled:
                settled = True
                task_status.started(value)

        try:
            with anyio.CancelScope() as scope:
                w.scope = scope
                w.debouncer = Debouncer(
                    quiet=self.limits.debounce_quiet,
                    max_wait=self.limits.debounce_max_wait,
                    max_lines=self.limits.lines_per_notice,
                )
                async with AsyncExitStack() as stack:
                    if w.spec.on_event is not None:
                        catalog = _FilterCatalog(self, tool_names(await self._tools_for_filters()))
                        w.session = await self._engine.open(
                            w.spec.on_event, catalog=catalog, limits=self.limits
                        )
                        stack.push_async_callback(w.session.aclose)
                        # Dry run before subscribing: NameError and the like fail watch_start, and no
                        # subscription is made; a KeyError on the sample is fine.
                        await w.session.dry_run(
                            sample_event(
                                watch=w.name,
                                uri=w.uri,
                                event_log=shape_for_mime_type(w.mime_hint) == "event-log",
                            )
                        )
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(self._flusher, w)
                        await self._supervise(w, settle)
                        tg.cancel_scope.cancel()
        except Exception as exc:
            if not settled:
                settle(_StartFailed(exc))
                return
            # A bug in the shell after start: tell the agent instead of crashing the manager.
            await self._give_up(w, f"internal error: {_describe(exc)}", attempts=0)
        finally:
            w.done.set()

    async def _supervise(self, w: _Watch, settle: Any) -> None:
        """Subscribe, read, deliver; resubscribe with backoff when the listen ends."""
        assert w.source is not None
        source = w.source
        delays = self.limits.backoff_delays()
        failures = 0
        started = False
        reason = ""
        while True:
            # Every attempt after the first subscription is a resubscribe: it counts as a failure
            # unless it becomes healthy, whatever it raised (refused, lost before the ack, ...).
            resubscribing = started
            if started:
                if failures >= len(delays):
                    await self._give_up(w, reason, attempts=failures)
                    return
                delay = delays[failures]
                self._log("watch.resubscribing", w, attempt=failures + 1, delay=delay, reason=reason)
                await self.clock.sleep_until(self.clock.now() + delay)
            healthy = False
            opened: float | None = None
            start_error: BaseException | None = None
            try:
                async with source.listen(w.uri) as sub:
                    try:
                        result = await source.read(w.uri)
                    except Exception as exc:
                        raise _ReadFailed(exc) from exc
                    if not started:
                        self._baseline(w, result)
                        settle(w.shape)
                        started = True
                        attempt = 0
                    else:
                        # Changes made while we were not subscribed: deliver them now.
                        await self._deliver(w, result)
                        attempt = failures + 1
                    self._log("watch.subscribed", w, server=source.name, attempt=attempt)
                    opened = self.clock.now()
                    async for _ in sub:
                        if not healthy:
                            healthy = True
                            failures = 0
                        await self._on_update(w)
                    reason = "the server ended the subscription"
            except SubscriptionLostError as exc:
                reason = str(exc) or "subscription lost"
            except _ReadFailed as exc:
                reason = f"re-read failed: {_describe(exc.cause)}"
                start_error = WatchError(
                    f"watch_start: reading {w.uri} from server {source.name!r} failed: {_describe(exc.cause)}"
                )
                start_error.__cause__ = exc.cause
            except WatchError as exc:  # ProtocolVersionError, a server error, a bad event-log body
                reason = f"resubscribe failed: {_describe(exc)}"
                start_error = exc
            except Exception as exc:
                reason = f"resubscribe failed: {_describe(exc)}"
                start_error = WatchError(
                    f"watch_start: subscribing to {w.uri} on server {source.name!r} failed: {_describe(exc)}"
                )
                start_error.__cause__ = exc
            if opened is not None and self.clock.now() - opened >= self.limits.resubscribe_max:
                healthy = True  # it stayed up long enough, even without an update
            if not started:
                # Before the baseline was delivered this is watch_start's own failure.
                settle(_StartFailed(start_error or WatchError(f"watch_start: {reason}")))
                return
            if healthy:
                failures = 0
            elif resubscribing:
                failures += 1

    def _baseline(self, w: _Watch, result: ReadResult) -> None:
        w.shape = shape_for_mime_type(result.mime_type)
        if w.shape == "event-log":
            error = w.sequencer.prime(result.text)
            if error is not None:
                raise WatchError(
                    f"watch_start: {w.uri} is an event log ({result.mime_type}) but its body is not valid: "
                    f"{error.message}"
                )
        else:
            w.previous = parse_state(result.text)

    async def _on_update(self, w: _Watch) -> None:
        assert w.source is not None
        try:
            result = await w.source.read(w.uri)
        except Exception as exc:
            self._add_lines(w, [(None, f"ERROR reading {w.uri}: {_describe(exc)}", None)])
            return
        await self._deliver(w, result)

    async def _deliver(self, w: _Watch, result: ReadResult) -> None:
        """Turn one read into events and lines. Body and filter errors become lines."""
        try:
            await self._deliver_unguarded(w, result)
        except Exception as exc:
            # A body no part of the pipeline expected must not end the watch: report it and go on.
            self._add_lines(w, [(None, f"ERROR processing a read of {w.uri}: {_describe(exc)}", None)])

    async def _deliver_unguarded(self, w: _Watch, result: ReadResult) -> None:
        lines: list[_Line] = []
        events: list[Event]
        limit = self.limits.events_per_update
        if w.shape == "event-log":
            fed = w.sequencer.feed(result.text, limit=limit)
            events = list(fed.events)
            if fed.error is not None:
                lines.append((None, f"ERROR {fed.error.message}", None))
        else:
            new = parse_state(result.text)
            events = diff_state(w.previous, new)
            w.previous = new
            if len(events) > limit:
                lines.append(
                    (
                        None,
                        f"+{len(events) - limit} more changes not shown (Limits.events_per_update={limit})",
                        None,
                    )
                )
                events = events[:limit]
        kept: list[Event] = []
        for ev in events:
            annotated = annotate(ev)
            if annotated is None:
                self._log_event(w, ev, "noop", None)
                continue
            kept.append(annotated)
        if kept:
            w.events += len(kept)
            lines[:0] = await self._lines_for(w, kept)
        self._add_lines(w, lines)

    async def _lines_for(self, w: _Watch, events: list[Event]) -> list[_Line]:
        """Each event's line (its ``watch.event`` is logged once dedupe has had its say)."""
        if w.session is None:
            return [(ev.key, default_line(ev), ev) for ev in events]
        out: list[_Line] = []
        dicts = [ev.to_filter_dict(watch=w.name, uri=w.uri) for ev in events]
        try:
            outcomes: Sequence[FilterOutcome] = await w.session.run(dicts)
        except Exception as exc:
            message = f"filter error: {_describe(exc)}"
            for ev in events:
                self._log_event(w, ev, "error", message)
            return [(None, message, None)]
        for ev, outcome in zip(events, outcomes, strict=False):
            if outcome.error is not None:
                line = f"filter error: {outcome.error}"
                self._log_event(w, ev, "error", line)
                out.append((None, line, None))
            elif outcome.text is None:
                self._log_event(w, ev, "dropped", None)
            else:
                out.append((ev.key, outcome.text, ev))
        return out

    def _add_lines(self, w: _Watch, lines: Sequence[_Line]) -> None:
        assert w.debouncer is not None
        now = self.clock.now()
        for key, line, ev in lines:
            admitted = key is None or w.deduper.admit(key, line)
            if ev is not None:
                self._log_event(w, ev, "kept" if admitted else "deduped", line)
            if admitted:
                w.debouncer.add(line, now)
        if w.debouncer.deadline != w.sleeping_until:
            # The deadline moved (or appeared): wake the flusher so it sleeps until the new one.
            if w.sleep_scope is not None:
                w.sleep_scope.cancel()
            w.wake.set()

    async def _flusher(self, w: _Watch) -> None:
        """Wait for the next line or the debounce deadline, whichever comes first."""
        assert w.debouncer is not None
        while True:
            deadline = w.debouncer.deadline
            if deadline is None:
                await w.wake.wait()
                w.wake = anyio.Event()
                continue
            with anyio.CancelScope() as scope:
                w.sleep_scope, w.sleeping_until = scope, deadline
                await self.clock.sleep_until(deadline)
            w.sleep_scope, w.sleeping_until = None, None
            w.wake = anyio.Event()
            if scope.cancelled_caught:
                continue
            text = w.debouncer.flush_due(self.clock.now())
            if text is not None:
                await self._send_notice(w, text)

    async def _send_notice(self, w: _Watch, text: str, **extra: str) -> None:
        if self._restore_sent is not None:
            await self._restore_sent.wait()
        notice = Notice(SOURCE_WATCH, text, meta={"name": w.name, "uri": w.uri, **extra})
        w.notices += 1
        self._log("watch.notice", w, lines=text.count("\n") + 1, text=text, **extra)
        # If nobody reads notices any more (the agent closed its end), the log above still has it.
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await self._send.send(notice)

    async def _give_up(self, w: _Watch, reason: str, *, attempts: int) -> None:
        w.status = "failed"
        w.error = reason
        if w.debouncer is not None:
            pending = w.debouncer.flush()
            if pending is not None:
                await self._send_notice(w, pending)
        self._log("watch.failed", w, attempts=attempts, reason=reason)
        text = (
            f"watch {w.name!r} failed: its subscription to {w.uri} ended and "
            f"{attempts} resubscribe attempts failed (last: {reason}). It no longer delivers changes; "
            f'start it again with watch_start(name="{w.name}", uri="{w.uri}", ...) or drop it with '
            f'watch_stop(name="{w.name}").'
            if attempts
            else f"watch {w.name!r} failed: {reason}. Start it again with watch_start or drop it with watch_stop."
        )
        await self._send_notice(w, text, failed="true")

    async def _cancel_and_forget(self, w: _Watch) -> None:
        if self._watches.get(w.name) is w:
            del self._watches[w.name]
        if w.scope is not None:
            w.scope.cancel()
            await w.done.wait()

    async def _tools_for_filters(self) -> list[tuple[ResourceSource, ToolInfo]]:
        found: list[tuple[ResourceSource, ToolInfo]] = []
        for source in self.sources:
            try:
                found.extend(await list_tools([source]))
            except Exception as exc:
                # A server whose tools cannot be listed offers none to the filter; the watch still starts.
                log.emit(
                    "watch.tools_unavailable", verbose=self.verbose, server=source.name, error=_describe(exc)
                )
        return found

    # -- persistence -------------------------------------------------------------------
    async def _save(self) -> None:
        if self._state is None:
            return
        async with self._save_lock:
            specs = [w.spec for w in self._watches.values() if w.status != "starting"]
            await anyio.to_thread.run_sync(self._state.save, specs)

    async def _restore(self, specs: Sequence[WatchSpec]) -> None:
        assert self._state is not None
        restored: list[WatchSpec] = []
        kept: list[tuple[WatchSpec, str]] = []
        dropped: list[tuple[WatchSpec, str]] = []
        for spec in specs:
            try:
                await self._start(spec.name, spec.uri, spec.on_event, restoring=True)
            except FilterEngineError as exc:  # the worker failed, not the spec: keep it
                error = _describe(exc)
                kept.append((spec, error))
                self._watches[spec.name] = _Watch(spec=spec, status="restore_failed", error=error)
            except (FilterError, LimitError, InvalidWatchNameError) as exc:
                dropped.append((spec, _describe(exc)))
            except Exception as exc:
                error = _describe(exc)
                kept.append((spec, error))
                self._watches[spec.name] = _Watch(spec=spec, status="restore_failed", error=error)
            else:
                restored.append(spec)
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

    # -- helpers -----------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._tg is None or self._closed:
            raise RuntimeError("WatchManager is not running: use it as `async with WatchManager(...) as m:`")

    def _log(self, event: str, w: _Watch, **fields: Any) -> None:
        log.emit(event, verbose=self.verbose, watch=w.name, uri=w.uri, **fields)

    def _log_event(self, w: _Watch, ev: Event, outcome: str, line: str | None) -> None:
        log.emit(
            "watch.event",
            verbose=self.verbose,
            watch=w.name,
            uri=w.uri,
            type=ev.type,
            key=ev.key,
            seq=ev.seq,
            kept=outcome == "kept",
            outcome=outcome,
            line=line,
        )


_Line = tuple[str | None, str, Event | None]
"""A notice line: its dedupe key (``None``: never deduped), its text, and the event it stands for
(``None`` for error and summary lines, which log no ``watch.event``)."""


class _ReadFailed(Exception):
    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _FilterCatalog:
    """What a filter may call (the parent enforces it; the worker only forwards names).

    Reads (``read_resource``, ``list_resources``) and MCP tools annotated
    ``readOnlyHint: true``. Mutating tools and the watch built-ins are named too,
    so a filter that calls one gets a clear refusal in its notice instead of a NameError.
    """

    _DENIED_BUILTINS: Final = ("watch_start", "watch_stop", "watch_list")
    _BUILTINS: Final = frozenset({"read_resource", "list_resources", "event", *_DENIED_BUILTINS})

    def __init__(self, manager: WatchManager, tools: Mapping[str, tuple[ResourceSource, ToolInfo]]) -> None:
        self._manager = manager
        # A tool named like a built-in (or `event`) would silently shadow it: leave it out.
        self._tools = {name: found for name, found in tools.items() if name not in self._BUILTINS}
        self.names = frozenset({"read_resource", "list_resources", *self._DENIED_BUILTINS, *self._tools})

    async def call(self, name: str, kwargs: dict[str, Any]) -> Any:
        if name == "read_resource":
            if set(kwargs) != {"uri"} or not isinstance(kwargs["uri"], str):
                raise TypeError(
                    'read_resource takes one argument, uri (a string): read_resource(uri="memo://notes")'
                )
            return await self._manager.read_resource(kwargs["uri"])
        if name == "list_resources":
            if kwargs:
                raise TypeError("list_resources takes no arguments")
            return await self._manager.list_resources()
        if name in self._DENIED_BUILTINS:
            raise PermissionError(
                f"a filter cannot call {name}(): filters cannot start, stop or list watches"
            )
        found = self._tools.get(name)
        if found is None:
            raise PermissionError(f"{name!r} is not in the filter's catalog")
        source, tool = found
        if not tool.read_only:
            raise PermissionError(
                f"tool {tool.name!r} (server {source.name!r}) is not read-only (no readOnlyHint: true); "
                "a filter may only read: read_resource, list_resources and read-only tools"
            )
        return await call_tool(source, tool, kwargs)


def _check_name(name: object) -> None:
    if not isinstance(name, str):
        raise InvalidWatchNameError(f"watch_start: name must be a string, got {_kind(name)}")
    if not _NAME_RE.fullmatch(name):
        raise InvalidWatchNameError(
            f"watch_start: invalid watch name {name!r}; use 1-64 characters from letters, digits, "
            "'_', '-', '.', starting with a letter or '_' (e.g. \"notes\", \"cm-default\")"
        )


def _kind(value: object) -> str:
    if callable(value):
        return f"{type(value).__name__} {getattr(value, '__name__', repr(value))!r}"
    return f"{type(value).__name__} {value!r}"[:120]


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
