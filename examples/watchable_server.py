"""A minimal MCP server that asyncai-watch can watch (MCP 2026-07-28, the `mcp` SDK 2.3), over stdio.

    python watchable_server.py

Resources:
  board://items          state: the whole board, a JSON object (key -> value)
  board://items/{key}    state: one item's value (null while unset)
  board://events         event log: every change, with log_id, last_seq and contiguous seqs
Tool:
  board_set(key, value)  the write path, and so the change source: it notifies listeners
"""

from __future__ import annotations

import json
import secrets
from collections import Counter, deque
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourceUpdated
from mcp.shared.exceptions import MCPError
from mcp.shared.uri_template import UriTemplate

ITEMS_URI = "board://items"
ITEM = UriTemplate.parse("board://items/{key}")
EVENTS_URI = "board://events"
STATE_MIME = "application/json"
EVENTS_MIME = "application/vnd.asyncai.events+json"  # this mimeType makes a read an event log
AFTER_KEY = "asyncai-watch/events-after"  # optional: the reader's position, {"log_id", "seq"}
SERVED = f"this server serves {ITEMS_URI}, {ITEM} and {EVENTS_URI}"


class Board:
    def __init__(self) -> None:
        self.items: dict[str, Any] = {}
        self.log_id = secrets.token_hex(8)  # new for every process: a restart starts a new log
        self.last_seq = 0  # the newest seq ever given; seqs go up by exactly 1 per event
        self.events: deque[dict[str, Any]] = deque(maxlen=256)  # a bounded ring
        self.bus = InMemorySubscriptionBus()
        self.listened: Counter[str] = Counter()  # the URIs open listens named, spelled as sent

    async def set(self, key: str, value: Any) -> None:
        event: dict[str, Any] = {"type": "ADDED", "object": {"name": key, "value": value}}
        if key in self.items:
            event = {**event, "type": "MODIFIED", "old": {"name": key, "value": self.items[key]}}
        self.items[key] = value
        self.last_seq += 1
        self.events.append({"seq": self.last_seq, **event})
        # Announce after the change is in place, once per URI it changed, spelled exactly as
        # each listener spelled it: the SDK forwards an update only on an exact string match.
        changed = [ITEMS_URI, EVENTS_URI, *(uri for uri in self.listened if ITEM.match(uri) == {"key": key})]
        for uri in changed:
            await self.bus.publish(ResourceUpdated(uri=uri))

    def events_text(self, after: Any) -> str:
        events = list(self.events)
        if isinstance(after, dict) and after.get("log_id") == self.log_id and type(after.get("seq")) is int:
            events = [e for e in events if e["seq"] > after["seq"]]  # only what this reader has not read
        return json.dumps({"log_id": self.log_id, "last_seq": self.last_seq, "events": events})

    def read(self, uri: str, meta: dict[str, Any]) -> tuple[str, str]:
        """``(text, mimeType)`` of ``uri``; a URI this server does not serve is -32602."""
        if uri == ITEMS_URI:
            return json.dumps(self.items), STATE_MIME
        if uri == EVENTS_URI:
            return self.events_text(meta.get(AFTER_KEY)), EVENTS_MIME
        match = ITEM.match(uri)
        key = match.get("key") if match is not None else None
        if isinstance(key, str) and key:
            return json.dumps(self.items.get(key)), STATE_MIME
        raise MCPError(types.INVALID_PARAMS, f"board: unknown resource {uri!r}; {SERVED}")


class TrackingListen:
    """The SDK's ListenHandler, and a count of the URI strings each open listen names."""

    def __init__(self, board: Board) -> None:
        self.board = board
        self.inner = ListenHandler(board.bus)

    async def __call__(
        self, ctx: ServerRequestContext[Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        uris = Counter(params.notifications.resource_subscriptions or [])
        self.board.listened.update(uris)
        try:
            return await self.inner(ctx, params)  # acknowledges, then streams until the client leaves
        finally:
            self.board.listened -= uris  # drops the URIs nobody listens to any more


RESOURCES = [
    types.Resource(
        uri=ITEMS_URI,
        name="items",
        mime_type=STATE_MIME,
        description='The whole board.\nExample: await watch_start(name="board", uri="board://items")',
    ),
    types.Resource(
        uri=EVENTS_URI,
        name="events",
        mime_type=EVENTS_MIME,
        description='Every change to the board.\nExample: await watch_start(name="log", uri="board://events")',
    ),
]
TEMPLATES = [
    types.ResourceTemplate(
        uri_template=str(ITEM),
        name="item",
        mime_type=STATE_MIME,
        description='One item\'s value.\nExample: await watch_start(name="todo", uri="board://items/todo")',
    )
]
TOOLS = [
    types.Tool(
        name="board_set",
        description="Set item `key` to `value` (any JSON value).",
        input_schema={
            "type": "object",
            "properties": {"key": {"type": "string", "minLength": 1}, "value": {}},
            "required": ["key", "value"],
        },
        annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=False),
    )
]


def build_server(board: Board | None = None) -> Server[Any]:
    board = board if board is not None else Board()

    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=RESOURCES)

    async def list_templates(ctx: Any, params: Any) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=TEMPLATES)

    async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        text, mime = board.read(params.uri, dict(params.meta or {}))
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=params.uri, mime_type=mime, text=text)]
        )

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=TOOLS)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        args = params.arguments or {}
        if params.name != "board_set":
            raise MCPError(
                types.INVALID_PARAMS, f"board: unknown tool {params.name!r}; its tool is board_set"
            )
        key = args.get("key")
        if not isinstance(key, str) or not key or "value" not in args:
            text = f"board_set: needs `key` (a non-empty string) and `value`, got {sorted(args)}"
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)
        await board.set(key, args["value"])
        return types.CallToolResult(content=[types.TextContent(type="text", text="ok")])

    return Server(
        "board",
        version="1.0",
        on_list_resources=list_resources,  # without it the SDK advertises no resources capability
        on_list_resource_templates=list_templates,  # optional: omit it if you serve no templates
        on_read_resource=read_resource,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        # Over HTTP the SDK checks each tools/call's Mcp-Param-* headers against the tool's input
        # schema; without this lookup it runs a whole tools/list dispatch on every call to find it.
        get_tool_input_schema={tool.name: tool.input_schema for tool in TOOLS}.get,
        on_subscriptions_listen=TrackingListen(board),  # makes the SDK advertise resources.subscribe
    )


async def main() -> None:
    server = build_server()
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
