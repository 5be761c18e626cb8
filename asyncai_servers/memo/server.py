"""The memo server: one JSON-object state resource and the tools that change it.

``memo://notes`` is the whole memo as a JSON object; ``memo://notes/{key}`` is
one entry's value (``null`` while unset). Writes are tools (``memo_set``,
``memo_delete``); each one publishes ``ResourceUpdated`` on the subscription
bus for every URI it changed, right after the change (its own write path is
the native change source: nothing polls). Reads carry no ``ttlMs``, so no
client may serve a cached copy that hides the change just announced.

Subscriptions, of both protocol eras, are served by one
:class:`~asyncai_watch.server.SubscriptionRegistry`: ``subscriptions/listen``
(2026-07-28; one listen may name up to 100,000 URIs) and ``resources/subscribe``
(2025-11-25 and before, pushed on that client's session). It refuses URIs this
server does not serve instead of acknowledging them and never sending anything,
and a change costs one notification per listener of the URIs it changed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.shared.uri_template import UriTemplate

from asyncai_watch.server.errors import RESOURCE_NOT_FOUND, resource_not_found
from asyncai_watch.server.subscriptions import DEFAULT_MAX_URIS, SubscriptionRegistry
from asyncai_watch.server.tool_dispatch import tool_handlers

__all__ = [
    "MIME_TYPE",
    "NOTES_URI",
    "NOTE_TEMPLATE",
    "RESOURCE_NOT_FOUND",
    "MemoState",
    "build_server",
]

NOTES_URI: Final = "memo://notes"
NOTE_TEMPLATE: Final = "memo://notes/{key}"
MIME_TYPE: Final = "application/json"
SERVER_NAME: Final = "memo"

_NOTE = UriTemplate.parse(NOTE_TEMPLATE)
_SERVED: Final = f"this server serves {NOTES_URI!r} and {NOTE_TEMPLATE!r}"

_NOTES_DESCRIPTION = (
    "The whole memo as a JSON object (key -> any JSON value). Changes with memo_set / memo_delete; "
    "watchers get one update per change, diffed by top-level key.\n"
    'Example: await watch_start(name="notes", uri="memo://notes")'
)
_NOTE_DESCRIPTION = (
    "One memo entry's value as JSON (null while the key is unset).\n"
    'Example: await watch_start(name="todo", uri="memo://notes/todo")'
)

_KEY_SCHEMA: Final[dict[str, Any]] = {"type": "string", "minLength": 1, "description": "the memo key"}


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


class MemoState:
    """The memo's data and the subscriptions its changes are announced to."""

    def __init__(self, *, max_uris: int = DEFAULT_MAX_URIS) -> None:
        self.notes: dict[str, Any] = {}
        self.reads = 0
        """``resources/read`` requests served (the ``memo_stats`` tool reports it)."""
        self.subscriptions = SubscriptionRegistry(SERVER_NAME, refuse=self.refuse, max_uris=max_uris)

    def close_listeners(self) -> None:
        """End every open listen stream gracefully (an HTTP shutdown would otherwise wait on them)."""
        self.subscriptions.close()

    async def set(self, key: str, value: Any) -> None:
        self.notes[key] = value
        await self._announce(key)

    async def delete(self, key: str) -> bool:
        if key not in self.notes:
            return False
        del self.notes[key]
        await self._announce(key)
        return True

    async def _announce(self, key: str) -> None:
        # Announce after the change is in place: a reader woken by this sees it.
        await self.subscriptions.publish(NOTES_URI)
        await self.subscriptions.publish(_NOTE.expand({"key": key}))

    def read(self, uri: str) -> str:
        """The read body for ``uri``; raise ``MCPError`` naming what is served otherwise."""
        if uri == NOTES_URI:
            return _json(self.notes)
        match = _NOTE.match(uri)
        key = match.get("key") if match is not None else None
        if isinstance(key, str) and key:
            return _json(self.notes.get(key))
        raise resource_not_found(SERVER_NAME, uri, _SERVED)

    def serves(self, uri: str) -> bool:
        if uri == NOTES_URI:
            return True
        match = _NOTE.match(uri)
        key = match.get("key") if match is not None else None
        return isinstance(key, str) and bool(key)

    def refuse(self, uri: str) -> str | None:
        """Why a subscription to ``uri`` is refused (``None``: it is served)."""
        return None if self.serves(uri) else _SERVED


