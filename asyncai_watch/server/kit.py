"""One line to make an ``MCPServer`` or a fastmcp server watchable, by clients of both MCP eras.

::

    mcp = MCPServer("notes")                                    # or fastmcp.FastMCP("notes")
    watch = watchable(mcp, changes={"note_set": ["notes://index", "notes://{name}"]})

That line serves ``subscriptions/listen`` (MCP 2026-07-28) and ``resources/subscribe`` /
``resources/unsubscribe`` (2025-11-25 and before) from one
:class:`~asyncai_watch.server.subscriptions.SubscriptionRegistry` (so the server advertises
``resources.subscribe: true`` in both eras), and notifies every listener of the resources a tool
changes when the tool returns: ``changes`` maps a tool's name to the URIs it changes, each a URI or
an RFC 6570 template filled from the call's arguments (``notes://{name}`` with ``name="milk"`` is
``notes://milk``). A tool may also declare them where it is defined::

    @watch.changes("notes://index", "notes://{name}")
    @mcp.tool()
    def note_set(name: str, text: str) -> str: ...

A change made outside tools (a file edited, a row written by another program) is announced with
``await watch.notify(uri)`` (or ``watch.notify_nowait(uri)`` from synchronous code on the event
loop). ``ctx.notify_resource_updated(uri)`` in an ``MCPServer`` tool reaches the same listeners.

Notifications are level triggers ("re-read it"): a tool that returns an error notifies too (it
may have changed something before failing), and a re-read that finds nothing changed makes no
notice. A template whose variables the arguments lack is skipped for that call.

The hooks are each framework's own: a ``ServerMiddleware`` on ``MCPServer.middleware``, a
``fastmcp.server.middleware.Middleware`` through ``FastMCP.add_middleware``; the subscription
handlers go on the low-level ``mcp.server.Server`` both are built on, and the registry's
:meth:`~asyncai_watch.server.subscriptions.SubscriptionRegistry.running` joins its lifespan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mcp.server.subscriptions import ResourceUpdated

from asyncai_watch.server._watchable import NOTIFIED_META_KEY, Watchable

__all__ = ["NOTIFIED_META_KEY", "Watchable", "watchable"]


def watchable(server: Any, *, changes: Mapping[str, str | Sequence[str]] | None = None) -> Watchable:
    """Make ``server`` (an ``mcp`` ``MCPServer``, or a fastmcp 4.x ``FastMCP``) watchable: see the
    module docstring. Call it once, before the server runs; the returned :class:`Watchable`
    declares more changes (:meth:`Watchable.changes`) and announces others (:meth:`Watchable.notify`)."""
    from mcp.server.mcpserver import MCPServer

    if isinstance(server, MCPServer):
        kit = Watchable(server.name, changes)
        kit.serve_on(server._lowlevel_server)
        # `ctx.notify_resource_updated(uri)` publishes on the server's bus: forward it to the registry.
        server._subscriptions.subscribe(lambda event: _forward(kit, event))
        server.middleware.append(kit.middleware)
        return kit
    if _is_fastmcp(server):
        from asyncai_watch.server._fastmcp import attach

        kit = Watchable(server.name, changes)
        attach(kit, server)
        return kit
    raise TypeError(
        f"watchable: expected an mcp MCPServer or a fastmcp FastMCP, got {type(server).__name__}; "
        "a low-level mcp.server.Server takes SubscriptionRegistry.handlers() (docs/server-contract.md)"
    )


def _forward(kit: Watchable, event: Any) -> None:
    if isinstance(event, ResourceUpdated):
        kit.notify_nowait(event.uri)
    else:
        kit.registry.publish_nowait(event)


def _is_fastmcp(server: object) -> bool:
    try:
        from fastmcp import FastMCP
    except ImportError:  # fastmcp is optional (the [fastmcp] extra)
        return False
    return isinstance(server, FastMCP)
