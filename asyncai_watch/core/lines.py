"""The default notice line of an event (used when a watch has no ``on_event`` filter).

Pure. The forms (docs/core.md, "Default line"):

- Kubernetes-like object (a ``metadata.name``): ``TYPE namespace/name`` (``TYPE name``
  without a namespace);
- an item with an identity (:func:`~asyncai_watch.core.identity.item_key`), from a state
  diff or an event log alike: ``TYPE key``;
- otherwise ``TYPE`` and the object's compact JSON;
- ``MODIFIED`` with ``changed`` adds up to three changes:
  ``MODIFIED bid-1 (status.phase: Deciding→Published)``, then ``, +N more``;
- ``GAP: missed 12 events (seq 5-16)``, ``ERROR: <message>``.

Scalars show compactly (strings without quotes, ``null``/``true``/numbers as JSON), long
values are cut with ``…``, a side without the field shows ``(unset)``, a container change
where exactly one element or key differs is followed down to it
(``status.conditions[0].status: False→True``), and a change whose two sides still read the
same once cut (two long lists) shows its path alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from asyncai_watch.core.changes import ROOT
from asyncai_watch.core.eventlog import GAP_LIMIT, GAP_RESET
from asyncai_watch.core.events import CHANGED, ERROR, GAP, MODIFIED, Event
from asyncai_watch.core.jsontext import compact_json

__all__ = ["MAX_CHANGES_SHOWN", "MAX_JSON_CHARS", "MAX_VALUE_CHARS", "default_line", "short_value"]

MAX_CHANGES_SHOWN: Final = 3
MAX_VALUE_CHARS: Final = 40
"""A value in a ``path: old→new`` change is cut to this many characters."""
MAX_JSON_CHARS: Final = 300
"""A line's compact JSON (no key, not Kubernetes-like) is cut to this many characters."""

_UNSET: Final = "(unset)"
_NARROW_STEPS: Final = 4
_NARROW_LIST: Final = 100
# Made once: range() and an int's formatting cost more than the small loops they serve.
_STEPS: Final = range(_NARROW_STEPS)
_INDEXES: Final = tuple(range(n) for n in range(_NARROW_LIST + 1))
_SUBSCRIPTS: Final = tuple(f"[{i}]" for i in range(_NARROW_LIST))
_MISSING: Final = object()
_PARTS: Final[dict[str, list[str]]] = {}
_PARTS_MAX: Final = 1024


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def short_value(value: Any, limit: int = MAX_VALUE_CHARS) -> str:
    """A value as a change shows it: strings bare, other values as compact JSON, cut with ``…``."""
    if type(value) is str:
        if len(value) <= limit and "\n" not in value and "\r" not in value:
            return value
        text = value
    elif value is None:
        text = "null"
    elif value is True:
        text = "true"
    elif value is False:
        text = "false"
    elif type(value) is int:
        text = str(value)
    else:
        text = compact_json(value)
    return _cut(_one_line(text), limit)


def _one_line(text: str) -> str:
    # A notice holds one line per event: a newline inside a value or key would split it.
    if "\n" in text or "\r" in text:
        return text.replace("\r\n", "⏎").replace("\n", "⏎").replace("\r", "⏎")
    return text


def _lookup_dotted(obj: Any, path: str) -> Any:
    if not isinstance(obj, Mapping):
        return _MISSING
    if path in obj:
        return obj[path]
    dot = path.find(".")
    while dot != -1:
        head = path[:dot]
        if head in obj:
            found = _lookup_dotted(obj[head], path[dot + 1 :])
            if found is not _MISSING:
                return found
        dot = path.find(".", dot + 1)
    return _MISSING


def _narrow(path: str, a: Any, b: Any) -> tuple[str, Any, Any]:
    """Follow a container change down while exactly one element or key differs.

    ``status.conditions`` whose only difference is one condition's status reads as
    ``status.conditions[0].status: False→True`` instead of two cut-off lists.
    """
    # Plain loops: the containers met here are small (a few conditions, a few keys), where
    # a loop beats building iterator chains. Elements compare with ``!=`` (not ``is``).
    for _ in _STEPS:
        if type(a) is list and type(b) is list:
            n = len(a)
            if n != len(b) or n > _NARROW_LIST:
                break
            i = -1
            for j in _INDEXES[n]:
                if a[j] != b[j]:
                    if i != -1:
                        i = -2
                        break
                    i = j
            if i < 0:
                break
            path, a, b = path + _SUBSCRIPTS[i], a[i], b[i]
        elif type(a) is dict and type(b) is dict:
            get = b.get
            differ = 0  # keys whose values differ; the last one's key and values kept
            key: Any = None
            va: Any = None
            vb: Any = None
            missing = False  # a key of a that b lacks (then b may have keys a lacks)
            for k, v in a.items():
                w = get(k, _MISSING)
                if w is _MISSING:
                    missing = True
                if v != w:
                    differ += 1
                    key, va, vb = k, v, w
            if missing or len(b) != len(a):
                for k in b:
                    if k not in a:
                        differ += 1
                        key, va, vb = k, _MISSING, b[k]
            if differ != 1 or type(key) is not str:
                break
            path, a, b = (f"{path}.{key}" if path else key), va, vb
        else:
            break
    return path, a, b


def _parts(path: str) -> list[str]:
    # Changed paths repeat (``status.phase`` on every pod update): split each once. Bounded,
    # since keys come from the watched data.
    parts = _PARTS.get(path)
    if parts is None:
        if len(_PARTS) >= _PARTS_MAX:
            _PARTS.clear()
        parts = _PARTS[path] = path.split(".")
    return parts


