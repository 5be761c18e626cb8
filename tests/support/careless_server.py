"""A 2026-07-28 MCP server whose results are not what the schema says, hand-rolled over stdio.

The SDK's own server always writes valid results, so it cannot play this part. This
one answers ``server/discover`` properly and then gets results wrong the ways real
servers do:

- tool ``no_result_type``: a tool result without ``resultType`` (the spec says a
  client reads that as complete);
- tool ``no_result_type_bad_structure``: the same, and its structured content misses
  the tool's output schema;
- tool ``bad_structure``: a complete result whose structured content misses the
  tool's output schema;
- tool ``broken``: a result whose content block has no ``text``;
- ``resources/read``: a result without the 2026-07-28 cache fields (``ttlMs``, ...).

Run: ``python tests/support/careless_server.py``.
"""

from __future__ import annotations

from typing import Any

from jsonrpc_lines import RpcError, serve

VERSION = "2026-07-28"
CACHE = {"ttlMs": 0, "cacheScope": "private"}
COUNT_SCHEMA = {"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]}

_TOOLS = [
    {"name": "no_result_type", "inputSchema": {"type": "object"}},
    {"name": "no_result_type_bad_structure", "inputSchema": {"type": "object"}, "outputSchema": COUNT_SCHEMA},
    {"name": "bad_structure", "inputSchema": {"type": "object"}, "outputSchema": COUNT_SCHEMA},
    {"name": "broken", "inputSchema": {"type": "object"}},
]


def _call_tool(name: object) -> dict[str, Any]:
    text = [{"type": "text", "text": f"{name} ran"}]
    if name == "no_result_type":
        return {"content": text}
    if name == "no_result_type_bad_structure":
        return {"content": text, "structuredContent": {"count": "many"}}
    if name == "bad_structure":
        return {"resultType": "complete", "content": text, "structuredContent": {"count": "many"}}
    if name == "broken":
        return {"resultType": "complete", "content": [{"type": "text"}]}
    raise RpcError(-32602, f"careless: unknown tool {name!r}")


def _handle(method: str, params: dict[str, Any]) -> dict[str, Any]:
    if method == "server/discover":
        return {
            "resultType": "complete",
            **CACHE,
            "supportedVersions": [VERSION],
            "capabilities": {"tools": {}, "resources": {}},
            "serverInfo": {"name": "careless", "version": "0.1.0"},
        }
    if method == "tools/list":
        return {"resultType": "complete", **CACHE, "tools": _TOOLS}
    if method == "tools/call":
        return _call_tool(params.get("name"))
    if method == "resources/read":
        uri = params.get("uri")
        return {"contents": [{"uri": uri, "mimeType": "text/plain", "text": "hello"}]}
    raise RpcError(-32601, f"Method not found: {method}")


def main() -> None:
    serve(_handle)


if __name__ == "__main__":
    main()
