"""An item's identity: one rule for state-diff items and event-log objects.

Pure. The key decides what a change is about: the state diff matches list items by it,
dedupe remembers the last line per key, and a notice line names the item by it
(``ADDED b``), whichever read shape the item came in.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["item_key"]


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
