"""asyncai_watch.server: helpers for writing a watchable MCP server.

- :class:`SubscriptionRegistry` serves subscriptions to clients of both MCP eras, from one
  change source: ``subscriptions/listen`` (2026-07-28; one listen may hold 100,000 URIs) and
  ``resources/subscribe`` / ``resources/unsubscribe`` (2025-11-25 and before). A change costs
  O(listeners of that URI). ``docs/server-contract.md`` says what a watchable server must do;
  this does the subscription half of it.
- :class:`SubscriptionIndex` is its pure core: who listens to which URI.

The reference servers (``asyncai_servers``) are built on these names only.
"""

from __future__ import annotations

from asyncai_watch.server.index import LIST_KINDS, ListKind, SubscriptionIndex
from asyncai_watch.server.subscriptions import (
    DEFAULT_MAX_BACKLOG,
    DEFAULT_MAX_LISTENS,
    DEFAULT_MAX_PUSHES,
    DEFAULT_MAX_URIS,
    Listener,
    ListenStream,
    SubscriptionRegistry,
    SubscriptionStats,
)

__all__ = [
    "DEFAULT_MAX_BACKLOG",
    "DEFAULT_MAX_LISTENS",
    "DEFAULT_MAX_PUSHES",
    "DEFAULT_MAX_URIS",
    "LIST_KINDS",
    "ListKind",
    "ListenStream",
    "Listener",
    "SubscriptionIndex",
    "SubscriptionRegistry",
    "SubscriptionStats",
]
