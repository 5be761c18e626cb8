"""MCP tools as keyword-argument functions, and the read-only catalog a filter may call.

Model-written code calls tools with keyword arguments, e.g. ``await memo_get(key="a")``.
Bad calls (positional arguments, missing keywords) raise :class:`TypeError` naming the
accepted call, so the model can fix its next attempt. A tool that answers ``isError`` raises
:class:`ToolCallError`.
"""

from __future__ import annotations

import json
import keyword
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

import anyio

from asyncai_watch.core.echo import clip, quoted
from asyncai_watch.errors import WatchError
from asyncai_watch.mcp.source import ResourceSource, ToolInfo

__all__ = [
    "AsyncFn",
    "ReadOnlyCatalog",
    "ToolCallError",
    "call_tool",
    "list_tools",
    "python_name",
    "tool_functions",
    "tool_names",
]

AsyncFn = Callable[..., Awaitable[Any]]


class ToolCallError(WatchError):
    """An MCP tool answered with ``isError: true``; the message is the tool's text."""


_RESERVED_NAMES: Final = frozenset({"print", "printed"})  # the sandbox's own print machinery


def python_name(text: str) -> str:
    """``text`` as a name the sandbox accepts: ASCII ``[A-Za-z][A-Za-z0-9_]*``, not a keyword.

    Other characters become ``_``; a name that does not start with a letter gets a ``t_``
    prefix (``3d-render`` -> ``t_3d_render``): a leading underscore would be refused.
    """
    name = re.sub(r"[^A-Za-z0-9_]", "_", text)
    if not name[:1].isalpha():
        name = "t_" + name
    if keyword.iskeyword(name) or name in _RESERVED_NAMES:
        name += "_"
    return name


async def list_tools(
    sources: Sequence[ResourceSource], *, on_error: Callable[[ResourceSource, Exception], None] | None = None
) -> list[tuple[ResourceSource, ToolInfo]]:
    """Every server's tools, in server order, listed concurrently.

    Without ``on_error`` a server whose tools cannot be listed fails the call; with it, that
    server is reported to ``on_error`` and offers no tools.
    """
    found: list[list[ToolInfo]] = [[] for _ in sources]
    errors: list[Exception] = []

    async def one(i: int, source: ResourceSource) -> None:
        try:
            found[i] = await source.list_tools()
        except Exception as exc:
            if on_error is None:
                errors.append(exc)  # raised below, unwrapped (not as an exception group)
            else:
                on_error(source, exc)

    async with anyio.create_task_group() as tg:
        for i, source in enumerate(sources):
            tg.start_soon(one, i, source)
    if errors:
        raise errors[0]
    return [(source, t) for source, tools in zip(sources, found, strict=True) for t in tools]


def tool_names(
    found: Sequence[tuple[ResourceSource, ToolInfo]],
) -> dict[str, tuple[ResourceSource, ToolInfo]]:
    """The code-mode function name of each tool: the tool's name as an identifier, or
    ``<server>_<tool>`` for every tool whose name more than one server offers."""
    counts: dict[str, int] = {}
    for _, t in found:
        counts[python_name(t.name)] = counts.get(python_name(t.name), 0) + 1
    out: dict[str, tuple[ResourceSource, ToolInfo]] = {}
    for source, tool in found:
        base = python_name(tool.name)
        out[python_name(f"{source.name}_{tool.name}") if counts[base] > 1 else base] = (source, tool)
    return out


async def tool_functions(sources: Sequence[ResourceSource], *, read_only: bool = False) -> dict[str, AsyncFn]:
    """Every MCP tool as an async keyword-argument function, named by the tool's name.

    When two servers offer the same tool name, both are prefixed with their
    server name (``memo_memo_get`` and ``other_memo_get``). Names that are not
    Python identifiers are made so (``-``/``.`` become ``_``). A tool error
    raises :class:`ToolCallError`; a result is the structured content, else the
    text parsed as JSON, else the text. With ``read_only`` only tools annotated
    ``readOnlyHint: true`` are included.
    """
    named = tool_names(await list_tools(sources))
    return {
        name: _tool_function(source, tool, name)
        for name, (source, tool) in named.items()
        if tool.read_only or not read_only
    }


