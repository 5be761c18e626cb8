"""A hostile stdio MCP server (2025-11-25, no SDK) whose answers can be far larger than a client's cap.

``resources/read`` of:

- ``huge://small``: a short text;
- ``huge://big?bytes=N``: a text of N bytes, written in 1 MiB pieces (never built whole), the
  request id first, as our servers and the Python SDK write it;
- ``huge://big-id-last?bytes=N``: the same with the id last (the TypeScript SDK's order);
- ``huge://no-id?bytes=N``: a line of N bytes that is no answer at all (no id anywhere).

Run: ``python tests/support/huge_server.py``.
"""

from __future__ import annotations

import sys
import urllib.parse
from collections.abc import Callable
from typing import Any

from jsonrpc_lines import RpcError, serve

_PIECE = 1 << 20


def _write_big(size: int, *, head: str, tail: str) -> None:
    out = sys.stdout
    out.write(head)
    left = size
    while left > 0:
        n = min(left, _PIECE)
        out.write("x" * n)
        left -= n
    out.write(tail + "\n")
    out.flush()


def _big(uri: str, size: int, mode: str) -> Callable[[Any], None]:
    def answer(request_id: Any) -> None:
        contents = f'{{"contents":[{{"uri":"{uri}","mimeType":"text/plain","text":"'
        if mode == "id-first":
            _write_big(size, head=f'{{"jsonrpc":"2.0","id":{request_id},"result":' + contents, tail='"}]}}')
        elif mode == "id-last":
            _write_big(size, head='{"jsonrpc":"2.0","result":' + contents, tail=f'"}}]}},"id":{request_id}}}')
        else:
            _write_big(
                size, head='{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"', tail='"}}'
            )

    return answer


def _handle(method: str, params: dict[str, Any]) -> Any:
    if method == "initialize":
        return {
            "protocolVersion": "2025-11-25",
            "capabilities": {"resources": {"subscribe": False, "listChanged": False}},
            "serverInfo": {"name": "huge", "version": "0.1.0"},
        }
    if method == "ping":
        return {}
    if method == "resources/list":
        return {"resources": [{"uri": "huge://small", "name": "small", "mimeType": "text/plain"}]}
    if method == "resources/templates/list":
        return {"resourceTemplates": [{"uriTemplate": "huge://{kind}{?bytes}", "name": "huge"}]}
    if method == "resources/read":
        uri = str(params.get("uri"))
        parts = urllib.parse.urlsplit(uri)
        if uri == "huge://small":
            return {"contents": [{"uri": uri, "mimeType": "text/plain", "text": "small and fine"}]}
        size = int(urllib.parse.parse_qs(parts.query).get("bytes", ["0"])[0])
        modes = {"big": "id-first", "big-id-last": "id-last", "no-id": "no-id"}
        if parts.netloc in modes:
            return _big(uri, size, modes[parts.netloc])
        raise RpcError(-32002, f"huge: unknown resource {uri!r}")
    raise RpcError(-32601, f"Method not found: {method}")


if __name__ == "__main__":
    serve(_handle)
