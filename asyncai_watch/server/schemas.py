"""``get_tool_input_schema`` for an MCP server whose tools are known (the ``mcp`` SDK's ``Server`` argument).

Without it, the SDK's Streamable HTTP transport (mcp 2.3, ``_streamable_http_modern``) finds the
input schema of every ``tools/call`` it receives (to validate ``Mcp-Param-*`` headers) by running
a whole internal ``tools/list`` dispatch first: a second request's worth of server CPU on every
tool call. A server whose tools are known answers from a dict instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from mcp import types

__all__ = ["input_schemas"]


def input_schemas(tools: Iterable[types.Tool]) -> Callable[[str], Mapping[str, Any] | None]:
    """A tool name's input schema (``None`` for a name not among ``tools``)."""
    return {tool.name: tool.input_schema for tool in tools}.get