_TOOLS: Final = [
    types.Tool(
        name="memo_set",
        description=(
            "Set memo key `key` to `value` (any JSON value) and notify watchers of memo://notes "
            "and memo://notes/{key}."
        ),
        input_schema={
            "type": "object",
            "properties": {"key": _KEY_SCHEMA, "value": {"description": "any JSON value"}},
            "required": ["key", "value"],
            "additionalProperties": False,
        },
        annotations=types.ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
        ),
    ),
    types.Tool(
        name="memo_get",
        description="Return memo key `key`'s value as JSON (null when unset).",
        input_schema={
            "type": "object",
            "properties": {"key": _KEY_SCHEMA},
            "required": ["key"],
            "additionalProperties": False,
        },
        annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
    ),
    types.Tool(
        name="memo_delete",
        description="Delete memo key `key`; returns whether it existed. Notifies watchers when it did.",
        input_schema={
            "type": "object",
            "properties": {"key": _KEY_SCHEMA},
            "required": ["key"],
            "additionalProperties": False,
        },
        annotations=types.ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
        ),
    ),
    types.Tool(
        name="memo_stats",
        description=(
            "How many resources/read requests this server has answered (to see what watching costs), "
            "and its subscriptions: URIs listened to, open listens, 2025-era sessions, notifications handed out."
        ),
        input_schema={"type": "object", "properties": {}, "additionalProperties": False},
        annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
    ),
]


def _tool_error(text: str) -> types.CallToolResult:
    # Tool failures are in-band results (is_error), so the model sees the reason.
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def _tool_ok(text: str, structured: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=structured
    )


def _key_argument(tool: str, arguments: Mapping[str, Any], allowed: set[str]) -> str | types.CallToolResult:
    unknown = sorted(set(arguments) - allowed)
    if unknown:
        return _tool_error(f"{tool}: unknown argument(s) {unknown}; accepted: {sorted(allowed)}")
    key = arguments.get("key")
    if not isinstance(key, str) or not key:
        return _tool_error(f"{tool}: `key` must be a non-empty string, got {key!r}")
    return key


def build_server(state: MemoState | None = None) -> Server[Any]:
    """A memo :class:`~mcp.server.Server` over ``state`` (a fresh one when omitted)."""
    memo = state if state is not None else MemoState()

    async def list_resources(
        _ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    uri=NOTES_URI, name="notes", description=_NOTES_DESCRIPTION, mime_type=MIME_TYPE
                )
            ]
        )

    async def list_templates(
        _ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    uri_template=NOTE_TEMPLATE,
                    name="note",
                    description=_NOTE_DESCRIPTION,
                    mime_type=MIME_TYPE,
                )
            ]
        )

    async def read_resource(
        _ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        text = memo.read(params.uri)
        memo.reads += 1
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=params.uri, mime_type=MIME_TYPE, text=text)]
        )

    async def memo_set(
        _ctx: ServerRequestContext[Any, Any], arguments: Mapping[str, Any]
    ) -> types.CallToolResult:
        key = _key_argument("memo_set", arguments, {"key", "value"})
        if isinstance(key, types.CallToolResult):
            return key
        if "value" not in arguments:
            return _tool_error("memo_set: `value` is required (any JSON value, null included)")
        await memo.set(key, arguments["value"])
        return _tool_ok("ok", {"key": key, "value": arguments["value"]})

    async def memo_get(
        _ctx: ServerRequestContext[Any, Any], arguments: Mapping[str, Any]
    ) -> types.CallToolResult:
        key = _key_argument("memo_get", arguments, {"key"})
        if isinstance(key, types.CallToolResult):
            return key
        value = memo.notes.get(key)
        return _tool_ok(_json(value), {"key": key, "value": value, "found": key in memo.notes})

    async def memo_delete(
        _ctx: ServerRequestContext[Any, Any], arguments: Mapping[str, Any]
    ) -> types.CallToolResult:
        key = _key_argument("memo_delete", arguments, {"key"})
        if isinstance(key, types.CallToolResult):
            return key
        existed = await memo.delete(key)
        return _tool_ok("deleted" if existed else "absent", {"key": key, "deleted": existed})

    async def memo_stats(
        _ctx: ServerRequestContext[Any, Any], _arguments: Mapping[str, Any]
    ) -> types.CallToolResult:
        subs = memo.subscriptions.stats()
        return _tool_ok(
            str(memo.reads),
            {
                "reads": memo.reads,
                "subscribed_uris": subs.uris,
                "subscriptions": subs.subscriptions,
                "listens": subs.listens,
                "sessions": subs.sessions,
                "delivered": subs.delivered,
            },
        )

    tools = {"memo_set": memo_set, "memo_get": memo_get, "memo_delete": memo_delete, "memo_stats": memo_stats}

    return Server(
        SERVER_NAME,
        version="0.1.0",
        instructions=(
            "A shared JSON memo. Read memo://notes; change it with memo_set / memo_delete; "
            'watch it with await watch_start(name="notes", uri="memo://notes").'
        ),
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
        **tool_handlers(SERVER_NAME, _TOOLS, tools),
        **memo.subscriptions.handlers(),
    )
