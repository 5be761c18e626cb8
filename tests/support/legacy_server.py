"""A legacy-only MCP server (2025-11-25, initialize handshake), hand-rolled over stdio.

It stands in for the many servers not yet on 2026-07-28. The SDK cannot play
this part: its server serves both eras, and a modern server rejects the
fallback ``initialize`` (see the SDK crib). So this speaks newline-delimited
JSON-RPC by hand and knows only: ``initialize``, ``notifications/initialized``,
``ping``, ``tools/list``, ``tools/call``, ``resources/list``,
``resources/templates/list``, ``resources/read``. Everything else, above all
``server/discover``, is answered with -32601 (method not found), which is what
makes a ``mode="auto"`` client fall back to ``initialize``.

It advertises ``resources.subscribe`` and answers ``resources/subscribe`` and
``resources/unsubscribe`` as a 2025-era server does: ``legacy_set`` then sends
``notifications/resources/updated`` for ``legacy://state`` (and the item it set,
``legacy://items/{key}``) to a session that subscribed to it. It records every method it
receives; the ``legacy_methods`` tool returns that list.

Run: ``python tests/support/legacy_server.py`` (``--no-subscribe``: advertise no ``resources.subscribe``
and answer ``resources/subscribe`` with -32601, as servers that cannot be watched do).
"""

from __future__ import annotations

import base64
import json
import sys
from typing import Any

from jsonrpc_lines import RpcError, send, serve

PROTOCOL_VERSION = "2025-11-25"
STATE_URI = "legacy://state"
TEXT_BLOB_URI = "legacy://blob/text"
BINARY_URI = "legacy://blob/binary"

_state: dict[str, Any] = {"greeting": "hello"}
_methods: list[str] = []
_subscribed: set[str] = set()
_SUBSCRIBE = "--no-subscribe" not in sys.argv

_TOOLS = [
    {
        "name": "legacy_get",
        "description": "Read a key of the legacy state.",
        "inputSchema": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "legacy_set",
        "description": "Set a key of the legacy state.",
        "inputSchema": {
            "type": "object",
            "properties": {"key": {"type": "string"}, "value": {}},
            "required": ["key", "value"],
        },
        "annotations": {"readOnlyHint": False, "destructiveHint": False},
    },
    {
        "name": "legacy_methods",
        "description": "The JSON-RPC methods this server has received, in order.",
        "inputSchema": {"type": "object", "properties": {}},
        # No readOnlyHint: a client must not assume read-only (MCP's default is false).
        "annotations": {"title": "methods"},
    },
]


def _text(text: str, *, is_error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


def _call_tool(params: dict[str, Any]) -> dict[str, Any]:
    name = params.get("name")
    args = params.get("arguments") or {}
    if name == "legacy_get":
        return _text(json.dumps(_state.get(str(args.get("key")))))
    if name == "legacy_set":
        key = str(args.get("key"))
        _state[key] = args.get("value")
        for uri in (STATE_URI, f"legacy://items/{key}"):
            if uri in _subscribed:
                send({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": uri}})
        return _text("ok")
    if name == "legacy_methods":
        return _text(json.dumps(_methods))
    return _text(f"unknown tool {name!r}", is_error=True)


def _handle(method: str, params: dict[str, Any]) -> dict[str, Any]:
    if method == "initialize":
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {"tools": {}, "resources": {"subscribe": _SUBSCRIBE, "listChanged": False}},
            "serverInfo": {"name": "legacy", "version": "0.1.0"},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": _TOOLS}
    if method == "tools/call":
        return _call_tool(params)
    if method == "resources/list":
        # Two pages, so a client must follow nextCursor to see every resource.
        if params.get("cursor") is None:
            return {
                "resources": [{"uri": STATE_URI, "name": "state", "mimeType": "application/json"}],
                "nextCursor": "page-2",
            }
        if params.get("cursor") == "page-2":
            return {
                "resources": [{"uri": u, "name": u.rsplit("/", 1)[-1]} for u in (TEXT_BLOB_URI, BINARY_URI)]
            }
        raise RpcError(-32602, f"legacy: invalid cursor {params.get('cursor')!r}")
    if method == "resources/templates/list":
        return {"resourceTemplates": [{"uriTemplate": "legacy://items/{id}", "name": "item"}]}
    if method in ("resources/subscribe", "resources/unsubscribe") and _SUBSCRIBE:
        uri = str(params.get("uri"))
        (_subscribed.add if method == "resources/subscribe" else _subscribed.discard)(uri)
        return {}
    if method == "resources/read":
        uri = params.get("uri")
        if uri == STATE_URI:
            return {"contents": [{"uri": uri, "mimeType": "application/json", "text": json.dumps(_state)}]}
        if isinstance(uri, str) and uri.startswith("legacy://items/"):
            value = _state.get(uri.removeprefix("legacy://items/"))
            return {"contents": [{"uri": uri, "mimeType": "application/json", "text": json.dumps(value)}]}
        if uri == TEXT_BLOB_URI:
            blob = base64.b64encode("héllo as a blob".encode()).decode()
            return {"contents": [{"uri": uri, "mimeType": "text/plain", "blob": blob}]}
        if uri == BINARY_URI:
            blob = base64.b64encode(bytes([0xFF, 0xFE, 0x00, 0x80])).decode()
            return {"contents": [{"uri": uri, "mimeType": "application/octet-stream", "blob": blob}]}
        raise RpcError(-32002, f"legacy: unknown resource {uri!r}")
    raise RpcError(-32601, f"Method not found: {method}")


def main() -> None:
    serve(_handle, seen=_methods.append)


if __name__ == "__main__":
    main()
