"""The MCP server ``asyncai-watch serve`` runs: the watch tools, the listen stream, the pushes.

Built on the low-level :class:`mcp.server.Server`, so this module decides the capabilities
(``experimental["claude/channel"] = {}`` on both handshakes). The listen stream is served by
a :class:`~asyncai_watch.server.SubscriptionRegistry` (the ack first, the list-changed flags
honored, a graceful end at shutdown); each pushed notice rides it, stamped with the listen's
subscription id and sent request-scoped, which is how a notification reaches a 2026-07-28
client on Streamable HTTP as well as stdio: there is no standalone stream there.

A legacy (``initialize``) client, which is what Claude Code and other hosts on the
TypeScript SDK are, opens no listen. It gets its pushes connection-scoped after
``notifications/initialized``, through a :class:`ConnectionAttach` middleware (stdio: the one
connection; Streamable HTTP: each legacy session, on its standalone GET stream).

The tools' names, descriptions, input and output schemas and annotations are generated from
the one table of built-in tools (:mod:`asyncai_watch.core.tools`), as code mode's and the
framework integrations' are; the handlers are here.

Tools return the design's shapes (:mod:`asyncai_watch.shapes`) as JSON text, plus structured
content (an object, as MCP requires: lists are wrapped, e.g. ``{"resources": [...]}``). Bad
input is an ``isError`` result whose text says what was wrong and what is accepted; nothing
is subscribed then. An unknown tool name is not a tool that ran and failed but a JSON-RPC
error -32602 (invalid params) naming the tools there are, as the MCP spec says and as every
reference server answers (:mod:`asyncai_watch.server.errors`). This server serves no MCP
resources itself (``read_resource`` is a tool): it declares no ``resources`` capability
(``resources/read`` and ``resources/subscribe`` are -32601, method not found), and a listen
naming a resource URI is refused (-32602) saying to watch it with ``watch_start``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final

import anyio
import anyio.abc
import mcp_types as types
from mcp.server import Server
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.session import ServerSession
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from asyncai_watch import log
from asyncai_watch.clock import Clock, SystemClock, fail_after
from asyncai_watch.core.tools import BRIDGE_TOOLS, DEFAULT_NOTICES_LIMIT, ToolSpec, check_arguments
from asyncai_watch.core.tools import tool as tool_spec
from asyncai_watch.echo import clip, quoted, redact
from asyncai_watch.errors import WatchError
from asyncai_watch.server.subscriptions import ListenStream, SubscriptionRegistry
from asyncai_watch.server.tool_dispatch import ToolCall, tool_handlers
from asyncai_watch.shapes import resource_dicts, started_dict, watch_dicts

from .bridge import Bridge
from .channel import (
    CHANNEL_CAPABILITY,
    CHANNEL_METHOD,
    catchup_dict,
    channel_params,
    entry_dict,
    restore_report,
)
from .hub import Hub, Outlet
from .ring import Entry

__all__ = ["TOOLS", "ConnectionAttach", "FirstAnswer", "WatchServer", "build_server", "connection_writer"]

SERVER_NAME: Final = "asyncai-watch"
PUSH_SETTLE: Final = 1.0
"""Seconds between the answer to the client's first request and the first push on a stdio
connection: a host registers its channel handler only after its first exchanges (Claude Code
about 20 ms after ``notifications/initialized``), and drops what comes before unheard."""
PUSH_FALLBACK: Final = 5.0
"""Seconds after ``notifications/initialized`` when pushes start even if no request came."""


def _tool(spec: ToolSpec) -> types.Tool:
    """One ``tools/list`` entry, all of it from the table (:mod:`asyncai_watch.core.tools`)."""
    return types.Tool(
        name=spec.name,
        description=spec.full_description(bridge=True),
        input_schema=spec.input_schema,
        output_schema=spec.structured_schema,
        annotations=types.ToolAnnotations(
            read_only_hint=spec.read_only,
            destructive_hint=False,
            idempotent_hint=spec.idempotent,
            open_world_hint=False,
        ),
    )


TOOLS: Final = [_tool(spec) for spec in BRIDGE_TOOLS]


_MAX_NAMED: Final = 10  # unknown argument names an error lists
_ERROR_CAP: Final = 4000  # a tool error's text, whatever an error below it quoted

DEFAULT_MAX_RESULT: Final = 1 << 20
"""Characters of text one tool result may hand the host (``--max-result-chars``): a resource
read from upstream can be up to 16 MiB, and an agent must not get 16 million characters."""


class ToolInputError(WatchError):
    """A tool was called with arguments it does not accept."""


def _check_arguments(tool: str, args: Mapping[str, Any]) -> None:
    """Enforce the tool's input schema with a message the model can act on."""
    problem = check_arguments(tool_spec(tool), args)
    if problem is not None:
        raise ToolInputError(problem.message())


