"""``tool_handlers``: one table of tools and functions gives a low-level server its tool arguments."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import mcp_types as types
import pytest
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from asyncai_watch.server.tool_dispatch import tool_handlers

pytestmark = pytest.mark.anyio

ECHO = types.Tool(name="echo", input_schema={"type": "object", "properties": {"x": {"type": "string"}}})
CTX = cast(ServerRequestContext[Any, Any], None)


async def echo(ctx: ServerRequestContext[Any, Any], arguments: Mapping[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=repr(dict(arguments)))])


async def test_lists_the_tools_runs_the_named_one_and_refuses_others_naming_what_it_has() -> None:
    handlers = tool_handlers("demo", [ECHO], {"echo": echo})
    listed = await handlers["on_list_tools"](CTX, None)
    assert [tool.name for tool in listed.tools] == ["echo"]
    assert handlers["get_tool_input_schema"]("echo") == ECHO.input_schema
    assert handlers["get_tool_input_schema"]("nope") is None
    result = await handlers["on_call_tool"](CTX, types.CallToolRequestParams(name="echo"))
    assert result.content[0].text == "{}"  # no arguments: the function gets {}
    result = await handlers["on_call_tool"](
        CTX, types.CallToolRequestParams(name="echo", arguments={"x": "1"})
    )
    assert result.content[0].text == "{'x': '1'}"
    with pytest.raises(MCPError) as refused:
        await handlers["on_call_tool"](CTX, types.CallToolRequestParams(name="nope"))
    assert refused.value.error.code == -32602
    assert refused.value.error.message == "demo: unknown tool 'nope'; its tools are echo"


async def test_a_server_with_no_tools_lists_none_and_refuses_every_call() -> None:
    handlers = tool_handlers("files", (), {})
    assert (await handlers["on_list_tools"](CTX, None)).tools == []
    with pytest.raises(MCPError, match="files: unknown tool 'x'; it offers no tools"):
        await handlers["on_call_tool"](CTX, types.CallToolRequestParams(name="x"))


def test_a_listed_tool_without_a_function_or_a_function_without_a_tool_is_refused_at_once() -> None:
    with pytest.raises(ValueError, match=r"the tools listed \(echo\) and the functions given \(none\)"):
        tool_handlers("demo", [ECHO], {})
    with pytest.raises(ValueError, match=r"the tools listed \(none\) and the functions given \(echo\)"):
        tool_handlers("demo", [], {"echo": echo})
    with pytest.raises(ValueError, match="each once"):
        tool_handlers("demo", [ECHO, ECHO], {"echo": echo})