def _change(path: str, old: Any, new: Any) -> str:
    if path == ROOT:
        a, b = old, new
    else:
        # _lookup for both sides, the usual case inline: every dot separates keys.
        parts = _PARTS.get(path) or _parts(path)
        a = old
        for part in parts:
            if type(a) is not dict or part not in a:
                a = _lookup_dotted(old, path)
                break
            a = a[part]
        b = new
        for part in parts:
            if type(b) is not dict or part not in b:
                b = _lookup_dotted(new, path)
                break
            b = b[part]
    ta = type(a)
    if (ta is list or ta is dict) and type(b) is ta:
        path, a, b = _narrow(path, a, b)
    # short_value, its common case (a short one-line string) without a call.
    if type(a) is str and len(a) <= MAX_VALUE_CHARS and "\n" not in a and "\r" not in a:
        sa = a
    else:
        sa = _UNSET if a is _MISSING else short_value(a)
    if type(b) is str and len(b) <= MAX_VALUE_CHARS and "\n" not in b and "\r" not in b:
        sb = b
    else:
        sb = _UNSET if b is _MISSING else short_value(b)
    if sa == sb:
        return path or "value"
    return f"{path}: {sa}→{sb}" if path else f"{sa}→{sb}"


def _changes(event: Event) -> str:
    changed = event.changed
    old, new = event.old, event.item
    n = len(changed)
    if n == 1:
        return f" ({_change(changed[0], old, new)})"
    if n == 2:
        return f" ({_change(changed[0], old, new)}, {_change(changed[1], old, new)})"
    shown = [_change(p, old, new) for p in changed[:MAX_CHANGES_SHOWN]]
    if n > MAX_CHANGES_SHOWN:
        shown.append(f"+{n - MAX_CHANGES_SHOWN} more")
    return " (" + ", ".join(shown) + ")"


def _k8s_name(obj: Any) -> str | None:
    if type(obj) is not dict and not isinstance(obj, Mapping):
        return None
    meta = obj.get("metadata")
    if type(meta) is not dict and not isinstance(meta, Mapping):
        return None
    name = meta.get("name")
    if type(name) is not str or not name:
        return None
    ns = meta.get("namespace")
    return f"{ns}/{name}" if type(ns) is str and ns else name


def _gap_line(fields: Mapping[str, Any]) -> str:
    reason = fields.get("reason")
    if reason == GAP_RESET:
        prev, first = fields.get("previous_seq"), fields.get("first_seq")
        if prev is None:
            return "GAP: the event log restarted; events before it may be missed"
        if first is None:  # the new log had no event yet
            return f"GAP: the event log restarted after seq {prev}; events since may be missed"
        return f"GAP: the event log restarted (seq {prev} → {first}); events in between may be missed"
    missed, a, b = fields.get("missed"), fields.get("from_seq"), fields.get("to_seq")
    noun = "event" if missed == 1 else "events"
    seqs = f"seq {a}" if a == b else f"seq {a}-{b}"
    line = f"GAP: missed {missed} {noun} ({seqs})"
    if reason == GAP_LIMIT:
        line += f", more than {fields.get('limit')} new events in one update"
    kept = fields.get("retention")
    if type(kept) is str and kept:
        line += f": older than the log keeps ({_one_line(kept)})"
    return line


def _error_line(event: Event) -> str:
    message = event.fields.get("message")
    if type(message) is str and message:
        return _one_line(f"ERROR: {message}")
    rest = {k: v for k, v in event.fields.items() if k not in ("type", "seq")}
    return f"ERROR: {_cut(compact_json(rest), MAX_JSON_CHARS)}" if rest else "ERROR: (no message)"


def default_line(event: Event) -> str:
    """The line a watch without a filter puts in its notice (see the module docstring)."""
    typ = event.type
    obj = event.item
    # The common case first: a Kubernetes-like object (dict metadata with a string name).
    meta = obj.get("metadata") if type(obj) is dict else None
    if type(meta) is dict and typ != GAP and typ != ERROR and typ != CHANGED:
        name = meta.get("name")
        if type(name) is str and name:
            ns = meta.get("namespace")
            head = f"{typ} {ns}/{name}" if type(ns) is str and ns else f"{typ} {name}"
            if event.changed and typ == MODIFIED:
                head += _changes(event)
            if "\n" in head or "\r" in head:
                return _one_line(head)
            return head
    return _other_line(event)


def _other_line(event: Event) -> str:
    typ = event.type
    if typ == GAP:
        return _gap_line(event.fields)
    if typ == ERROR:
        return _error_line(event)
    if typ == CHANGED:
        a, b = short_value(event.old), short_value(event.item)
        return "CHANGED" if a == b else f"CHANGED ({a}→{b})"
    obj = event.item
    name = _k8s_name(obj)
    if name is not None:
        head = f"{typ} {name}"
    elif event.key is not None:
        # One identity rule for both read shapes: an item with an id reads the same whether it
        # came from a state diff or an event log.
        head = f"{typ} {event.key}"
    elif obj is not None:
        head = f"{typ} {_cut(compact_json(obj), MAX_JSON_CHARS)}"
    else:
        rest = {k: v for k, v in event.fields.items() if k not in ("type", "seq")}
        head = f"{typ} {_cut(compact_json(rest), MAX_JSON_CHARS)}" if rest else typ
    if typ == MODIFIED and event.changed:
        head += _changes(event)
    return _one_line(head)