def _json_result(text_value: Any, structured: dict[str, Any]) -> types.CallToolResult:
    text = text_value if isinstance(text_value, str) else json.dumps(text_value, ensure_ascii=False)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=structured
    )


def _error(message: str) -> types.CallToolResult:
    # An upstream's error may quote its URL (secret parameters and all) or a huge argument.
    text = clip(redact(message), _ERROR_CAP)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def channel_notification(
    entry: Entry, subscription_id: types.RequestId | None = None
) -> types.Notification[dict[str, Any], str]:
    params = channel_params(entry)
    if subscription_id is not None:
        params["_meta"] = {SUBSCRIPTION_ID_META_KEY: subscription_id}
    # "meta" (the tag's attributes) is not "_meta": a plain dict, not NotificationParams.
    return types.Notification[dict[str, Any], str](method=CHANNEL_METHOD, params=params)


class WatchServer(Server[Any]):
    """Declares ``experimental['claude/channel']`` on ``server/discover`` and ``initialize`` alike."""

    subscriptions: SubscriptionRegistry | None = None
    """Its listen streams (``serve --http`` gives them the HTTP policy's limits)."""

    def get_capabilities(self, *args: Any, **kwargs: Any) -> types.ServerCapabilities:
        caps = super().get_capabilities(*args, **kwargs)
        caps.experimental = {**(caps.experimental or {}), CHANNEL_CAPABILITY: {}}
        return caps


def _text(value: str) -> types.TextContent:
    return types.TextContent(type="text", text=value)


class ResultTooLargeError(WatchError):
    """A tool's result is longer than ``--max-result-chars``."""


def _check_size(tool: str, args: Mapping[str, Any], result: types.CallToolResult, cap: int) -> None:
    size = sum(len(block.text) for block in result.content if isinstance(block, types.TextContent))
    if size <= cap:
        return
    what = f"{tool} {quoted(args['uri'])}" if tool == "read_resource" else tool
    hint = (
        "; watch it with watch_start to hear of its changes, or read a smaller resource"
        if tool == "read_resource"
        else ""
    )
    raise ResultTooLargeError(
        f"{what}: the result is {size:,} characters, more than the {cap:,} a tool result may "
        f"carry (--max-result-chars){hint}"
    )


