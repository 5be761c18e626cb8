"""A stdio MCP server (2026-07-28) with one tool, ``hold``, that keeps the turn calling it open.

``hold`` connects to the loopback port given as the first argument, says ``held``, and answers
only once the test closes that connection: the test knows the turn is running (it reads the
line) and decides when it may end (or kills the agent first). No sleeping anywhere.

Run: ``python tests/support/hold_server.py PORT``.
"""

from __future__ import annotations

import socket
import sys
from typing import Any

from jsonrpc_lines import RpcError, serve  # run by path: its folder is sys.path[0]

VERSION = "2026-07-28"
CACHE = {"ttlMs": 0, "cacheScope": "private"}


def _hold(port: int) -> dict[str, Any]:
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(b"held\n")
        conn.recv(1)  # until the test closes its end
    return {"resultType": "complete", "content": [{"type": "text", "text": "released"}]}


def _handle(method: str, params: dict[str, Any]) -> dict[str, Any]:
    if method == "server/discover":
        return {
            "resultType": "complete",
            **CACHE,
            "supportedVersions": [VERSION],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "hold", "version": "0.1.0"},
        }
    if method == "tools/list":
        return {
            "resultType": "complete",
            **CACHE,
            "tools": [{"name": "hold", "inputSchema": {"type": "object"}}],
        }
    if method == "tools/call" and params.get("name") == "hold":
        return _hold(int(sys.argv[1]))
    raise RpcError(-32601, f"hold: no such method or tool: {method} {params.get('name', '')}".strip())


if __name__ == "__main__":
    serve(_handle)
