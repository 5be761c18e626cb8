"""A burst's state events reduced to each object's net change. Pure.

Within one debounce window, the events of one object (one ``key`` of a state diff, or the
whole value of a text state) reduce to its change from the window's start to its end:

- ``ADDED`` then ``DELETED`` is nothing; ``ADDED`` then ``MODIFIED`` is ``ADDED`` with the last
  value;
- ``MODIFIED`` a→b then b→c is ``MODIFIED`` a→c; a→b then b→a is nothing;
- ``DELETED`` then ``ADDED`` is ``MODIFIED`` (or nothing when the value came back the same);

so a torn read in between (a half-written file read once) vanishes. An object met once keeps
its event as it is. Event-log events are never reduced: each one is a fact the server reported
(a pod that was created and deleted was created and deleted), and ``GAP`` / ``ERROR`` are not
about an object. They pass through in place, as do state events without a key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from asyncai_watch.core.changes import modified_paths
from asyncai_watch.core.events import ADDED, CHANGED, DELETED, MODIFIED, Event, make_event

__all__ = ["WHOLE_VALUE", "is_reducible", "net_change", "net_changes", "net_events"]

_ABSENT: Final = object()
WHOLE_VALUE: Final = "\x00whole value"
"""The object id of a text state's ``CHANGED`` events (the whole value is the one object)."""
_STATE_TYPES: Final = frozenset({ADDED, DELETED, MODIFIED, CHANGED})


def is_reducible(event: Event) -> bool:
    """A state event about one object: a state diff's (no event-log ``fields``) ``ADDED`` /
    ``DELETED`` / ``MODIFIED`` with a key, or a text state's ``CHANGED``."""
    if event.fields or event.type not in _STATE_TYPES:
        return False
    return event.key is not None or event.type == CHANGED


def _object(event: Event) -> str:
    return WHOLE_VALUE if event.key is None else event.key


def _before(event: Event) -> Any:
    typ = event.type
    if typ == ADDED:
        return _ABSENT
    if typ == DELETED:
        return event.item
    return event.old


def _after(event: Event) -> Any:
    return _ABSENT if event.type == DELETED else event.item


def net_change(first: Event, last: Event) -> Event | None:
    """The net change of one object whose window began with ``first`` and ended with ``last``
    (reducible events of the same object), ``None`` when it is nothing."""
    before, after = _before(first), _after(last)
    if before is _ABSENT:
        return None if after is _ABSENT else make_event(ADDED, last.key, after, None, (), None, {})
    if after is _ABSENT:
        return make_event(DELETED, first.key, before, None, (), None, {})
    if first.type == CHANGED:
        return None if before == after else make_event(CHANGED, None, after, before, (), None, {})
    if before == after:
        return None
    changed = modified_paths(before, after)
    # An empty ``changed`` is a change annotate calls a no-op (only bookkeeping fields moved).
    return make_event(MODIFIED, last.key, after, before, changed, None, {}) if changed else None


def net_changes(events: Sequence[Event | None]) -> list[tuple[int, Event | None]]:
    """The window ``events`` (``None`` for an entry with no event) reduced, as ``(index, event)``
    pairs in window order.

    An entry that is not reducible comes back as ``(its index, itself)``. The events of one
    object become one pair at its first event's place, with the index of its *last* event (whose
    line a filtered watch keeps), or none when its net change is nothing. An object met once
    comes back as it was.
    """
    firsts: dict[str, int] = {}
    lasts: dict[str, int] = {}
    for i, ev in enumerate(events):
        if ev is not None and is_reducible(ev):
            obj = _object(ev)
            firsts.setdefault(obj, i)
            lasts[obj] = i
    out: list[tuple[int, Event | None]] = []
    for i, ev in enumerate(events):
        if ev is None or not is_reducible(ev):
            out.append((i, ev))
            continue
        obj = _object(ev)
        if firsts[obj] != i:
            continue
        last = lasts[obj]
        if last == i:
            out.append((i, ev))
            continue
        last_event = events[last]
        assert last_event is not None
        net = net_change(ev, last_event)
        if net is not None:
            out.append((last, net))
    return out


def net_events(events: Sequence[Event]) -> list[Event]:
    """``events`` with each object's events reduced to its net change (see the module docstring)."""
    return [ev for _, ev in net_changes(events) if ev is not None]
