"""A read of a state resource, indexed by item without building the items.

Pure. A watch diffs each read of a state resource against the last one, and usually a few
items of many changed. Parsing both texts into Python objects costs far more than the diff
(a 100,000-item list: about 110 ms to parse each text, docs/benchmarks.md), so a
:class:`StateIndex` keeps the body's top-level items as their raw JSON text (``msgspec.Raw``:
a slice of the body, found by msgspec's validating scan at C speed) and :func:`diff_reads`
parses only the items whose text changed.

The result is exactly :func:`~asyncai_watch.core.diff.diff_state` of the parsed values
(``tests/test_state_index.py`` holds that as a property):

- equal item text means equal values (one text parses one way), so unchanged items are
  skipped by a byte comparison; items whose text differs are parsed and compared as values
  (a re-ordered or re-spaced item is not a change);
- list items are matched by key; the keys of a whole list come from a second scan that
  decodes only ``metadata.uid``, ``uid``, ``id`` and ``name`` (computed once per baseline:
  a read whose changed items kept their keys has its predecessor's keys);
- anything else (not a JSON list or object, mixed item shapes the fast key rules do not
  cover, a change of shape between reads): ``None`` from :meth:`StateIndex.of` or
  :func:`diff_reads` parses the whole bodies, as :func:`diff_state` always did.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import compress
from operator import attrgetter, ne
from typing import Any, Final

import msgspec

from asyncai_watch.core.diff import diff_state, item_id, number_keys
from asyncai_watch.core.events import ADDED, DELETED, MODIFIED, Event
from asyncai_watch.core.jsontext import JsonError, parse_json

__all__ = ["StateIndex", "diff_reads"]


class _Uid(msgspec.Struct, gc=False):
    uid: str


class _ByUid(msgspec.Struct, gc=False):
    """An item keyed by ``metadata.uid`` (a Kubernetes object)."""

    metadata: _Uid


class _ById(msgspec.Struct, gc=False):
    """An item keyed by ``id``: it has no ``metadata`` or ``uid`` (or they are null)."""

    id: str
    metadata: None = None
    uid: None = None


class _ByName(msgspec.Struct, gc=False):
    """An item keyed by ``name``: no ``metadata``, ``uid`` or ``id`` (or they are null)."""

    name: str
    metadata: None = None
    uid: None = None
    id: None = None


class _Ids(msgspec.Struct, gc=False):
    """The fields an item's key can come from, any type (numeric ids are stringified)."""

    metadata: None = None
    uid: None = None
    id: Any = None
    name: Any = None


_list_items: Final = msgspec.json.Decoder(list[msgspec.Raw]).decode
_object_items: Final = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
# Each shape's decoder builds only its key field; everything else in an item is skipped unbuilt.
# msgspec checks the shape (a wrong type or a missing key field fails the decode), so a
# successful decode's keys follow diff.item_id's rules for that shape.
_KEYED_BY: Final[tuple[tuple[Callable[[str], list[Any]], Callable[[Any], str]], ...]] = (
    (msgspec.json.Decoder(list[_ByUid]).decode, attrgetter("metadata.uid")),
    (msgspec.json.Decoder(list[_ById]).decode, attrgetter("id")),
    (msgspec.json.Decoder(list[_ByName]).decode, attrgetter("name")),
)
_ids: Final = msgspec.json.Decoder(list[_Ids]).decode
_NOT_INDEXED: Final = (msgspec.DecodeError, msgspec.ValidationError, RecursionError)
_UNPARSED: Final[Any] = object()
_ID_TYPES: Final = frozenset({str, int, float})  # bool is not an id: type(True) is bool


class StateIndex:
    """One read's top-level items as raw JSON text: a list's items, or an object's values by key.

    Build it with :meth:`of`. :attr:`value` is the whole parsed body, made on first use (only a
    diff that cannot use the index needs it).
    """

    __slots__ = ("_keys", "_keys_known", "_value", "items", "text")

    def __init__(self, text: str, items: list[msgspec.Raw] | dict[str, msgspec.Raw]) -> None:
        self.text = text
        self.items = items
        self._keys: list[str] | None = None
        self._keys_known = False
        self._value: Any = _UNPARSED

    @classmethod
    def of(cls, text: str) -> StateIndex | None:
        """The index of ``text``, a JSON list or object; ``None`` for any other text (a scalar,
        not JSON, or JSON only the fallback parser reads, such as ``NaN``)."""
        try:
            return cls(text, _list_items(text))
        except msgspec.ValidationError:  # valid JSON, not a list (said at its first character)
            pass
        except _NOT_INDEXED:
            return None
        try:
            return cls(text, _object_items(text))
        except _NOT_INDEXED:
            return None

    @property
    def value(self) -> Any:
        """The whole body, parsed (once)."""
        if self._value is _UNPARSED:
            self._value = parse_json(self.text)
        return self._value

    def keys(self) -> list[str] | None:
        """A list's item keys (numbered as :func:`~asyncai_watch.core.diff.keyed` numbers
        repeats), when its items have one of the shapes keyed at C speed; else ``None``."""
        if not self._keys_known:
            self._keys = _list_keys(self.text) if isinstance(self.items, list) else None
            self._keys_known = True
        return self._keys

    def _take_keys(self, older: StateIndex) -> None:
        """This read has ``older``'s keys (its items kept their keys and places)."""
        self._keys, self._keys_known = older._keys, older._keys_known


