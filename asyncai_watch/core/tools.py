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

from collections.abc import Mapping
from typing import Any, Final

from asyncai_watch.core.tool_arguments import ArgumentProblem, check_arguments
from asyncai_watch.core.tool_spec import DEFAULT_NOTICES_LIMIT, MAX_NOTICES_LIMIT, Param, ToolSpec, shape

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
                        "events": {
                            "type": "array",
                            "items": {"type": "object"},
                            "description": (
                                "the notice's events, typed: type, key, paths, old, new, seq, time, "
                                "message, fields, line (docs/core.md)"
                            ),
                        },
                        "events_omitted": _INT,
                    },
                    optional=("watch", "uri", "failed", "events_omitted"),
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
