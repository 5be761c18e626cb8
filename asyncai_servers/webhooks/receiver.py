"""The delivery endpoint: ``POST /hooks/SOURCE``, one per configured source (ASGI).

Each request is read up to the body cap (a declared ``Content-Length`` over it is refused before
the body is read; a chunked one as soon as it passes), verified by its source's scheme
(:mod:`.verify`), and handed to ``store`` (which commits it) before the 2xx. A refusal answers
``{"error": message}`` with its status and stores nothing: 401 (signature), 400 (malformed),
404 (no such source), 405 (not POST), 413 (over the cap), 503 (the database failed: the sender
retries). Accepted: ``200 {"stored": true}``, or ``{"stored": false, "duplicate": true}`` for a
retry of a delivery already stored (a 2xx too, so the sender stops retrying).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from asyncai_servers.webhooks.config import SourceSpec
from asyncai_servers.webhooks.verify import Delivery, Refused, verify
from asyncai_watch.server.eventlog import dumps

__all__ = ["DEFAULT_MAX_BODY", "PATH_PREFIX", "Receiver"]

log = logging.getLogger(__name__)

PATH_PREFIX: Final = "/hooks/"
DEFAULT_MAX_BODY: Final = 1 << 20
"""Bytes a delivery's body may have (``--max-body``). GitHub's payloads are capped at 25 MB but a
workflow run's is about 20 kB; Stripe's events are a few kB."""
MAX_HEADERS: Final = 100

Store = Callable[[Delivery], Awaitable[bool]]
"""Stores a verified delivery (committed on return); False when it was already stored."""

Scope = Mapping[str, Any]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]


class Receiver:
    def __init__(
        self,
        sources: Mapping[str, SourceSpec],
        store: Store,
        *,
        max_body: int = DEFAULT_MAX_BODY,
        now: Callable[[], float],
    ) -> None:
        self.sources = sources
        self.store = store
        self.max_body = max_body
        self.now = now
        self.refused = 0
        self.accepted = 0
        self.duplicates = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        try:
            status, body = await self._handle(scope, receive)
        except Refused as exc:
            self.refused += 1
            status, body = exc.status, {"error": exc.message}
        data = dumps(body).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(data)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": data})

    async def _handle(self, scope: Scope, receive: Receive) -> tuple[int, dict[str, Any]]:
        path: str = scope["path"]
        name = path.removeprefix(PATH_PREFIX) if path.startswith(PATH_PREFIX) else None
        spec = self.sources.get(name) if name is not None else None
        if spec is None:
            paths = ", ".join(PATH_PREFIX + s for s in sorted(self.sources))
            raise Refused(404, f"no webhook source at {path!r}; served: {paths}")
        if scope["method"] != "POST":
            raise Refused(405, f"{spec.name}: deliveries are POSTed, not {scope['method']}")
        raw_headers = scope["headers"]
        if len(raw_headers) > MAX_HEADERS:
            raise Refused(400, f"{spec.name}: more than {MAX_HEADERS} headers")
        headers: dict[str, str] = {}
        for key, value in raw_headers:
            headers.setdefault(key.decode("latin-1").lower(), value.decode("latin-1"))
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
            raise Refused(413, self._too_big(spec, f"{int(declared):,} bytes"))
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise Refused(400, f"{spec.name}: the client went away before the body was complete")
            chunk: bytes = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                raise Refused(413, self._too_big(spec, f"over {self.max_body:,} bytes"))
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        delivery = verify(spec, headers, b"".join(chunks), self.now())
        try:
            stored = await self.store(delivery)
        except Exception as exc:  # the sender retries a 5xx: nothing is lost
            log.exception("storing a %s delivery failed", spec.name)
            raise Refused(
                503, f"{spec.name}: the delivery could not be stored ({type(exc).__name__}); retry"
            ) from None
        if not stored:
            self.duplicates += 1
            return 200, {"stored": False, "duplicate": True, "delivery_id": delivery.delivery_id}
        self.accepted += 1
        return 200, {"stored": True, "delivery_id": delivery.delivery_id}

    def _too_big(self, spec: SourceSpec, size: str) -> str:
        return f"{spec.name}: the body is {size}, over the cap of {self.max_body:,} bytes (--max-body)"