def _list_keys(text: str) -> list[str] | None:
    """The numbered keys of a list whose items are all objects keyed the same way: every one by
    ``metadata.uid`` (a non-empty string), or none with ``metadata`` or ``uid`` and every one by
    ``id``, or every one by ``name`` (non-empty strings or numbers). The rules of
    :func:`~asyncai_watch.core.diff.item_id` for those shapes; ``None`` for any other list."""
    for decode, key_of in _KEYED_BY:
        try:
            items = decode(text)
        except msgspec.ValidationError:  # not this shape: usually said at the first item
            continue
        except _NOT_INDEXED:
            return None
        return _numbered(list(map(key_of, items)))
    # Numeric ids or names (stringified, as item_id does), or no item with a key field at all.
    try:
        fields = _ids(text)
    except _NOT_INDEXED:
        return None
    raw: list[Any] = list(map(attrgetter("id"), fields))
    if raw.count(None) == len(raw):
        raw = list(map(attrgetter("name"), fields))
    if not set(map(type, raw)) <= _ID_TYPES:
        return None
    return _numbered([v if type(v) is str else str(v) for v in raw])


def _numbered(keys: list[str]) -> list[str] | None:
    unique = set(keys)
    if "" in unique:
        return None
    return keys if len(unique) == len(keys) else number_keys(keys)


def _parse(raw: msgspec.Raw) -> Any:
    return parse_json(bytes(raw))


def diff_reads(old: Any, new: Any) -> list[Event]:
    """:func:`~asyncai_watch.core.diff.diff_state` of two reads, each a :class:`StateIndex`
    or an already-parsed value; parses only what changed when both are indexes."""
    if isinstance(old, StateIndex) and isinstance(new, StateIndex):
        events = _diff_indexes(old, new)
        if events is not None:
            return events
    return diff_state(
        old.value if isinstance(old, StateIndex) else old,
        new.value if isinstance(new, StateIndex) else new,
    )


def _diff_indexes(old: StateIndex, new: StateIndex) -> list[Event] | None:
    o, n = old.items, new.items
    try:
        if isinstance(o, list) and isinstance(n, list):
            return _diff_lists(old, new, o, n)
        if isinstance(o, dict) and isinstance(n, dict):
            return _diff_objects(o, n)
    except JsonError:  # an item msgspec scanned but its parser refuses: the whole-body path says why
        return None
    return None  # a list became an object or back: one CHANGED event, from the parsed values


def _diff_lists(
    old: StateIndex, new: StateIndex, o: list[msgspec.Raw], n: list[msgspec.Raw]
) -> list[Event] | None:
    if len(o) == len(n):
        changed = list(compress(range(len(n)), map(ne, o, n)))
        if not changed:  # the same text: the same items and keys
            new._take_keys(old)
            return []
        pairs = [(_parse(o[i]), _parse(n[i])) for i in changed]
        # Every item kept its key and place: the key lists are equal, only values changed.
        if all(item_id(a) == item_id(b) for a, b in pairs) and (keys := old.keys()) is not None:
            new._take_keys(old)
            return [
                Event(type=MODIFIED, key=keys[i], item=b, old=a)
                for i, (a, b) in zip(changed, pairs, strict=True)
                if a != b
            ]
    old_keys, new_keys = old.keys(), new.keys()
    if old_keys is None or new_keys is None:
        return None
    return _diff_keyed(old_keys, o, new_keys, n)


def _diff_objects(o: dict[str, msgspec.Raw], n: dict[str, msgspec.Raw]) -> list[Event]:
    keys = list(n)
    if keys == list(o):
        changed = compress(keys, map(ne, o.values(), n.values()))
        events = []
        for k in changed:
            a, b = _parse(o[k]), _parse(n[k])
            if a != b:
                events.append(Event(type=MODIFIED, key=k, item=b, old=a))
        return events
    return _diff_keyed(list(o), list(o.values()), keys, list(n.values()))


def _diff_keyed(
    old_keys: list[str], o: Sequence[msgspec.Raw], new_keys: list[str], n: Sequence[msgspec.Raw]
) -> list[Event]:
    """As ``diff._diff_mappings``: new order first (ADDED / MODIFIED), then DELETED in old order."""
    where = dict(zip(old_keys, range(len(old_keys)), strict=True))
    events: list[Event] = []
    append = events.append
    for j, k in enumerate(new_keys):
        i = where.get(k)
        if i is None:
            append(Event(type=ADDED, key=k, item=_parse(n[j])))
        elif o[i] != n[j]:
            a, b = _parse(o[i]), _parse(n[j])
            if a != b:
                append(Event(type=MODIFIED, key=k, item=b, old=a))
    kept = set(new_keys)
    for i, k in enumerate(old_keys):
        if k not in kept:
            append(Event(type=DELETED, key=k, item=_parse(o[i])))
    return events
