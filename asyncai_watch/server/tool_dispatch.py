"""``tools/list`` and ``tools/call`` for a low-level ``mcp.server.Server`` whose tools are known.

::

    server = Server("notes", **tool_handlers("notes", TOOLS, {"note_set": note_set}), ...)

One table, the tools and the function behind each, gives the server its three tool arguments:
``on_list_tools`` answers the tools, ``on_call_tool`` runs the named function with the call's
arguments (``{}`` when the call has none) and answers a name it lacks with -32602 naming the
tools it has (:func:`~asyncai_watch.server.errors.unknown_tool`), and ``get_tool_input_schema``
answers from the tools' schemas (:mod:`.schemas`). A server with no tools passes none: it still
advertises the tools capability with an empty list, so a client that lists every server's
tools needs no special case, and every call is answered as the spec says.

What a function does with its arguments (validating them, mapping its own errors to an
``isError`` result) stays the server's: wrap the functions before handing them in.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext

from asyncai_watch.server.errors import unknown_tool
from asyncai_watch.server.schemas import input_schemas

__all__ = ["ToolCall", "tool_handlers"]

ToolCall = Callable[[ServerRequestContext[Any, Any], Mapping[str, Any]], Awaitable[types.CallToolResult]]
"""One tool's function: the request's context and the call's arguments, to the tool's result."""


def tool_handlers(server: str, tools: Sequence[types.Tool], calls: Mapping[str, ToolCall]) -> dict[str, Any]:
    """The ``mcp.server.Server`` keyword arguments for ``tools``, each run by ``calls[tool.name]``:
    ``Server(..., **tool_handlers(name, tools, calls))``. ``server`` names the server in errors.

    Every tool listed needs a function and every function a listed tool: a ``ValueError`` says
    which do not match, so a tool cannot be listed and then refused, or callable and unlisted.
    """
    listed = [tool.name for tool in tools]
    if sorted(listed) != sorted(calls) or len(set(listed)) != len(listed):
        raise ValueError(
            f"tool_handlers({server!r}): the tools listed ({', '.join(listed) or 'none'}) and the "
            f"functions given ({', '.join(calls) or 'none'}) must name the same tools, each once"
        )
    answer = types.ListToolsResult(tools=list(tools))
    table = dict(calls)  # a copy: the caller's mapping changing later changes nothing here

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return answer

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        call = table.get(params.name)
        if call is None:
            raise unknown_tool(server, params.name, table)
        return await call(ctx, params.arguments or {})

    return {
        "on_list_tools": list_tools,
        "on_call_tool": call_tool,
        "get_tool_input_schema": input_schemas(tools),
    }
