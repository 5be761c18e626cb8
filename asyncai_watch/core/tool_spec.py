"""A built-in watch tool described once: its parameters (:class:`Param`) and result schemas,
and the text every surface makes from them (:class:`ToolSpec`, :func:`shape`).

Pure data and text. The table of the built-ins themselves is :mod:`asyncai_watch.core.tools`;
checking a call's arguments against a spec is :mod:`asyncai_watch.core.tool_arguments`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any, Final, Literal

import attrs

from asyncai_watch.core.echo import clip

__all__ = ["DEFAULT_NOTICES_LIMIT", "MAX_NOTICES_LIMIT", "JsonType", "Param", "ToolSpec", "shape"]

JsonType = Literal["string", "integer", "boolean", "null"]

DEFAULT_NOTICES_LIMIT: Final = 100
MAX_NOTICES_LIMIT: Final = 1000


@attrs.frozen(kw_only=True)
class Param:
    """One keyword argument of a tool."""

    name: str
    types: tuple[JsonType, ...]
    """JSON Schema types it accepts, e.g. ``("string", "null")``."""
    description: str
    required: bool = True
    default: Any = None
    """The value an optional parameter takes when it is left out."""
    example: Any = None
    """The value shown in the example call that every code-mode error ends with."""
    minimum: int | None = None
    maximum: int | None = None

    @property
    def schema(self) -> dict[str, Any]:
        """This parameter's JSON Schema (the value of its ``properties`` entry)."""
        out: dict[str, Any] = {"type": self.types[0] if len(self.types) == 1 else list(self.types)}
        if self.minimum is not None:
            out["minimum"] = self.minimum
        if self.maximum is not None:
            out["maximum"] = self.maximum
        if not self.required:
            out["default"] = self.default
        out["description"] = self.description
        return out


@attrs.frozen(kw_only=True)
class ToolSpec:
    """One built-in tool: what it does, what it takes, what it answers."""

    name: str
    description: str
    """What the tool does, for a model. Its first sentence is the summary (the prompt's line)."""
    params: tuple[Param, ...] = ()
    result: Mapping[str, Any]
    """JSON Schema of what the tool returns in code mode and the frameworks (the design's
    shapes, :mod:`asyncai_watch.shapes`); ``serve`` answers it as JSON text."""
    read_only: bool
    idempotent: bool
    wrap: str | None = None
    """``serve`` only: MCP structured content must be an object, so a result that is not one
    is answered as ``{wrap: result}`` (with the :attr:`echo` arguments beside it)."""
    echo: tuple[str, ...] = ()
    """``serve`` only: arguments repeated in the structured content, e.g. ``read_resource``'s
    ``uri``, capped (:meth:`structured`): a 1 MiB name is not answered with 1 MiB."""
    text_is_structured: bool = False
    """``serve`` only: the JSON text is the structured content rather than the bare result
    (``watch_stop`` answers ``{"name", "stopped"}``: a bare ``true`` would not say which watch)."""

    @property
    def summary(self) -> str:
        """The description's first sentence."""
        head, dot, _ = self.description.partition(". ")
        return head + "." if dot else self.description

    @property
    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema of the arguments: an object, no other keys accepted."""
        out: dict[str, Any] = {"type": "object", "properties": {p.name: p.schema for p in self.params}}
        required = [p.name for p in self.params if p.required]
        if required:
            out["required"] = required
        out["additionalProperties"] = False
        return out

    @property
    def structured_schema(self) -> dict[str, Any]:
        """The JSON Schema of ``serve``'s structured content (its ``outputSchema``)."""
        # Copies: a consumer that edits its schema (some do, in place) must not edit the table.
        if self.wrap is None:
            return copy.deepcopy(dict(self.result))
        props = {p.name: p.schema for p in self.params if p.name in self.echo}
        props[self.wrap] = copy.deepcopy(dict(self.result))
        out: dict[str, Any] = {"type": "object", "properties": props, "required": list(props)}
        if "type" in self.result and "description" in self.result:
            out["description"] = f"{self.wrap} is {self.result['description']}"
        return out

    def structured(self, args: Mapping[str, Any], result: Any) -> Any:
        """``serve``'s structured content for ``result``: ``{echo args..., wrap: result}`` (each
        echoed argument is caller input, so it is repeated capped, :func:`clip`), or ``result``."""
        if self.wrap is None:
            return result
        out = {name: clip(args[name]) if isinstance(args[name], str) else args[name] for name in self.echo}
        out[self.wrap] = result
        return out

    @property
    def returns(self) -> str:
        """The result as a model reads it: its shape, and what the schema says about it."""
        return _returns(self.result)

    @property
    def bridge_returns(self) -> str:
        """What ``serve``'s JSON text holds."""
        return _returns(self.structured_schema if self.text_is_structured else self.result)

    def full_description(self, *, bridge: bool = False) -> str:
        """The description and what the tool returns (``bridge``: as ``serve`` answers it)."""
        return f"{self.description} Returns {self.bridge_returns if bridge else self.returns}."

    @property
    def call(self) -> str:
        """The code-mode call shape: ``await watch_start(name=..., uri=..., on_event=None)``."""
        args = [f"{p.name}=..." if p.required else f"{p.name}={_py(p.default)}" for p in self.params]
        return f"await {self.name}({', '.join(args)})"

    @property
    def example(self) -> str:
        """A ready code-mode call: ``await watch_start(name="notes", uri="memo://notes", on_event=None)``."""
        return f"await {self.name}({', '.join(f'{p.name}={_py(p.example)}' for p in self.params)})"

    @property
    def accepted(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(f"{self.name} has no parameter {name!r}; it has {', '.join(self.accepted) or 'none'}")


def _py(value: Any) -> str:
    """A value as Python source with double-quoted strings (the way the examples read)."""
    return json.dumps(value, ensure_ascii=False) if isinstance(value, str) else repr(value)


_SCALARS: Final = {"string": "str", "integer": "int", "boolean": "bool", "null": "None", "number": "float"}


def shape(schema: Mapping[str, Any]) -> str:
    """A JSON Schema as a compact shape: ``[{name, uri, failed?}]``, ``bool``, ``{a: [{b}], c}``.

    An object lists its keys (``?`` marks one that may be missing, and a key holding a
    structure shows it); a schema with no type is said by its description.
    """
    kind = schema.get("type")
    if kind == "array":
        return f"[{shape(schema.get('items', {}))}]"
    if kind == "object":
        required = set(schema.get("required", ()))
        keys = []
        for key, sub in schema.get("properties", {}).items():
            nested = sub.get("type") in ("array", "object") and (sub.get("items") or sub.get("properties"))
            keys.append((key if key in required else key + "?") + (f": {shape(sub)}" if nested else ""))
        return "{" + ", ".join(keys) + "}"
    if isinstance(kind, str):
        return _SCALARS.get(kind, kind)
    if isinstance(kind, list):
        return " | ".join(_SCALARS.get(str(k), str(k)) for k in kind)
    return str(schema.get("description", "any JSON value"))


def _returns(schema: Mapping[str, Any]) -> str:
    said = shape(schema)
    note = schema.get("description")
    return f"{said}: {note}" if "type" in schema and note else said
