"""Watching servers of the 2025 era: ``resources/subscribe`` and the session's notifications.

A server that negotiates MCP 2025-11-25 (or 2025-06-18, 2025-03-26) and advertises
``resources.subscribe`` takes one ``resources/subscribe`` per URI and sends
``notifications/resources/updated`` on the session: on stdio among the other messages, on
Streamable HTTP on the standalone GET stream. Nothing ends one subscription: they all end with
the session. So :class:`Subscriptions` (one per connection) holds the open subscriptions, hands
each ``updated`` to the ones it covers, and ends them all, as lost, when the connection ends or,
over HTTP, when its GET stream does (:class:`GetStreamWatch`): the feed then resubscribes on a
new connection, as for a lost ``subscriptions/listen``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import anyio
import httpx2

from asyncai_watch.core.feed import covering_uris
from asyncai_watch.errors import SubscriptionLostError

__all__ = ["GetStreamWatch", "LegacyUpdates", "Subscriptions"]


class LegacyUpdates:
    """One ``resources/subscribe``: its URI, then each ``updated`` it covers (pending ones
    coalesced), until the session ends."""

    def __init__(self, uri: str, owner: Subscriptions) -> None:
        self.uri = uri
        self.honored: frozenset[str] | None = frozenset((uri,))
        self._owner = owner
        self._pending: dict[str, None] = {}
        self._wake = anyio.Event()

    def signal(self, uri: str) -> None:
        self._pending[uri] = None
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    def __aiter__(self) -> LegacyUpdates:
        return self

    async def __anext__(self) -> str:
        while True:
            if self._pending:
                uri = next(iter(self._pending))
                del self._pending[uri]
                return uri
            if self._owner.lost is not None:
                raise SubscriptionLostError(self._owner.lost)
            await self._wake.wait()
            self._wake = anyio.Event()


class Subscriptions:
    """The legacy subscriptions of one connection (see the module docstring)."""

    def __init__(self) -> None:
        self._by_uri: dict[str, list[LegacyUpdates]] = {}
        self.lost: str | None = None
        """Why the session's subscriptions ended, once they have."""

    def add(self, uri: str) -> LegacyUpdates:
        updates = LegacyUpdates(uri, self)
        self._by_uri.setdefault(uri, []).append(updates)
        return updates

    def remove(self, updates: LegacyUpdates) -> bool:
        """Forget ``updates``; ``True`` when it was the last for its URI (unsubscribe it)."""
        holders = self._by_uri.get(updates.uri, [])
        if updates in holders:
            holders.remove(updates)
        if holders:
            return False
        self._by_uri.pop(updates.uri, None)
        return True

    def updated(self, uri: str) -> None:
        """``notifications/resources/updated`` for ``uri``: to each subscription it covers."""
        for watched in covering_uris(uri, self._by_uri):
            for updates in self._by_uri[watched]:
                updates.signal(uri)

    def end(self, reason: str) -> None:
        """The session is over: every subscription is lost."""
        if self.lost is None:
            self.lost = reason
        for holders in self._by_uri.values():
            for updates in holders:
                updates.wake()


class GetStreamWatch(httpx2.AsyncBaseTransport):
    """An HTTP transport that tells when a standalone GET stream (where a 2025-era server sends
    its notifications) ends: the session's subscriptions may be gone with it, so they are
    treated as lost and made again, rather than silently never hearing another change."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end = on_end

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        stream = response.stream
        if (
            request.method == "GET"
            # Only the stream itself: a redirect (Starlette's Mount answers /mcp with a 307 to
            # /mcp/) is followed by the client, and its empty body is no ended stream.
            and 200 <= response.status_code < 300
            and isinstance(stream, httpx2.AsyncByteStream)
        ):
            response.stream = _Watched(stream, self._on_end)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Watched(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end = on_end

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                yield chunk
        finally:
            self._on_end()

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            self._on_end()
