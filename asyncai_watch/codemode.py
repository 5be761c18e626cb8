"""The code-mode built-ins (docs/watch-manager.md) and the MCP tools as functions.

Model-written code calls these with keyword arguments, e.g.
``await watch_start(name="notes", uri="memo://notes")``. Bad calls (positional
arguments, unknown or missing keywords, wrong types) raise :class:`TypeError`
naming the accepted call, so the model can fix its next attempt.
"""

from __future__ import annotations

import json
import keyword
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from asyncai_watch.errors import WatchError
from asyncai_watch.source import ResourceSource, ToolInfo

if TYPE_CHECKING:
    from asyncai_watch.manager import WatchManager

__all__ = [
    "ToolCallError",
    "builtins",
    "call_tool",
    "list_tools",
    "python_name",
    "tool_functions",
    "tool_names",
]

AsyncFn = Callable[..., Awaitable[Any]]

_SIGNATURES: Final = {
    "list_resources": ((), ()),
    "read_resource": (("uri",), ()),
    "watch_start": (("name", "uri"), ("on_event",)),
    "watch_stop": (("name",), ()),
    "watch_list": ((), ()),
}
_EXAMPLES: Final = {
    "list_resources": "await list_resources()",
    "read_resource": 'await read_resource(uri="memo://notes")',
    "watch_start": 'await watch_start(name="notes", uri="memo://notes", on_event=None)',
    "watch_stop": 'await watch_stop(name="notes")',
    "watch_list": "await watch_list()",
}


class ToolCallError(WatchError):
    """An MCP tool answered with ``isError: true``; the message is the tool's text."""


def _check_call(fn: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
    required, optional = _SIGNATURES[fn]
    accepted = (*required, *optional)
    hint = f"call it as {_EXAMPLES[fn]}"
    if args:
        raise TypeError(
            f"{fn}() takes keyword arguments only ({', '.join(a + '=' for a in accepted) or 'none'}), "
            f"got {len(args)} positional; {hint}"
        )
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        raise TypeError(
            f"{fn}() got unknown argument(s) {', '.join(unknown)}; it accepts "
            f"{', '.join(accepted) or 'no arguments'}; {hint}"
        )
    missing = [a for a in required if a not in kwargs]
    if missing:
        raise TypeError(f"{fn}() is missing {', '.join(a + '=' for a in missing)}; {hint}")
    for a in ("name", "uri"):
        if a in kwargs and not isinstance(kwargs[a], str):
            raise TypeError(
                f"{fn}(): {a} must be a string, got {type(kwargs[a]).__name__} {kwargs[a]!r}; {hint}"
            )


def builtins(manager: WatchManager) -> dict[str, AsyncFn]:
    """``list_resources``, ``read_resource``, ``watch_start``, ``watch_stop``, ``watch_list``."""

    async def list_resources(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        _check_call("list_resources", args, kwargs)
        return await manager.list_resources()

    async def read_resource(*args: Any, **kwargs: Any) -> Any:
        _check_call("read_resource", args, kwargs)
        return await manager.read_resource(kwargs["uri"])

    async def watch_start(*args: Any, **kwargs: Any) -> dict[str, Any]:
        _check_call("watch_start", args, kwargs)
        return await manager.watch_start(kwargs["name"], kwargs["uri"], kwargs.get("on_event"))

    async def watch_stop(*args: Any, **kwargs: Any) -> bool:
        _check_call("watch_stop", args, kwargs)
        return await manager.watch_stop(kwargs["name"])

    async def watch_list(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        _check_call("watch_list", args, kwargs)
        return manager.watch_list()

    fns: dict[str, AsyncFn] = {
        "list_resources": list_resources,
        "read_resource": read_resource,
        "watch_start": watch_start,
        "watch_stop": watch_stop,
        "watch_list": watch_list,
    }
    for name, fn in fns.items():
        fn.__name__ = fn.__qualname__ = name
        fn.__doc__ = f"{_EXAMPLES[name]}"
    return fns


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


async def list_tools(sources: Sequence[ResourceSource]) -> list[tuple[ResourceSource, ToolInfo]]:
    """Every server's tools, in server order."""
    found: list[tuple[ResourceSource, ToolInfo]] = []
    for source in sources:
        found.extend((source, t) for t in await source.list_tools())
    return found


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
        raise ToolCallError(f"tool {tool.name!r} (server {source.name!r}) failed: {result.text}")
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
