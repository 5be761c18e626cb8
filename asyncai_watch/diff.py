"""State diff: the previous read of a state resource vs the current one, as events.

Pure: no I/O, no clock. The rules (docs/design.md, "Read shapes"; state):

- two JSON lists: items are matched by :func:`item_key`; an item in ``new`` only is
  ``ADDED``, in ``old`` only ``DELETED``, in both but different ``MODIFIED``;
- two JSON objects: the same, by top-level key;
- anything else (text, numbers, or a list/object/scalar shape change between reads):
  one ``CHANGED`` event with the whole ``old`` and ``new`` values.

Values compare with Python's ``==`` on the parsed JSON, i.e. as JSON values: key order
does not matter, and numbers compare by value (``1`` equals ``1.0``). Python's ``True == 1``
carries over, so a field flipping between ``true`` and ``1`` (or ``false`` and ``0``) is not
seen as a change; a strict walk would cost several times the whole diff (see docs/core.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from itertools import compress
from operator import ne
from typing import Any

from asyncai_watch.events import ADDED, CHANGED, DELETED, MODIFIED, Event

__all__ = ["compact_json", "diff_state", "item_key", "keyed", "parse_state"]

_MISSING: Any = object()


# Built once: json.dumps with options builds a new encoder on every call, which dominated.
_ENCODER = json.JSONEncoder(separators=(",", ":"), sort_keys=True, ensure_ascii=False, default=str)


def compact_json(value: Any) -> str:
    """Compact, key-sorted JSON: the stable text form of a value (non-JSON values via ``str``)."""
    return _ENCODER.encode(value)


def _id_text(value: Any) -> str | None:
    # An id is a non-empty string or a number; booleans, null and containers are not ids.
    if type(value) is str:
        return value or None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def item_key(item: Any) -> str | None:
    """The item's identity: the first present of ``metadata.uid``, ``uid``, ``id``,
    ``metadata.name``, ``name``, as a string; ``None`` when there is none.

    A ``metadata.name`` with a ``metadata.namespace`` gives ``namespace/name``, so two
    namespaces' objects of the same name stay apart. Numbers are stringified; empty strings,
    booleans, nulls and containers do not count as present.
    """
    if type(item) is not dict and not isinstance(item, Mapping):
        return None
    get = item.get
    meta = get("metadata")
    if type(meta) is not dict and not isinstance(meta, Mapping):
        meta = None
    elif (k := _id_text(meta.get("uid"))) is not None:
        return k
    if (k := _id_text(get("uid"))) is not None:
        return k
    if (k := _id_text(get("id"))) is not None:
        return k
    if meta is not None and (k := _id_text(meta.get("name"))) is not None:
        ns = meta.get("namespace")
        return f"{ns}/{k}" if type(ns) is str and ns else k
    return _id_text(get("name"))


def parse_state(text: str) -> Any:
    """A state read's value: the parsed JSON if ``text`` is JSON, else ``text`` itself."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def keyed(items: Sequence[Any]) -> dict[str, Any]:
    """Items by key, in list order: :func:`item_key`, else the item itself (a string item)
    or its compact JSON. A key seen again becomes ``key#2``, ``key#3``, ... so no item is lost;
    the numbering follows list order, so it is deterministic.
    """
    out: dict[str, Any] = {}
    for item in items:
        # Fast path for the common shapes (a dict with a string uid/id/name); anything
        # unusual goes through item_key, which has the full rules.
        k: Any = None
        if type(item) is dict:
            meta = item.get("metadata")
            if meta is None:
                k = item.get("uid")
                if k is None:
                    k = item.get("id")
                    if k is None:
                        k = item.get("name")
            elif type(meta) is dict:
                k = meta.get("uid")
            if type(k) is not str or not k:
                k = item_key(item)
        elif type(item) is str:
            k = item
        else:
            k = item_key(item)
        if k is None:
            k = compact_json(item)
        if k in out:
            n = 2
            while f"{k}#{n}" in out:
                n += 1
            k = f"{k}#{n}"
        out[k] = item
    return out


def _diff_mappings(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Event]:
    # New order first (ADDED / MODIFIED as they appear now), then DELETED in old order.
    keys = list(new)
    if keys == list(old):
        # Same keys in the same order (the common case): compare values pairwise at C speed.
        return [
            Event(type=MODIFIED, key=k, old=old[k], new=new[k])
            for k in compress(keys, map(ne, old.values(), new.values()))
        ]
    events: list[Event] = []
    append = events.append
    get = old.get
    for k, v in new.items():
        o = get(k, _MISSING)
        if o is _MISSING:
            append(Event(type=ADDED, key=k, new=v))
        elif o is not v and o != v:
            append(Event(type=MODIFIED, key=k, old=o, new=v))
    for k, o in old.items():
        if k not in new:
            append(Event(type=DELETED, key=k, old=o))
    return events


def diff_state(old: Any, new: Any) -> list[Event]:
    """Events that turn ``old`` into ``new`` (see the module docstring for the rules).

    Every event carries ``key`` (``None`` for ``CHANGED``), ``old`` and ``new``
    (``None`` where that side has no value).
    """
    if isinstance(old, list) and isinstance(new, list):
        # No ``old == new`` shortcut: item keys are derived strictly ([false] and [0] key
        # as "false" and "0"), while == would call those lists equal.
        return _diff_mappings(keyed(old), keyed(new))
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        if old == new:
            return []
        # JSON object keys are strings; stringify anything else so keys stay str.
        o = old if all(type(k) is str for k in old) else {str(k): v for k, v in old.items()}
        n = new if all(type(k) is str for k in new) else {str(k): v for k, v in new.items()}
        return _diff_mappings(o, n)
    if old == new:
        return []
    return [Event(type=CHANGED, old=old, new=new)]