def build_server(
    bridge: Bridge, *, instructions: str, version: str = "", max_result: int = DEFAULT_MAX_RESULT
) -> WatchServer:
    ring, hub = bridge.ring, bridge.hub

    async def t_list_resources(a: Mapping[str, Any]) -> types.CallToolResult:
        resources = resource_dicts(await (await bridge.manager()).list_resources())
        # Each upstream's state rides in the structured content, the only part some hosts (Claude
        # Code) show the model: a server that is down is then not just "fewer resources".
        result = _json_result(resources, {"resources": resources, "upstreams": bridge.upstream_dicts()})
        missing = bridge.unavailable()
        if missing:  # the list is only what the connected servers offer: say who is missing
            result.content.append(_text("Not listed: " + "; ".join(missing)))
        return result

    async def t_read_resource(a: Mapping[str, Any]) -> types.CallToolResult:
        value = await (await bridge.manager()).read_resource(a["uri"])
        return _json_result(value, tool_spec("read_resource").structured(a, value))

    async def t_watch_start(a: Mapping[str, Any]) -> types.CallToolResult:
        manager = await bridge.manager()
        started = started_dict(await manager.watch_start(a["name"], a["uri"], a.get("on_event")))
        return _json_result(started, started)

    async def t_watch_stop(a: Mapping[str, Any]) -> types.CallToolResult:
        stopped = await (await bridge.manager()).watch_stop(a["name"])
        answer = tool_spec("watch_stop").structured(a, stopped)
        return _json_result(answer, answer)

    async def t_watch_list(a: Mapping[str, Any]) -> types.CallToolResult:
        watches = watch_dicts((await bridge.manager()).watch_list())
        upstreams = bridge.upstream_dicts()
        # The watches answer as the table says; the upstream servers' states come beside them.
        result = _json_result(watches, {"watches": watches, "upstreams": upstreams})
        result.content.append(_text("Upstream servers: " + json.dumps(upstreams, ensure_ascii=False)))
        return result

    reported = 0  # the highest notice id a tool result has told the client about

    async def t_watch_notices(a: Mapping[str, Any]) -> types.CallToolResult:
        nonlocal reported
        catchup = ring.since(a.get("after_id", 0), a.get("limit", DEFAULT_NOTICES_LIMIT))
        answer = catchup_dict(catchup, ring.size)
        reported = max(reported, catchup.next_after)
        return _json_result(answer, answer)

    def new_notices() -> dict[str, Any] | None:
        """Notices no tool result has mentioned yet, once: a host may drop or never deliver pushes
        (Claude Code in print mode, an Agent SDK session), and the model sees only structured content."""
        nonlocal reported
        last, after = ring.last_id, reported
        if last <= after:
            return None
        reported = last
        return {
            "count": last - after,
            "first_id": after + 1,
            "last_id": last,
            "message": f"{last - after} notice(s) arrived that no tool result showed: "
            f"watch_notices(after_id={after}) returns them",
        }

    handlers: dict[str, Callable[[Mapping[str, Any]], Awaitable[types.CallToolResult]]] = {
        "list_resources": t_list_resources,
        "read_resource": t_read_resource,
        "watch_start": t_watch_start,
        "watch_stop": t_watch_stop,
        "watch_list": t_watch_list,
        "watch_notices": t_watch_notices,
    }

    def tool_call(
        name: str, handler: Callable[[Mapping[str, Any]], Awaitable[types.CallToolResult]]
    ) -> ToolCall:
        """``handler`` with its arguments checked, its errors as tool results, and what the
        model has not been shown yet (restores, new notices) added to its result."""

        async def call(ctx: ServerRequestContext[Any, Any], args: Mapping[str, Any]) -> types.CallToolResult:
            try:
                _check_arguments(name, args)
                result = await handler(args)
                _check_size(name, args, result, max_result)
            except WatchError as exc:  # FilterError, LimitError, RoutingError, NotWatchableError, ...
                result = _error(str(exc))
            except Exception as exc:
                # Still a tool error the model can read, not a dropped connection; the log has the details.
                log.logger.exception("serve.tool_failed", extra={"tool": name})
                result = _error(f"{name} failed: {type(exc).__name__}: {clip(str(exc), _ERROR_CAP)}")
            missing = bridge.unavailable()
            if result.is_error and missing and name in ("read_resource", "watch_start"):
                # The URI may be one a server that is down would serve: say which are down and why.
                result.content.append(_text(clip(redact("Not connected: " + "; ".join(missing)), _ERROR_CAP)))
            # A restore notice is pushed, and a push can be dropped unheard: the next tool result
            # says it too (a watch_notices answer that holds it already says it).
            held = [n["id"] for n in (result.structured_content or {}).get("notices", [])]
            restores = bridge.take_restores(held if name == "watch_notices" else ())
            for entry in restores:
                result.content.append(_text(restore_report(entry)))
            if result.structured_content is not None and name != "watch_notices":
                # The same in the structured content, which is all some hosts show the model.
                if restores:
                    result.structured_content["restore"] = [entry_dict(e) for e in restores]
                pending = new_notices()
                if pending is not None:
                    result.structured_content["new_notices"] = pending
            return result

        return call

    @contextmanager
    def attach_listen(stream: ListenStream) -> Iterator[None]:
        # Attached before the ack so nothing published meanwhile is missed; the stream's writer
        # sends the ack first all the same. Closing the outlet (the hub at shutdown) ends the
        # stream gracefully.
        rid = stream.subscription_id
        with hub.attach(
            "listen",
            forward=lambda entry: stream.push(channel_notification(entry, rid)),
            on_close=stream.close,
        ) as outlet:
            log.emit("serve.attached", via="listen", subscription=str(rid))
            try:
                yield
            finally:
                log.emit(
                    "serve.detached",
                    via="listen",
                    subscription=str(rid),
                    pushed=outlet.pushed,
                    dropped=outlet.dropped,
                )

    # No resources here; the list-changed flags are honored (tools never change, so nothing is
    # ever sent for them). What the stream is for is the channel pushes.
    subscriptions = SubscriptionRegistry(
        SERVER_NAME,
        refuse=lambda uri: "this server serves no resources: watch a URI with the watch_start tool",
        on_stream=attach_listen,
        max_pushes=hub.buffer,
    )

    server = WatchServer(
        SERVER_NAME,
        version=version,
        instructions=instructions,
        **tool_handlers(SERVER_NAME, TOOLS, {name: tool_call(name, fn) for name, fn in handlers.items()}),
        on_subscriptions_listen=subscriptions.listen,
    )
    server.subscriptions = subscriptions
    return server


