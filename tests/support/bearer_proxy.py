"""An HTTP reverse proxy (ASGI) that adds ``Authorization: Bearer TOKEN`` to every request.

The conformance suite cannot send headers, and the switchboard answers 401 without
a bearer token; this sits in between. Everything else passes through unchanged,
the ``Host`` and ``Origin`` headers included unless they name the proxy itself (then they
name the upstream, as a reverse proxy's would: the server accepts only its own address and port), so
DNS-rebinding protection is still the server's to enforce, and responses are streamed (SSE works). A client that goes away
ends the upstream request too.
"""

from __future__ import annotations

import contextlib
from typing import Any

import anyio
import httpx2

_HOP_BY_HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer", b"upgrade"}


class BearerProxy:
    def __init__(self, upstream: str, token: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.token = token
        self.client = httpx2.AsyncClient(timeout=httpx2.Timeout(30.0, read=None))

    def _host(self, value: bytes, scope: dict[str, Any], *, origin: bool) -> bytes:
        """A Host (or Origin) naming this proxy names the upstream, as a reverse proxy rewrites it;
        any other, a foreign one included, goes through as it came."""
        port = scope.get("server", (None, None))[1]
        if port is not None and value.rsplit(b":", 1)[-1] == str(port).encode():
            upstream = self.upstream.split("//", 1)[1].encode()
            return b"http://" + upstream if origin else upstream
        return value

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await self.client.aclose()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        body = b""
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
        headers = [
            (
                k,
                self._host(v, scope, origin=k.lower() == b"origin")
                if k.lower() in (b"host", b"origin")
                else v,
            )
            for k, v in scope["headers"]
            if k.lower() not in (b"authorization", *_HOP_BY_HOP)
        ]
        headers.append((b"authorization", f"Bearer {self.token}".encode()))
        query = scope.get("query_string", b"").decode("latin-1")
        url = self.upstream + scope["path"] + (f"?{query}" if query else "")
        request = self.client.build_request(scope["method"], url, headers=headers, content=body)
        response = await self.client.send(request, stream=True)
        try:
            async with anyio.create_task_group() as tg:

                async def on_disconnect() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    tg.cancel_scope.cancel()

                tg.start_soon(on_disconnect)
                await send(
                    {
                        "type": "http.response.start",
                        "status": response.status_code,
                        "headers": [(k, v) for k, v in response.headers.raw if k.lower() not in _HOP_BY_HOP],
                    }
                )
                async for chunk in response.aiter_raw():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                tg.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await response.aclose()
