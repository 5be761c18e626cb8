"""The watch built-ins as typed async functions, the shape every framework's tool wrapper takes.

Each framework builds its tool schema from a signature and a docstring (PydanticAI's
``FunctionToolset``, the Agents SDK's ``function_tool``, LangChain's ``StructuredTool``), so each
built-in is made a real typed function here, from the one table of built-in tools
(:mod:`asyncai_watch.core.tools`): its ``__signature__`` and annotations from the parameters'
JSON types, its Google-style docstring from the description and the parameters' descriptions.
Each framework then derives the table's own schema back (``tests/test_tool_table.py`` checks
all three). Each function calls the code-mode built-in (:func:`asyncai_watch.codemode.builtins`),
so the argument checks, the manager's sandboxed ``on_event`` filter and the design's dict shapes
(:mod:`asyncai_watch.shapes`) are the same as in code mode. Errors the model can act on
(:data:`TOOL_ERRORS`) are turned into each framework's tool error by its module, with
:func:`tool_error_text` as the message.
"""

from __future__ import annotations

import functools
import inspect
import json
import operator
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from asyncai_watch.codemode import WatchApi, builtins
from asyncai_watch.core.tools import WATCH_TOOLS, ToolSpec
from asyncai_watch.errors import WatchError, describe
from asyncai_watch.runtime.tools import AsyncFn

__all__ = [
    "TOOL_ERRORS",
    "docstring",
    "result_text",
    "signature",
    "structured_result",
    "tool_error_text",
    "typed_function",
    "watch_functions",
]

TOOL_ERRORS: Final = (WatchError, TypeError)
"""What a tool reports to the model as a failed call (a bad URI, a duplicate name, a bad filter,
a bad argument); anything else is a bug or an outage and propagates as the framework decides."""

_PY_TYPES: Final[Mapping[str, Any]] = {"string": str, "integer": int, "boolean": bool, "null": type(None)}


def tool_error_text(exc: BaseException) -> str:
    """The message the model sees for a failed call: ``Type: message``, the library's wording."""
    return describe(exc)


def structured_result(spec: ToolSpec, arguments: Mapping[str, Any], result: Any) -> dict[str, Any]:
    """``result`` as MCP structured content (an object, per :attr:`ToolSpec.structured_schema`):
    ``{"resources": [...]}`` for ``list_resources``, ``{"uri", "value"}`` for ``read_resource``."""
    if spec.wrap is None:
        return dict(result)
    return {**{name: arguments.get(name) for name in spec.echo}, spec.wrap: result}


def result_text(spec: ToolSpec, arguments: Mapping[str, Any], result: Any) -> str:
    """The JSON text beside the structured content, as ``serve`` answers it."""
    value = structured_result(spec, arguments, result) if spec.text_is_structured else result
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _result_type(schema: Mapping[str, Any]) -> Any:
    kind = schema.get("type")
    if kind == "array":
        return list[_result_type(schema.get("items", {}))]  # type: ignore[misc]
    if kind == "object":
        return dict[str, Any]
    return _PY_TYPES.get(kind, Any) if isinstance(kind, str) else Any


def signature(spec: ToolSpec) -> inspect.Signature:
    """``(name: str, uri: str, on_event: str | None = None) -> dict[str, Any]`` for ``watch_start``."""
    params = [
        inspect.Parameter(
            p.name,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            annotation=functools.reduce(operator.or_, [_PY_TYPES[t] for t in p.types]),
            default=inspect.Parameter.empty if p.required else p.default,
        )
        for p in spec.params
    ]
    return inspect.Signature(params, return_annotation=_result_type(spec.result))


def docstring(spec: ToolSpec) -> str:
    """The description, what it returns, and an ``Args:`` section (Google style, which all three read)."""
    doc = spec.full_description()
    if spec.params:
        doc += "\n\nArgs:\n" + "\n".join(f"    {p.name}: {p.description}" for p in spec.params)
    return doc


def typed_function(spec: ToolSpec, call: AsyncFn) -> Callable[..., Awaitable[Any]]:
    """``spec`` as a typed async function that passes its arguments, by keyword, to ``call``."""
    sig = signature(spec)

    async def tool(*args: Any, **kwargs: Any) -> Any:
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        return await call(**bound.arguments)

    tool.__name__ = tool.__qualname__ = spec.name
    tool.__doc__ = docstring(spec)
    tool.__annotations__ = {
        **{name: p.annotation for name, p in sig.parameters.items()},
        "return": sig.return_annotation,
    }
    tool.__signature__ = sig  # type: ignore[attr-defined]  # what inspect.signature() answers
    return tool


def watch_functions(manager: WatchApi) -> list[Callable[..., Awaitable[Any]]]:
    """``list_resources``, ``read_resource``, ``watch_start``, ``watch_stop``, ``watch_list`` over
    ``manager``, as typed async functions with docstrings a framework turns into tool schemas."""
    fns = builtins(manager)
    return [typed_function(spec, fns[spec.name]) for spec in WATCH_TOOLS]
