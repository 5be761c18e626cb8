"""The loop of a scripted stdio MCP server written without the SDK (``legacy_server.py``,
``careless_server.py``): one JSON-RPC message per line, each request answered by a handler."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any


class RpcError(Exception):
    """Raised by a handler: the request is answered with this JSON-RPC error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def serve(handle: Callable[[str, dict[str, Any]], Any], seen: Callable[[str], None] | None = None) -> None:
    """Until stdin ends: answer each request with ``handle(method, params)`` (or its
    :class:`RpcError`; a callable result is called with the request id and writes the answer
    itself); ``seen`` gets the method of every request and notification."""
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        method = message.get("method")
        if method is None:
            continue  # a response to something we never asked: ignore
        if seen is not None:
            seen(method)
        if "id" not in message:
            continue  # a notification (initialized, cancelled, ...)
        try:
            result = handle(method, message.get("params") or {})
        except RpcError as err:
            send({"jsonrpc": "2.0", "id": message["id"], "error": {"code": err.code, "message": err.message}})
        else:
            if callable(result):  # it writes its answer itself (a line too large to build)
                result(message["id"])
                continue
            send({"jsonrpc": "2.0", "id": message["id"], "result": result})
