"""The fastmcp 4.x side of :func:`~asyncai_watch.server.kit.watchable`: fastmcp's own
middleware for tool calls and listings, the registry's handlers on its low-level server, and the
registry's tasks inside its lifespan. Imported only when a ``FastMCP`` is made watchable."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import mcp_types as mt
from fastmcp import FastMCP
from fastmcp.resources.base import Resource
from fastmcp.resources.template import ResourceTemplate
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools.base import ToolResult

from asyncai_watch.server._watchable import NOTIFIED_META_KEY, Watchable

__all__ = ["WatchableMiddleware", "attach"]


class WatchableMiddleware(Middleware):
    """Announces a tool's declared changes when it returns; marks listings with what was notified."""

    def __init__(self, kit: Watchable) -> None:
        self.kit = kit

    async def on_call_tool(
        self,
        context: MiddlewareContext[mt.CallToolRequestParams],
        call_next: CallNext[mt.CallToolRequestParams, ToolResult],
    ) -> ToolResult:
        try:
            return await call_next(context)
        finally:
            await self.kit.tool_returned(context.message.name, context.message.arguments)

    async def on_list_resources(
        self, context: MiddlewareContext[Any], call_next: CallNext[Any, Sequence[Resource]]
    ) -> Sequence[Resource]:
        listed = await call_next(context)
        return [
            r.model_copy(
                update={"meta": {**(r.meta or {}), NOTIFIED_META_KEY: str(r.uri) in self.kit.notified}}
            )
            for r in listed
        ]

    async def on_list_resource_templates(
        self, context: MiddlewareContext[Any], call_next: CallNext[Any, Sequence[ResourceTemplate]]
    ) -> Sequence[ResourceTemplate]:
        listed = await call_next(context)
        return [
            t.model_copy(
                update={"meta": {**(t.meta or {}), NOTIFIED_META_KEY: self.kit.heard(t.uri_template)}}
            )
            for t in listed
        ]


def attach(kit: Watchable, server: FastMCP) -> None:
    kit.add_handlers(server._mcp_server)
    server.add_middleware(WatchableMiddleware(kit))
    # fastmcp enters `_lifespan_manager` for every transport (stdio, HTTP, an app served elsewhere).
    inner: Callable[[], AbstractAsyncContextManager[None]] = server._lifespan_manager

    @asynccontextmanager
    async def lifespan_manager() -> AsyncIterator[None]:
        async with kit.registry.running(), inner():
            yield

    server._lifespan_manager = lifespan_manager  # type: ignore[method-assign]
