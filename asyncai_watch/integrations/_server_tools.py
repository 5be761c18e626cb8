"""The connected servers' own tools, offered to the agent over the watch's own connections.

A framework's own MCP toolset opens a second connection to each server; for a stdio server
that is a second, private process, so what the agent writes through it never reaches the
watch (the watch listens to the first process). Every integration can instead offer each
server's tools through the :class:`~asyncai_watch.WatchManager`'s sources
(:meth:`ResourceSource.call_tool <asyncai_watch.mcp.source.ResourceSource.call_tool>`): one
connection per server, so the agent hears its own changes.

Names: a tool keeps its name; a name that two servers offer, or that is a watch built-in's, is
``<server>_<tool>`` (the code-mode rule, :func:`asyncai_watch.runtime.tools.tool_names`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from asyncai_watch.core.tools import WATCH_TOOLS
from asyncai_watch.mcp.source import ResourceSource, ToolInfo, ToolResult
from asyncai_watch.runtime.tools import call_tool, list_tools, python_name, tool_names

__all__ = ["ServerTool", "server_tools"]

_BUILTIN_NAMES = frozenset(t.name for t in WATCH_TOOLS)


@attrs.frozen
class ServerTool:
    """One server's tool, called over the watch's connection to that server."""

    name: str
    """The name the agent calls it by."""
    source: ResourceSource
    info: ToolInfo

    @property
    def description(self) -> str:
        return self.info.description or f"The {self.info.name} tool of server {self.source.name}."

    @property
    def input_schema(self) -> dict[str, Any]:
        schema = dict(self.info.input_schema) if isinstance(self.info.input_schema, Mapping) else {}
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        return schema

    async def call(self, arguments: Mapping[str, Any]) -> ToolResult:
        """The result as the server sent it (an error result included)."""
        return await self.source.call_tool(self.info.name, arguments)

    async def value(self, **arguments: Any) -> Any:
        """The structured content, else the text parsed as JSON, else the text; an error result
        raises :class:`~asyncai_watch.runtime.tools.ToolCallError` (a ``WatchError``)."""
        return await call_tool(self.source, self.info, arguments)


async def server_tools(sources: Sequence[ResourceSource]) -> list[ServerTool]:
    """Every tool of ``sources``, listed now (a server that cannot list its tools fails the call)."""
    found = tool_names(await list_tools(sources))
    out: list[ServerTool] = []
    for name, (source, info) in found.items():
        if name in _BUILTIN_NAMES:  # the watch's own tool keeps the plain name
            name = python_name(f"{source.name}_{info.name}")
        out.append(ServerTool(name, source, info))
    return out