async def call_tool(source: ResourceSource, tool: ToolInfo, arguments: Mapping[str, Any]) -> Any:
    """Call ``tool``: structured content, else the text parsed as JSON, else the text."""
    result = await source.call_tool(tool.name, arguments)
    if result.is_error:
        raise ToolCallError(f"tool {tool.name!r} (server {source.name!r}) failed: {clip(result.text, 1000)}")
    if result.structured is not None:
        return result.structured
    try:
        return json.loads(result.text)
    except ValueError:
        return result.text


def _tool_function(source: ResourceSource, tool: ToolInfo, fn_name: str) -> AsyncFn:
    props = tool.input_schema.get("properties") if isinstance(tool.input_schema, Mapping) else None
    params = sorted(props) if isinstance(props, Mapping) else []
    required_raw = tool.input_schema.get("required", []) if isinstance(tool.input_schema, Mapping) else []
    required = [r for r in required_raw if isinstance(r, str)]
    call = f"await {fn_name}({', '.join(f'{p}=...' for p in params)})"

    async def fn(*args: Any, **kwargs: Any) -> Any:
        if args:
            raise TypeError(
                f"{fn_name}() takes keyword arguments only ({', '.join(p + '=' for p in params) or 'none'}), "
                f"got {len(args)} positional; call it as {call}"
            )
        missing = [r for r in required if r not in kwargs]
        if missing:
            raise TypeError(
                f"{fn_name}() is missing {', '.join(m + '=' for m in missing)}; call it as {call}"
            )
        return await call_tool(source, tool, kwargs)

    fn.__name__ = fn.__qualname__ = fn_name
    fn.__doc__ = f"{call}\n\n{tool.description}".strip()
    return fn


class ReadOnlyCatalog:
    """What a filter may call (the parent enforces it; the filter's worker only forwards names).

    Reads (``read_resource``, ``list_resources``) and MCP tools annotated
    ``readOnlyHint: true``. Mutating tools and the watch built-ins are in :attr:`denied`: a
    filter that calls one is refused at ``watch_start``, before any event.
    """

    _DENIED_BUILTINS: Final = ("watch_start", "watch_stop", "watch_list")
    _BUILTINS: Final = frozenset({"read_resource", "list_resources", "event", *_DENIED_BUILTINS})

    def __init__(
        self,
        tools: Mapping[str, tuple[ResourceSource, ToolInfo]],
        *,
        read_resource: Callable[[str], Awaitable[Any]],
        list_resources: Callable[[], Awaitable[Any]],
    ) -> None:
        self._read_resource = read_resource
        self._list_resources = list_resources
        # A tool named like a built-in (or `event`) would silently shadow it: leave it out.
        self._tools = {name: found for name, found in tools.items() if name not in self._BUILTINS}
        self.denied: dict[str, str] = {
            name: "filters cannot start, stop or list watches" for name in self._DENIED_BUILTINS
        } | {
            name: f"tool {name!r} (server {source.name!r}) is not read-only (no readOnlyHint: true)"
            for name, (source, tool) in self._tools.items()
            if not tool.read_only
        }
        """What a filter may not call, and why: a filter calling one is refused at its start
        (``refuse_denied_calls``), so these are not among :attr:`names`."""
        self.names = frozenset({"read_resource", "list_resources", *self._tools}) - self.denied.keys()
        """What a filter may call (and a NameError's hint lists)."""

    async def call(self, name: str, kwargs: dict[str, Any]) -> Any:
        if name == "read_resource":
            if set(kwargs) != {"uri"} or not isinstance(kwargs["uri"], str):
                raise TypeError(
                    'read_resource takes one argument, uri (a string): read_resource(uri="memo://notes")'
                )
            return await self._read_resource(kwargs["uri"])
        if name == "list_resources":
            if kwargs:
                raise TypeError("list_resources takes no arguments")
            return await self._list_resources()
        if name in self._DENIED_BUILTINS:
            raise PermissionError(
                f"a filter cannot call {name}(): filters cannot start, stop or list watches"
            )
        found = self._tools.get(name)
        if found is None:
            raise PermissionError(f"{quoted(name)} is not in the filter's catalog")
        source, tool = found
        if not tool.read_only:
            raise PermissionError(
                f"tool {tool.name!r} (server {source.name!r}) is not read-only (no readOnlyHint: true); "
                "a filter may only read: read_resource, list_resources and read-only tools"
            )
        return await call_tool(source, tool, kwargs)
