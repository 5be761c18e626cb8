"""The MCP server ``asyncai-watch serve`` runs: the watch tools, the listen stream, the pushes.

Built on the low-level :class:`mcp.server.Server`, so this module decides the capabilities
(``experimental["claude/channel"] = {}`` on both handshakes) and writes the listen stream
itself (the ack first, then each pushed notice stamped with the listen's subscription id
and sent request-scoped, which is how a notification reaches a 2026-07-28 client on
Streamable HTTP as well as stdio: there is no standalone stream there).

A legacy (``initialize``) client, which is what Claude Code and other hosts on the
TypeScript SDK are, opens no listen. It gets its pushes connection-scoped after
``notifications/initialized``, through a :class:`ConnectionAttach` middleware (stdio: the one
connection; Streamable HTTP: each legacy session, on its standalone GET stream).

Tools return the design's shapes (:mod:`asyncai_watch.shapes`) as JSON text, plus structured
content (an object, as MCP requires: lists are wrapped, e.g. ``{"resources": [...]}``). Bad
input is an ``isError`` result whose text says what was wrong and what is accepted; nothing
is subscribed then. An unknown tool name is not a tool that ran and failed but a JSON-RPC
error -32602 (invalid params) naming the tools there are, as the MCP spec says and as every
reference server answers (:mod:`asyncai_watch._mcp_errors`). This server serves no MCP
resources itself (``read_resource`` is a tool), so it has no resource-not-found error: it
declares no ``resources`` capability (``resources/read`` is -32601, method not found) and
leaves a listen's ``resourceSubscriptions`` out of the acknowledgment.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import anyio
import anyio.abc
import mcp_types as types
from mcp.server import Server
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp_types import INVALID_REQUEST
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from asyncai_watch import log
from asyncai_watch._mcp_errors import unknown_tool
from asyncai_watch._tool_schemas import input_schemas
from asyncai_watch.errors import WatchError
from asyncai_watch.runtime.manager import WatchManager
from asyncai_watch.shapes import resource_dicts, started_dict, watch_dicts

from .channel import CHANNEL_CAPABILITY, CHANNEL_METHOD, catchup_dict, channel_params
from .hub import Hub, Outlet
from .ring import Entry, NoticeRing

__all__ = ["TOOLS", "ConnectionAttach", "WatchServer", "build_server", "connection_writer"]

SERVER_NAME: Final = "asyncai-watch"
DEFAULT_NOTICES_LIMIT: Final = 100
MAX_NOTICES_LIMIT: Final = 1000

_RO = types.ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
_STR = {"type": "string"}
_EMPTY: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}

TOOLS: Final = [
    types.Tool(
        name="list_resources",
        description=(
            "Every URI and URI template the connected servers offer: "
            '[{"uri", "template", "name", "description", "example", "mime_type", "server", "subscribable"}]. '
            "uri is the RFC 6570 template when template is true; example is a ready watch_start call; "
            "subscribable says whether a watch can work on it (read_resource works either way)."
        ),
        input_schema=_EMPTY,
        annotations=_RO,
    ),
    types.Tool(
        name="read_resource",
        description="Read a resource from the server that serves it: parsed JSON, else the text.",
        input_schema={
            "type": "object",
            "properties": {"uri": {"type": "string", "description": "e.g. memo://notes"}},
            "required": ["uri"],
            "additionalProperties": False,
        },
        annotations=_RO,
    ),
    types.Tool(
        name="watch_start",
        description=(
            "Watch a resource: each change becomes a notice (pushed as a <channel> tag, and kept for "
            "watch_notices). The first read happens now, so a URI the server rejects fails here. "
            'Returns {"name", "uri", "shape"}. on_event is optional Python source run once per event with '
            "`event` (a dict: type, key, new, old, changed, object, ...): its last expression is the notice "
            "line, None drops the event; it is checked now (a SyntaxError or NameError fails the call). "
            'Example: name="cfg", uri="file:///srv/app/config.json", '
            "on_event=\"None if event['key'] == 'ts' else event['type'] + ' ' + event['key']\""
        ),
        input_schema={
            "type": "object",
            "properties": {
                "name": {
                    "type": "string",
                    "description": "1-64 of letters, digits, _ . -, starting with a letter or _",
                },
                "uri": {
                    "type": "string",
                    "description": "a URI or a template's expansion from list_resources",
                },
                "on_event": {
                    "type": ["string", "null"],
                    "description": "Python filter source; omit for the default line",
                },
            },
            "required": ["name", "uri"],
            "additionalProperties": False,
        },
        annotations=types.ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
        ),
    ),
    types.Tool(
        name="watch_stop",
        description='Stop and forget a watch. Returns {"name", "stopped"}; stopped is false when no watch had that name.',
        input_schema={
            "type": "object",
            "properties": {"name": _STR},
            "required": ["name"],
            "additionalProperties": False,
        },
        annotations=types.ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
        ),
    ),
    types.Tool(
        name="watch_list",
        description=(
            'Every watch: [{"name", "uri", "shape", "events", "notices"}], plus "failed": true or '
            '"restore_failed": true with "error" for a watch that is not running.'
        ),
        input_schema=_EMPTY,
        annotations=_RO,
    ),
    types.Tool(
        name="watch_notices",
        description=(
            "The notices you have not seen: those with id > after_id, oldest first (pushes can be dropped by "
            'the host; this cannot). Returns {"notices": [{"id", "time", "kind", "watch", "uri", "text", '
            '"failed"?}], "next_after", "last_id", "more", "gap"}. Pass next_after as after_id next time; '
            "more=true means call again. gap (else null) says how many older notices left the bounded "
            "buffer unread: check watch_list and read_resource for the current state then."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "after_id": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "the highest notice_id you have seen; 0 for all that are kept",
                },
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_NOTICES_LIMIT},
            },
            "additionalProperties": False,
        },
        annotations=_RO,
    ),
]
_SCHEMAS: Final = {t.name: t.input_schema for t in TOOLS}


class ToolInputError(WatchError):
    """A tool was called with arguments it does not accept."""


def _check_arguments(tool: str, args: Mapping[str, Any]) -> None:
    """Enforce the tool's input schema with a message the model can act on."""
    schema = _SCHEMAS[tool]
    props: Mapping[str, Any] = schema.get("properties", {})
    required: list[str] = schema.get("required", [])
    accepted = ", ".join(props) or "no arguments"
    unknown = sorted(set(args) - set(props))
    if unknown:
        raise ToolInputError(f"{tool}: unknown argument(s) {', '.join(unknown)}; it accepts {accepted}")
    missing = [r for r in required if r not in args]
    if missing:
        raise ToolInputError(
            f"{tool}: missing required argument(s) {', '.join(missing)}; it accepts {accepted}"
        )
    for key, value in args.items():
        kinds = props[key].get("type")
        allowed = kinds if isinstance(kinds, list) else [kinds]
        ok = any(
            (k == "string" and isinstance(value, str))
            or (k == "null" and value is None)
            or (k == "integer" and isinstance(value, int) and not isinstance(value, bool))
            for k in allowed
        )
        if not ok:
            raise ToolInputError(
                f"{tool}: {key} must be {' or '.join(allowed)}, got {json.dumps(value)[:80]}"
            )
        if isinstance(value, int) and not isinstance(value, bool):
            low, high = props[key].get("minimum"), props[key].get("maximum")
            if (low is not None and value < low) or (high is not None and value > high):
                bounds = f">= {low}" + (f" and <= {high}" if high is not None else "")
                raise ToolInputError(f"{tool}: {key} must be an integer {bounds}, got {value}")


