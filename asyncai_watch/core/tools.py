"""The built-in watch tools, written once: names, descriptions, parameter and result schemas.

Pure data and text (no SDK, no I/O). Every surface that offers these tools is generated from
this table, so a name, a parameter, a type or a description cannot drift between them:

- ``asyncai-watch serve``'s ``tools/list`` (:mod:`asyncai_watch.serve.server`): each tool's
  ``inputSchema``, ``outputSchema``, description and annotations, and its argument check;
- code mode's built-ins (:mod:`asyncai_watch.codemode`): their argument checks, the call
  shown in every error, their docstrings and the lines the reference agent's prompt lists;
- the framework integrations (:mod:`asyncai_watch.integrations`): real typed functions whose
  signature and Google-style docstring are built from here, which PydanticAI, the Agents SDK
  and LangChain turn back into the same schema (``tests/test_tool_table.py`` checks that).

:data:`WATCH_TOOLS` are the five built-ins every surface offers; :data:`BRIDGE_TOOLS` adds
``watch_notices``, which only ``serve`` has (it reads the bridge's notice ring).

A parameter's types are JSON Schema type names. A result is described by a JSON Schema whose
objects stay open (no ``additionalProperties: false``): a field added later (``protocol`` on a
watch, say) is not a broken contract for a client that validates.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any, Final, Literal

import attrs

from asyncai_watch.core.echo import clip, quoted

__all__ = [
    "BRIDGE_TOOLS",
    "DEFAULT_NOTICES_LIMIT",
    "MAX_NOTICES_LIMIT",
    "WATCH_TOOLS",
    "ArgumentProblem",
    "Param",
    "ToolSpec",
    "check_arguments",
    "shape",
    "tool",
]

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


# -- the problems a call's arguments can have -------------------------------------------------

_PY_KINDS: Final = {"string": "a string", "integer": "an int", "boolean": "a bool", "null": "None"}


_MAX_NAMED: Final = 10
"""Unknown argument names an error lists (the rest are counted)."""


@attrs.frozen(kw_only=True)
class ArgumentProblem:
    """What is wrong with one call's arguments; each surface words it for its caller.

    :meth:`message` is ``serve``'s tool error (JSON words); :meth:`python_message` is code
    mode's :class:`TypeError` (Python words, ending with a call that works).
    """

    tool: ToolSpec
    kind: Literal["unknown", "missing", "type", "range"]
    names: tuple[str, ...]
    value: Any = None

    def _bounds(self) -> str:
        p = self.tool.param(self.names[0])
        bounds = [f">= {p.minimum}"] if p.minimum is not None else []
        bounds += [f"<= {p.maximum}"] if p.maximum is not None else []
        return " and ".join(bounds)

    @property
    def _names(self) -> str:
        # Names a caller made up are caller input: each capped, at most ten of them.
        shown = ", ".join(clip(name) for name in self.names[:_MAX_NAMED])
        more = len(self.names) - _MAX_NAMED
        return shown + (f" and {more:,} more" if more > 0 else "")

    def message(self) -> str:
        """``watch_start: unknown argument(s) server; it accepts name, uri, on_event``."""
        t, names = self.tool, self._names
        accepted = ", ".join(t.accepted) or "no arguments"
        if self.kind == "unknown":
            return f"{t.name}: unknown argument(s) {names}; it accepts {accepted}"
        if self.kind == "missing":
            return f"{t.name}: missing required argument(s) {names}; it accepts {accepted}"
        if self.kind == "type":
            allowed = " or ".join(t.param(names).types)
            return f"{t.name}: {names} must be {allowed}, got {quoted(self.value)}"
        return f"{t.name}: {names} must be an integer {self._bounds()}, got {self.value}"

    def python_message(self) -> str:
        """``watch_start() is missing uri=; call it as await watch_start(name="notes", ...)``."""
        t, names = self.tool, self._names
        hint = f"call it as {t.example}"
        if self.kind == "unknown":
            accepted = ", ".join(t.accepted) or "no arguments"
            return f"{t.name}() got unknown argument(s) {names}; it accepts {accepted}; {hint}"
        if self.kind == "missing":
            return f"{t.name}() is missing {', '.join(n + '=' for n in self.names)}; {hint}"
        shown = f"{type(self.value).__name__} {quoted(self.value)}"
        if self.kind == "type":
            allowed = " or ".join(_PY_KINDS.get(k, k) for k in t.param(names).types)
            return f"{t.name}(): {names} must be {allowed}, got {shown}; {hint}"
        return f"{t.name}(): {names} must be an int {self._bounds()}, got {shown}; {hint}"


def _is(kind: str, value: Any) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    return kind == "null" and value is None


def check_arguments(spec: ToolSpec, args: Mapping[str, Any]) -> ArgumentProblem | None:
    """The first thing wrong with ``args`` for ``spec`` (unknown, missing, type, range), or None."""
    unknown = tuple(sorted(set(args) - set(spec.accepted)))
    if unknown:
        return ArgumentProblem(tool=spec, kind="unknown", names=unknown)
    missing = tuple(p.name for p in spec.params if p.required and p.name not in args)
    if missing:
        return ArgumentProblem(tool=spec, kind="missing", names=missing)
    for p in spec.params:
        if p.name not in args:
            continue
        value = args[p.name]
        if not any(_is(k, value) for k in p.types):
            return ArgumentProblem(tool=spec, kind="type", names=(p.name,), value=value)
        if _is("integer", value) and (
            (p.minimum is not None and value < p.minimum) or (p.maximum is not None and value > p.maximum)
        ):
            return ArgumentProblem(tool=spec, kind="range", names=(p.name,), value=value)
    return None


# -- the table --------------------------------------------------------------------------------


def _obj(props: Mapping[str, Any], *, optional: tuple[str, ...] = (), **extra: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": dict(props),
        "required": [k for k in props if k not in optional],
        **extra,
    }


_STR: Final = {"type": "string"}
_STR_OR_NULL: Final = {"type": ["string", "null"]}
_INT: Final = {"type": "integer"}
_BOOL: Final = {"type": "boolean"}
_TRUE: Final = {"const": True}
_SHAPE: Final = {"enum": ["state", "event-log"]}
_WATCH_NAME: Final = Param(
    name="name",
    types=("string",),
    description="The watch's name, as given to watch_start.",
    example="notes",
)

LIST_RESOURCES: Final = ToolSpec(
    name="list_resources",
    description=(
        "List every resource and URI template the connected MCP servers offer. uri is the "
        "RFC 6570 template when template is true; example is a ready call when the server gives "
        "one; subscribable says whether watch_start can watch it (read_resource works either way); "
        "watchable_by_trial marks a server that does not advertise subscriptions but accepted one."
    ),
    result={
        "type": "array",
        "items": _obj(
            {
                "uri": _STR,
                "template": _BOOL,
                "name": _STR,
                "description": _STR,
                "example": _STR_OR_NULL,
                "mime_type": _STR_OR_NULL,
                "server": _STR,
                "subscribable": _BOOL,
                "watchable_by_trial": _TRUE,
                "never_notified": _TRUE,
            },
            optional=("watchable_by_trial", "never_notified"),
        ),
    },
    read_only=True,
    idempotent=True,
    wrap="resources",
)
READ_RESOURCE: Final = ToolSpec(
    name="read_resource",
    description="Read a resource's current content once, from the server that serves it.",
    params=(
        Param(
            name="uri",
            types=("string",),
            description="The resource URI, e.g. memo://notes (see list_resources).",
            example="memo://notes",
        ),
    ),
    result={"description": "parsed JSON, else text"},
    read_only=True,
    idempotent=True,
    wrap="value",
    echo=("uri",),
)
WATCH_START: Final = ToolSpec(
    name="watch_start",
    description=(
        "Watch a resource: each later change becomes a notice, until watch_stop. The first read "
        "happens now, so a URI the server rejects fails here. on_event is Python source run once "
        "per event with `event` (a dict: type, key, new, old, changed, object, ...): its last "
        "expression is the notice line, None drops the event; it is checked now (a SyntaxError or "
        "NameError fails the call) and may only read (read_resource, list_resources, read-only "
        'tools). Example: name="cfg", uri="file:///srv/app/config.json", '
        "on_event=\"None if event['key'] == 'ts' else event['type'] + ' ' + event['key']\"."
    ),
    params=(
        Param(
            name="name",
            types=("string",),
            description=(
                "A name for the watch, used by watch_stop: 1-64 of letters, digits, _ . -, "
                "starting with a letter or _."
            ),
            example="notes",
        ),
        Param(
            name="uri",
            types=("string",),
            description="The resource URI to watch: a URI or a template's expansion from list_resources.",
            example="memo://notes",
        ),
        Param(
            name="on_event",
            types=("string", "null"),
            description="Python filter source; leave it out (or null) for the default notice line.",
            required=False,
            default=None,
            example=None,
        ),
    ),
    result=_obj({"name": _STR, "uri": _STR, "shape": _SHAPE}),
    read_only=False,
    idempotent=False,
)
WATCH_STOP: Final = ToolSpec(
    name="watch_stop",
    description="Stop and forget a watch.",
    params=(_WATCH_NAME,),
    result={**_BOOL, "description": "false when no watch had that name"},
    read_only=False,
    idempotent=True,
    wrap="stopped",
    echo=("name",),
    text_is_structured=True,
)
WATCH_LIST: Final = ToolSpec(
    name="watch_list",
    description="List every watch, with the events and notices each has seen.",
    result={
        "type": "array",
        "items": _obj(
            {
                "name": _STR,
                "uri": _STR,
                "shape": {"enum": ["state", "event-log", None]},
                "events": _INT,
                "notices": _INT,
                "failed": _TRUE,
                "restore_failed": _TRUE,
                "error": _STR_OR_NULL,
                "protocol": {
                    "type": ["string", "null"],
                    "description": "the MCP version the watch's server speaks",
                },
                "watchable_by_trial": _TRUE,
            },
            optional=("failed", "restore_failed", "error", "protocol", "watchable_by_trial"),
        ),
        "description": "failed or restore_failed (true) with error mark a watch that is not running",
    },
    read_only=True,
    idempotent=True,
    wrap="watches",
)
WATCH_NOTICES: Final = ToolSpec(
    name="watch_notices",
    description=(
        "The notices you have not seen: those with id > after_id, oldest first (pushes can be "
        "dropped by the host; this cannot). Pass next_after as after_id next time; more=true means "
        "call again. gap (else null) says how many older notices left the bounded buffer unread: "
        "check watch_list and read_resource for the current state then."
    ),
    params=(
        Param(
            name="after_id",
            types=("integer",),
            description="The highest notice_id you have seen; 0 for all that are kept.",
            required=False,
            default=0,
            example=0,
            minimum=0,
        ),
        Param(
            name="limit",
            types=("integer",),
            description="At most this many notices in one answer.",
            required=False,
            default=DEFAULT_NOTICES_LIMIT,
            example=DEFAULT_NOTICES_LIMIT,
            minimum=1,
            maximum=MAX_NOTICES_LIMIT,
        ),
    ),
    result=_obj(
        {
            "notices": {
                "type": "array",
                "items": _obj(
                    {
                        "id": _INT,
                        "time": _STR,
                        "kind": _STR,
                        "watch": _STR,
                        "uri": _STR,
                        "text": _STR,
                        "failed": _BOOL,
                    },
                    optional=("watch", "uri", "failed"),
                ),
            },
            "next_after": _INT,
            "last_id": _INT,
            "more": _BOOL,
            "gap": {
                "anyOf": [
                    {"type": "null"},
                    _obj({"lost": _INT, "first_id": _INT, "last_id": _INT, "message": _STR}),
                ]
            },
            "restarted": _TRUE,
        },
        optional=("restarted",),
    ),
    read_only=True,
    idempotent=True,
)

WATCH_TOOLS: Final = (LIST_RESOURCES, READ_RESOURCE, WATCH_START, WATCH_STOP, WATCH_LIST)
"""The built-ins every surface offers: code mode, the frameworks, the agent's prompt, ``serve``."""
BRIDGE_TOOLS: Final = (*WATCH_TOOLS, WATCH_NOTICES)
"""What ``asyncai-watch serve`` offers: the built-ins and its ring's ``watch_notices``."""
_BY_NAME: Final = {t.name: t for t in BRIDGE_TOOLS}


def tool(name: str) -> ToolSpec:
    """The built-in called ``name``; :class:`KeyError` naming the built-ins for any other."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no built-in tool {name!r}; they are {', '.join(_BY_NAME)}") from None
