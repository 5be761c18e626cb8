"""The event value that flows from a read body to a filter, and the dict the filter sees."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

import attrs

__all__ = [
    "ADDED",
    "CHANGED",
    "DELETED",
    "ERROR",
    "EVENTS_MIME_TYPE",
    "GAP",
    "MODIFIED",
    "Event",
    "Shape",
    "shape_for_mime_type",
]

EVENTS_MIME_TYPE: Final = "application/vnd.asyncai.events+json"
"""A resource read with this mimeType is an event log; anything else is state."""

ADDED: Final = "ADDED"
DELETED: Final = "DELETED"
MODIFIED: Final = "MODIFIED"
CHANGED: Final = "CHANGED"  # a text (non-JSON-container) state replaced as a whole
GAP: Final = "GAP"  # event-log seqs were skipped: the filter may have missed events
ERROR: Final = "ERROR"  # in-band source failure, or a malformed read body

Shape = Literal["state", "event-log"]


def shape_for_mime_type(mime_type: str | None) -> Shape:
    """The read-shape rule: the event-log mimeType, else state."""
    if mime_type is not None and mime_type.split(";", 1)[0].strip().lower() == EVENTS_MIME_TYPE:
        return "event-log"
    return "state"


@attrs.frozen(kw_only=True)
class Event:
    """One change, from a state diff or an event-log read.

    ``key`` is the object's identity: the item key of a state diff, or for an
    event-log object its ``metadata.uid`` / ``namespace/name`` (see
    :func:`asyncai_watch.diff.item_key`). ``fields`` keeps an event-log event's
    own fields verbatim (``seq``, ``object``, ``message``, ...).
    """

    type: str
    key: str | None = None
    old: Any = None
    new: Any = None
    changed: tuple[str, ...] = ()
    seq: int | None = None
    fields: Mapping[str, Any] = attrs.field(factory=dict, hash=False)

    def to_filter_dict(self, *, watch: str, uri: str) -> dict[str, Any]:
        """The ``event`` dict an ``on_event`` filter sees (docs/filters.md)."""
        if self.fields:
            out: dict[str, Any] = dict(self.fields)
        else:
            # State diff: ``item`` is the object the event is about (the last
            # known one for DELETED), so a filter can read it without caring about type.
            out = {"key": self.key, "new": self.new, "item": self.old if self.type == DELETED else self.new}
        out["watch"] = watch
        out["uri"] = uri
        out["type"] = self.type
        out["old"] = self.old
        out["changed"] = list(self.changed)
        if self.seq is not None:
            out["seq"] = self.seq
        return out


# A fast constructor for the hot paths (the event-log sequencer and annotate build one or two
# Events per event): attrs' generated __init__ goes through type.__call__ and a keyword call,
# about twice the cost of setting the slots directly. Same fields, no defaults: every
# argument is given. The class has no validators or converters, so the result is identical.
_new_object = object.__new__
_set_type, _set_key, _set_old, _set_new, _set_changed, _set_seq, _set_fields = (
    Event.__dict__[a.name].__set__ for a in attrs.fields(Event)
)


def make_event(
    type: str,
    key: str | None,
    old: Any,
    new: Any,
    changed: tuple[str, ...],
    seq: int | None,
    fields: Mapping[str, Any],
) -> Event:
    """``Event(type=..., key=..., ...)`` with every field given, built without ``__init__``."""
    ev: Event = _new_object(Event)
    _set_type(ev, type)
    _set_key(ev, key)
    _set_old(ev, old)
    _set_new(ev, new)
    _set_changed(ev, changed)
    _set_seq(ev, seq)
    _set_fields(ev, fields)
    return ev
