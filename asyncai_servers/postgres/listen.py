"""Where a listen stream subscribes: the only code that knows about ``subscriptions/listen``.

The SDK's ``ListenHandler`` acknowledges any URI and keeps its listeners private, so
:class:`ListenTracker` wraps it: before the acknowledgment it refuses a URI the server does not
serve (``-32602`` naming what is served) and holds the URI's source (``acquire``) for as long as
the stream is open (``release`` in a ``finally``). The server publishes ``ResourceUpdated`` on the
bus for each URI string a source's listeners used; the SDK forwards it to those streams.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.subscriptions import ListenHandler

__all__ = ["ListenTracker"]


class ListenTracker:
    def __init__(
        self,
        inner: ListenHandler,
        *,
        check: Callable[[str], object],
        acquire: Callable[[str], None],
        release: Callable[[str], None],
    ) -> None:
        """``check(uri)`` raises the ``MCPError`` a listen on ``uri`` is refused with."""
        self.inner = inner
        self._check = check
        self._acquire = acquire
        self._release = release

    def close(self) -> None:
        """End every open listen stream gracefully (an HTTP shutdown would otherwise wait on them)."""
        self.inner.close()

    async def __call__(
        self, ctx: ServerRequestContext[Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        uris = list(dict.fromkeys(params.notifications.resource_subscriptions or ()))
        for uri in uris:
            self._check(uri)  # all or nothing: a bad URI refuses the whole listen
        held: list[str] = []
        try:
            for uri in uris:
                self._acquire(uri)
                held.append(uri)
            return await self.inner(ctx, params)
        finally:
            for uri in held:
                self._release(uri)
