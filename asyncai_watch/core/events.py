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
    "is_json_mime_type",
    "make_event",
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


def _media_type(mime_type: str | None) -> str:
    return mime_type.split(";", 1)[0].strip().lower() if mime_type else ""


def shape_for_mime_type(mime_type: str | None) -> Shape:
    """The read-shape rule: the event-log mimeType, else state."""
    return "event-log" if _media_type(mime_type) == EVENTS_MIME_TYPE else "state"


def is_json_mime_type(mime_type: str | None) -> bool:
    """``application/json`` or any ``+json`` type: a body that promises to be JSON."""
    media = _media_type(mime_type)
    return media == "application/json" or media.endswith("+json")


@attrs.frozen(kw_only=True)
class Event:
    """One change, from a state diff or an event-log read.

    ``key`` is the object's identity (:func:`asyncai_watch.core.identity.item_key`, the same
    rule for state items and event-log objects). ``item`` is the object the event is about:
    the new value for ``ADDED`` / ``MODIFIED`` / ``CHANGED``, the last known value for
    ``DELETED``. ``old`` is the previous value, for ``MODIFIED`` (and the whole-value
    ``CHANGED``) only; ``None`` otherwise. ``fields`` keeps an event-log event's own fields
    verbatim (``seq``, ``object``, ``message``, ...).
    """

    type: str
    key: str | None = None
    item: Any = None
    old: Any = None
    changed: tuple[str, ...] = ()
    seq: int | None = None
    fields: Mapping[str, Any] = attrs.field(factory=dict, hash=False)

    @property
    def new(self) -> Any:
        """The value after the change: ``item``, except ``None`` for ``DELETED``."""
        return None if self.type == DELETED else self.item

    def to_filter_dict(self, *, watch: str, uri: str) -> dict[str, Any]:
        """The ``event`` dict an ``on_event`` filter sees (docs/filters.md, "The event dict")."""
        if self.fields:
            out: dict[str, Any] = dict(self.fields)
        else:
            out = {"key": self.key, "new": self.new, "item": self.item}
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
_set_type, _set_key, _set_item, _set_old, _set_changed, _set_seq, _set_fields = (
    Event.__dict__[a.name].__set__ for a in attrs.fields(Event)
)


def make_event(
    type: str,
    key: str | None,
    item: Any,
    old: Any,
    changed: tuple[str, ...],
    seq: int | None,
    fields: Mapping[str, Any],
) -> Event:
    """``Event(type=..., key=..., ...)`` with every field given, built without ``__init__``."""
    ev: Event = _new_object(Event)
    _set_type(ev, type)
    _set_key(ev, key)
    _set_item(ev, item)
    _set_old(ev, old)
    _set_changed(ev, changed)
    _set_seq(ev, seq)
    _set_fields(ev, fields)
    return ev
