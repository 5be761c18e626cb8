"""A notice on the wire: the versioned JSON object of ``watch --json`` and ``--exec``.

One cattrs converter holds the shape (its hooks here, in one place), and the JSON Schema
shipped in the package (``asyncai_watch/schemas/notice-v1.schema.json``, :func:`notice_schema`)
documents it. docs/cli.md, "--json", shows an example.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from importlib.resources import files
from typing import Any, Final

import cattrs

from asyncai_watch.core.notice import Notice, NoticeEvent
from asyncai_watch.core.resume import REDELIVERED_META_KEY

__all__ = [
    "MAX_ENV_VALUE",
    "NOTICE_SCHEMA",
    "converter",
    "event_env",
    "initial_record",
    "notice_record",
    "notice_schema",
]

MAX_ENV_VALUE: Final = 8192
"""Characters of one ``ASYNCAI_WATCH_EVENT_*`` value (the whole notice is on ``--exec``'s stdin)."""

NOTICE_SCHEMA: Final = "asyncai-watch/notice/1"
"""The ``schema`` of every object: its name and version (fields may be added within one)."""

converter: Final = cattrs.Converter()
converter.register_unstructure_hook(NoticeEvent, lambda ev: _event_dict(ev))


def _event_dict(ev: NoticeEvent) -> dict[str, Any]:
    return {
        "type": ev.type,
        "watch": ev.watch,
        "uri": ev.uri,
        "key": ev.key,
        "paths": list(ev.paths),
        "old": ev.old,
        "new": ev.new,
        "seq": ev.seq,
        "time": ev.time,
        "message": ev.message,
        "fields": dict(ev.fields),
        "line": ev.line,
    }


def notice_record(notice: Notice, *, server: str | None = None) -> dict[str, Any]:
    """``notice`` as its ``--json`` object (schema :data:`NOTICE_SCHEMA`)."""
    meta = notice.meta
    return {
        "schema": NOTICE_SCHEMA,
        "kind": notice.source,
        "watch": meta.get("name"),
        "uri": meta.get("uri"),
        "server": server,
        "lines": notice.text.splitlines(),
        "failed": meta.get("failed") == "true",
        "redelivered": meta.get(REDELIVERED_META_KEY) == "1",
        "events": converter.unstructure(list(notice.events), list[NoticeEvent]),
    }


def initial_record(watch: str, uri: str, content: Any, *, server: str | None = None) -> dict[str, Any]:
    """``watch --initial``'s object: the URI's current state (``initial``), before any notice."""
    return {
        "schema": NOTICE_SCHEMA,
        "kind": "initial",
        "watch": watch,
        "uri": uri,
        "server": server,
        "lines": [],
        "failed": False,
        "events": [],
        "initial": content,
    }


def event_env(record: Mapping[str, Any], prefix: str = "ASYNCAI_WATCH_EVENT_") -> dict[str, str]:
    """The first event of a notice record as environment variables (``..._TYPE``, ``_KEY``,
    ``_OLD`` and ``_NEW`` as JSON, ...): ``{}`` when it has none. Each value is cut to
    :data:`MAX_ENV_VALUE` characters."""
    events = record.get("events") or []
    if not events:
        return {}
    first = events[0]
    out: dict[str, str] = {f"{prefix}COUNT": str(len(events))}
    for name in ("type", "key", "seq", "time", "message", "line"):
        value = first.get(name)
        out[prefix + name.upper()] = "" if value is None else str(value)
    for name in ("old", "new"):
        out[prefix + name.upper()] = json.dumps(first.get(name), ensure_ascii=False)
    out[prefix + "PATHS"] = ",".join(first.get("paths") or [])
    # An environment string ends at NUL, and the kernel caps each one (MAX_ARG_STRLEN).
    return {k: v.replace("\0", "")[:MAX_ENV_VALUE] for k, v in out.items()}


@cache
def notice_schema() -> dict[str, Any]:
    """The JSON Schema of :func:`notice_record`'s objects (draft 2020-12)."""
    text = files("asyncai_watch").joinpath("schemas/notice-v1.schema.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema
