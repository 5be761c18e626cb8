"""State diff: the previous read of a state resource vs the current one, as events.

Pure: no I/O, no clock. The rules (docs/design.md, "Read shapes"; state):

- two JSON lists: items are matched by :func:`~asyncai_watch.core.identity.item_key`; an item in ``new`` only is
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

from collections.abc import Mapping, Sequence
from itertools import compress
from operator import ne
from typing import Any

from asyncai_watch.core.events import ADDED, CHANGED, DELETED, MODIFIED, Event
from asyncai_watch.core.identity import item_key
from asyncai_watch.core.jsontext import compact_json

__all__ = ["diff_state", "keyed"]

_MISSING: Any = object()


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
            k = compact_json(item, sort_keys=True)
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
            Event(type=MODIFIED, key=k, item=new[k], old=old[k])
            for k in compress(keys, map(ne, old.values(), new.values()))
        ]
    events: list[Event] = []
    append = events.append
    get = old.get
    for k, v in new.items():
        o = get(k, _MISSING)
        if o is _MISSING:
            append(Event(type=ADDED, key=k, item=v))
        elif o is not v and o != v:
            append(Event(type=MODIFIED, key=k, item=v, old=o))
    for k, o in old.items():
        if k not in new:
            append(Event(type=DELETED, key=k, item=o))
    return events


def diff_state(old: Any, new: Any) -> list[Event]:
    """Events that turn ``old`` into ``new`` (see the module docstring for the rules).

    Every event carries ``key`` (``None`` for ``CHANGED``) and ``item`` (the deleted value
    for ``DELETED``); ``old`` only for ``MODIFIED`` and ``CHANGED``.
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
    return [Event(type=CHANGED, item=new, old=old)]