def _json_result(text_value: Any, structured: dict[str, Any]) -> types.CallToolResult:
    text = text_value if isinstance(text_value, str) else json.dumps(text_value, ensure_ascii=False)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=structured
    )


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)


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

    def get_capabilities(self, *args: Any, **kwargs: Any) -> types.ServerCapabilities:
        caps = super().get_capabilities(*args, **kwargs)
        caps.experimental = {**(caps.experimental or {}), CHANNEL_CAPABILITY: {}}
        return caps


def build_server(
    manager: WatchManager, ring: NoticeRing, hub: Hub, *, instructions: str, version: str = ""
) -> WatchServer:
    async def t_list_resources(a: Mapping[str, Any]) -> types.CallToolResult:
        resources = resource_dicts(await manager.list_resources())
        return _json_result(resources, {"resources": resources})

    async def t_read_resource(a: Mapping[str, Any]) -> types.CallToolResult:
        value = await manager.read_resource(a["uri"])
        return _json_result(value, {"uri": a["uri"], "value": value})

    async def t_watch_start(a: Mapping[str, Any]) -> types.CallToolResult:
        started = started_dict(await manager.watch_start(a["name"], a["uri"], a.get("on_event")))
        return _json_result(started, started)

    async def t_watch_stop(a: Mapping[str, Any]) -> types.CallToolResult:
        stopped = await manager.watch_stop(a["name"])
        return _json_result({"name": a["name"], "stopped": stopped}, {"name": a["name"], "stopped": stopped})

    async def t_watch_list(a: Mapping[str, Any]) -> types.CallToolResult:
        watches = watch_dicts(manager.watch_list())
        return _json_result(watches, {"watches": watches})

    async def t_watch_notices(a: Mapping[str, Any]) -> types.CallToolResult:
        catchup = ring.since(a.get("after_id", 0), a.get("limit", DEFAULT_NOTICES_LIMIT))
        answer = catchup_dict(catchup, ring.size)
        return _json_result(answer, answer)

    handlers: dict[str, Callable[[Mapping[str, Any]], Awaitable[types.CallToolResult]]] = {
        "list_resources": t_list_resources,
        "read_resource": t_read_resource,
        "watch_start": t_watch_start,
        "watch_stop": t_watch_stop,
        "watch_list": t_watch_list,
        "watch_notices": t_watch_notices,
    }

    async def list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=TOOLS)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        handler = handlers.get(params.name)
        if handler is None:
            raise unknown_tool(SERVER_NAME, params.name, handlers)
        args = params.arguments or {}
        try:
            _check_arguments(params.name, args)
            return await handler(args)
        except WatchError as exc:  # FilterError, LimitError, RoutingError, NotWatchableError, ...
            return _error(str(exc))
        except Exception as exc:
            # Still a tool error the model can read, not a dropped connection; the log has the details.
            log.logger.exception("serve.tool_failed", extra={"tool": params.name})
            return _error(f"{params.name} failed: {type(exc).__name__}: {exc}")

    async def listen(
        ctx: ServerRequestContext[Any, Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        rid = ctx.request_id
        if rid is None:
            raise MCPError(INVALID_REQUEST, "subscriptions/listen requires a request id")
        requested = params.notifications
        # No resources here; the list-changed flags are honored (tools never change, so nothing is
        # ever sent for them). What the stream is for is the channel pushes.
        honored = types.SubscriptionFilter(
            tools_list_changed=True if requested.tools_list_changed else None,
            prompts_list_changed=True if requested.prompts_list_changed else None,
            resources_list_changed=True if requested.resources_list_changed else None,
        )
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: rid}
        with hub.attach("listen") as outlet:
            # Attached before the ack so nothing published meanwhile is missed; this task alone
            # writes the stream, so the ack still goes first.
            await ctx.session.send_notification(
                types.SubscriptionsAcknowledgedNotification(
                    params=types.SubscriptionsAcknowledgedNotificationParams(
                        notifications=honored, _meta=meta
                    )
                ),
                related_request_id=rid,
            )
            log.emit("serve.attached", via="listen", subscription=str(rid))
            try:
                while (batch := await outlet.next_batch()) is not None:
                    for entry in batch:
                        await ctx.session.send_notification(
                            channel_notification(entry, rid),  # type: ignore[arg-type]  # custom method
                            related_request_id=rid,
                        )
            finally:
                log.emit(
                    "serve.detached",
                    via="listen",
                    subscription=str(rid),
                    pushed=outlet.pushed,
                    dropped=outlet.dropped,
                )
        return types.SubscriptionsListenResult(_meta=meta)

    return WatchServer(
        SERVER_NAME,
        version=version,
        instructions=instructions,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        get_tool_input_schema=input_schemas(TOOLS),
        on_subscriptions_listen=listen,
    )


async def connection_writer(outlet: Outlet, session: ServerSession) -> None:
    """Send ``outlet``'s notices connection-scoped on ``session`` until the outlet closes."""
    while (batch := await outlet.next_batch()) is not None:
        for entry in batch:
            await session.send_notification(channel_notification(entry))  # type: ignore[arg-type]


class ConnectionAttach:
    """Middleware: a client that opens no listen still gets pushes, connection-scoped.

    - ``stdio`` (one client per process): the connection's outlet exists from startup (so
      notices made before the client connected, such as the restore notice, wait in it);
      its writer starts once the client is ready: after ``notifications/initialized`` on a
      legacy connection, at the first request on a 2026-07-28 one (whose stdio pipe carries
      connection-scoped notifications too).
    - Streamable HTTP: each legacy session gets an outlet after ``notifications/initialized``,
      written on its standalone (GET) stream and closed with the session. A 2026-07-28 HTTP
      client has no standalone stream; it listens.
    """

    def __init__(self, hub: Hub, tg: anyio.abc.TaskGroup, stdio_outlet: Outlet | None) -> None:
        self.hub, self.tg, self.stdio_outlet = hub, tg, stdio_outlet
        self.started = False

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        legacy = ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS
        ready = ctx.method == "notifications/initialized" if legacy else ctx.request_id is not None
        if not ready:
            return result
        if self.stdio_outlet is not None:
            if not self.started:
                self.started = True
                self.tg.start_soon(connection_writer, self.stdio_outlet, ctx.session)
                log.emit("serve.attached", via="connection", protocol_version=ctx.protocol_version)
        elif legacy:
            self.tg.start_soon(self._legacy_http_session, ctx.session)
        return result

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