async def connection_writer(outlet: Outlet, session: ServerSession) -> None:
    """Send ``outlet``'s notices connection-scoped on ``session`` until the outlet closes."""
    while (batch := await outlet.next_batch()) is not None:
        for entry in batch:
            await session.send_notification(channel_notification(entry))  # type: ignore[arg-type]


class FirstAnswer:
    """Middleware: sets ``answered`` once the client's first request has been answered."""

    def __init__(self, answered: anyio.Event) -> None:
        self.answered = answered

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        if ctx.request_id is not None:
            self.answered.set()
        return result


class ConnectionAttach:
    """Middleware: a client that opens no listen still gets pushes, connection-scoped.

    - ``stdio`` (one client per process): the connection's outlet exists from startup (so
      notices made before the client connected, such as the restore notice, wait in it). Its
      writer starts :data:`PUSH_SETTLE` seconds after the answer to the client's first request
      (after ``notifications/initialized`` on a legacy connection): a host such as Claude Code
      registers its channel handler only after its first exchanges and drops, unheard, what
      comes before. A legacy client that sends no request gets its pushes
      :data:`PUSH_FALLBACK` seconds after ``initialized``.
    - Streamable HTTP: each legacy session gets an outlet after ``notifications/initialized``,
      written on its standalone (GET) stream and closed with the session. A 2026-07-28 HTTP
      client has no standalone stream; it listens.
    """

    def __init__(
        self,
        hub: Hub,
        tg: anyio.abc.TaskGroup,
        stdio_outlet: Outlet | None,
        *,
        clock: Clock | None = None,
        settle: float = PUSH_SETTLE,
        fallback: float = PUSH_FALLBACK,
    ) -> None:
        self.hub, self.tg, self.stdio_outlet = hub, tg, stdio_outlet
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.settle, self.fallback = settle, fallback
        self._answered = anyio.Event()  # the client's first request (after initialized) is answered
        self._writer_started = False

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        legacy = ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS
        if self.stdio_outlet is None:
            if legacy and ctx.method == "notifications/initialized":
                self.tg.start_soon(self._legacy_http_session, ctx.session)
            return result
        if not self._writer_started:
            if ctx.method == "notifications/initialized" if legacy else ctx.request_id is not None:
                self._writer_started = True
                self.tg.start_soon(self._stdio_writer, ctx.session, ctx.protocol_version)
                log.emit("serve.client", protocol_version=ctx.protocol_version, method=ctx.method)
                if not legacy:
                    self._answered.set()
        elif ctx.request_id is not None and ctx.method != "initialize":
            self._answered.set()
        return result

    async def _stdio_writer(self, session: ServerSession, protocol_version: str) -> None:
        assert self.stdio_outlet is not None
        try:
            async with fail_after(self.clock, self.fallback):  # set at once on a 2026-07-28 connection
                await self._answered.wait()
        except TimeoutError:
            pass  # a client that asks nothing still hears its pushes
        await self.clock.sleep_until(self.clock.now() + self.settle)
        log.emit("serve.attached", via="connection", protocol_version=protocol_version)
        await connection_writer(self.stdio_outlet, session)

    async def _legacy_http_session(self, session: ServerSession) -> None:
        with self.hub.attach("connection") as outlet:
            # The SDK unwinds a connection's exit stack when the session ends (DELETE, or the
            # transport closing); there is no public hook for that yet.
            session._connection.exit_stack.callback(outlet.close)
            log.emit("serve.attached", via="legacy-http-session")
            try:
                await connection_writer(outlet, session)
            finally:
                log.emit(
                    "serve.detached", via="legacy-http-session", pushed=outlet.pushed, dropped=outlet.dropped
                )
