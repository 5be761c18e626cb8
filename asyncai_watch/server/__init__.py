"""Helpers for writing a watchable MCP server (docs/server-contract.md says what makes one).

The one-line way, for an ``MCPServer`` (the ``mcp`` SDK 2.3) or a fastmcp 4.x server:

- :mod:`.kit`: ``watchable(server, changes={"tool": ["uri", "uri://{arg}"]})`` serves both
  eras' subscriptions and notifies every listener of what a tool changes when it returns;
  ``notify(uri)`` for changes made outside tools (docs/existing-servers.md).

The reference servers (``asyncai_servers``) and the Channels bridge (``asyncai-watch serve``)
are built on the rest; so can any server written on the ``mcp`` SDK's low-level ``Server``:

- :mod:`.subscriptions`: ``SubscriptionRegistry``, subscriptions of both MCP eras from one
  change source: ``subscriptions/listen`` (2026-07-28; one listen may hold 100,000 URIs) and
  ``resources/subscribe`` / ``resources/unsubscribe`` (2025-11-25 and before), a change costing
  O(listeners of that URI); :mod:`.index`: ``SubscriptionIndex``, its pure core (who listens to
  which URI);
- :mod:`.stdio`: ``stdio_server()``, MCP over stdin/stdout on the event loop (requests read
  linearly, bad lines answered with their JSON-RPC error, SIGTERM as a closed stdin);
- :mod:`.http`: ``serve_http()``, Streamable HTTP on a socket bound first, announced by a
  ``READY <url>`` line; ``running_http_server()`` runs such a server command and yields its URL;
- :mod:`.resumable`: ``streamable_http_app()``, the SDK's Streamable HTTP app with resumable
  SSE streams (a per-session event store) for 2025-era clients, and the session limits;
- :mod:`.policy`: ``HttpPolicy``, the one HTTP security policy (authentication, Host/Origin,
  limits), ``add_http_arguments()`` / ``http_policy_from_args()`` for a server's CLI; :mod:`.guard`
  enforces it in front of the app (docs/http-security.md);
- :mod:`.eventlog`: ``EventRing``, the bounded event log behind an event-log resource, and
  ``read_after`` for a reader's position;
- :mod:`.errors`: the protocol errors for an unknown tool or resource;
- :mod:`.schemas`: ``input_schemas()``, the tool input-schema lookup the SDK's ``Server`` takes;
- :mod:`.tool_dispatch`: ``tool_handlers()``, ``tools/list`` / ``tools/call`` from one table of
  tools and their functions (``Server(..., **tool_handlers(name, tools, calls))``);
- :mod:`.text`: untrusted text made inert for a model (a channel push's content).

Each name below is imported from its module on first use, so importing one helper does not
load the others (the HTTP stack, for a stdio-only server).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from asyncai_watch.server.errors import (
        RESOURCE_NOT_FOUND,
        UNKNOWN_TOOL,
        resource_error,
        resource_not_found,
        unknown_tool,
    )
    from asyncai_watch.server.eventlog import AFTER_META_KEY, EventRing, read_after
    from asyncai_watch.server.http import (
        ServerExitedError,
        bind_error,
        parse_host_port,
        running_http_server,
        serve_http,
    )
    from asyncai_watch.server.index import LIST_KINDS, ListKind, SubscriptionIndex
    from asyncai_watch.server.kit import NOTIFIED_META_KEY, Watchable, watchable
    from asyncai_watch.server.policy import (
        HttpLimits,
        HttpPolicy,
        add_http_arguments,
        check_bind,
        http_policy_from_args,
    )
    from asyncai_watch.server.resumable import streamable_http_app
    from asyncai_watch.server.schemas import input_schemas
    from asyncai_watch.server.stdio import stdio_server
    from asyncai_watch.server.subscriptions import (
        DEFAULT_MAX_BACKLOG,
        DEFAULT_MAX_LISTENS,
        DEFAULT_MAX_PUSHES,
        DEFAULT_MAX_URIS,
        Listener,
        ListenStream,
        SubscriptionRegistry,
        SubscriptionStats,
        honored_filter,
    )
    from asyncai_watch.server.tool_dispatch import ToolCall, tool_handlers

__all__ = [
    "AFTER_META_KEY",
    "DEFAULT_MAX_BACKLOG",
    "DEFAULT_MAX_LISTENS",
    "DEFAULT_MAX_PUSHES",
    "DEFAULT_MAX_URIS",
    "LIST_KINDS",
    "NOTIFIED_META_KEY",
    "RESOURCE_NOT_FOUND",
    "UNKNOWN_TOOL",
    "EventRing",
    "HttpLimits",
    "HttpPolicy",
    "ListKind",
    "ListenStream",
    "Listener",
    "ServerExitedError",
    "SubscriptionIndex",
    "SubscriptionRegistry",
    "SubscriptionStats",
    "ToolCall",
    "Watchable",
    "add_http_arguments",
    "bind_error",
    "check_bind",
    "honored_filter",
    "http_policy_from_args",
    "input_schemas",
    "parse_host_port",
    "read_after",
    "resource_error",
    "resource_not_found",
    "running_http_server",
    "serve_http",
    "stdio_server",
    "streamable_http_app",
    "tool_handlers",
    "unknown_tool",
    "watchable",
]

_HOME: Final[dict[str, str]] = {
    "LIST_KINDS": "index",
    "ListKind": "index",
    "SubscriptionIndex": "index",
    "DEFAULT_MAX_BACKLOG": "subscriptions",
    "DEFAULT_MAX_LISTENS": "subscriptions",
    "DEFAULT_MAX_PUSHES": "subscriptions",
    "DEFAULT_MAX_URIS": "subscriptions",
    "Listener": "subscriptions",
    "ListenStream": "subscriptions",
    "SubscriptionRegistry": "subscriptions",
    "SubscriptionStats": "subscriptions",
    "honored_filter": "subscriptions",
    "RESOURCE_NOT_FOUND": "errors",
    "UNKNOWN_TOOL": "errors",
    "resource_error": "errors",
    "resource_not_found": "errors",
    "unknown_tool": "errors",
    "AFTER_META_KEY": "eventlog",
    "EventRing": "eventlog",
    "read_after": "eventlog",
    "HttpLimits": "policy",
    "HttpPolicy": "policy",
    "add_http_arguments": "policy",
    "check_bind": "policy",
    "http_policy_from_args": "policy",
    "ServerExitedError": "http",
    "bind_error": "http",
    "parse_host_port": "http",
    "running_http_server": "http",
    "serve_http": "http",
    "streamable_http_app": "resumable",
    "input_schemas": "schemas",
    "ToolCall": "tool_dispatch",
    "tool_handlers": "tool_dispatch",
    "stdio_server": "stdio",
    "NOTIFIED_META_KEY": "kit",
    "Watchable": "kit",
    "watchable": "kit",
}


def __getattr__(name: str) -> object:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
