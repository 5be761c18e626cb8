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

from collections.abc import Callable, Mapping, Sequence
from itertools import compress, repeat
from operator import ne
from typing import Any

from asyncai_watch.core.events import ADDED, CHANGED, DELETED, MODIFIED, Event
from asyncai_watch.core.identity import item_key
from asyncai_watch.core.jsontext import compact_json

__all__ = ["diff_state", "item_id", "keyed", "number_keys"]

_MISSING: Any = object()
_dict_get: Callable[[Any, str], Any] = dict.get
_dict_has: Callable[[Any, str], bool] = dict.__contains__


def _fast_keys(items: Sequence[Any]) -> list[str] | None:
    """Every item's :func:`item_key` when ``items`` has one of the two usual shapes, found in
    passes at C speed (no Python code per item): dicts whose ``metadata.uid`` is a non-empty
    string (Kubernetes objects), or dicts with neither ``metadata`` nor ``uid`` whose ``id`` is a
    non-empty string. ``None`` for anything else: then the item-by-item rules apply."""
    if not items or set(map(type, items)) != {dict}:
        return None
    keys: list[Any]
    if "metadata" in items[0]:
        metas = list(map(_dict_get, items, repeat("metadata")))
        if set(map(type, metas)) != {dict}:
            return None
        keys = list(map(_dict_get, metas, repeat("uid")))
    elif any(map(_dict_has, items, repeat("metadata"))) or any(map(_dict_has, items, repeat("uid"))):
        return None
    else:
        keys = list(map(_dict_get, items, repeat("id")))
    if set(map(type, keys)) != {str} or "" in keys:
        return None
    return keys


def keyed(items: Sequence[Any]) -> dict[str, Any]:
    """Items by key, in list order: :func:`item_key`, else the item itself (a string item)
    or its compact JSON. A key seen again becomes ``key#2``, ``key#3``, ... so no item is lost;
    the numbering follows list order, so it is deterministic.
    """
    return _keyed(items, _fast_keys(items))


def _keyed(items: Sequence[Any], keys: list[str] | None) -> dict[str, Any]:
    """:func:`keyed`, given what :func:`_fast_keys` found."""
    if keys is not None:
        fast = dict(zip(keys, items, strict=True))
        if len(fast) == len(keys):  # no key repeats: nothing to number
            return fast
    return dict(zip(number_keys(keys if keys is not None else list(map(item_id, items))), items, strict=True))


def item_id(item: Any) -> str:
    """An item's key before numbering: :func:`item_key`, else the item itself (a string item)
    or its compact JSON (sorted keys)."""
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
    return str(k)


def number_keys(ids: list[str]) -> list[str]:
    """``ids`` with repeats numbered in list order: the second ``k`` becomes ``k#2``, the third
    ``k#3``, ... (skipping any ``k#n`` already taken), so every key is unique."""
    if len(set(ids)) == len(ids):
        return ids
    seen: set[str] = set()
    out: list[str] = []
    for k in ids:
        if k in seen:
            n = 2
            while f"{k}#{n}" in seen:
                n += 1
            k = f"{k}#{n}"
        seen.add(k)
        out.append(k)
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
        ko, kn = _fast_keys(old), _fast_keys(new)
        if kn is not None and ko == kn and len(set(kn)) == len(kn):
            # The usual re-read: the same keys, none repeated, in the same order. Pair the items
            # by position, as _diff_mappings does for equal key orders, without either mapping.
            return [
                Event(type=MODIFIED, key=kn[i], item=new[i], old=old[i])
                for i in compress(range(len(kn)), map(ne, old, new))
            ]
        return _diff_mappings(_keyed(old, ko), _keyed(new, kn))
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
