"""Event-log sequencer: read bodies in, each event out at most once, GAPs when seqs were missed.

Pure: no I/O, no clock. A read body is ``{"events": [{"seq": int, "type": str, ...}]}``
(docs/design.md, "Event logs and GAP"). The :class:`Sequencer` remembers the newest ``seq`` it
has seen and, per read:

- delivers the events with ``seq`` above it, sorted by ``seq``, each seq once (a body may
  repeat or reorder events);
- reports a ``GAP`` first when the oldest new seq is beyond last seen + 1 (the server's
  ring dropped events before this reader got to them);
- with ``limit=N`` and more than N new events, keeps the newest N and reports the older
  ones as one ``GAP`` (so a burst costs a bounded amount of work but nothing goes missing
  silently);
- with a body that names ``from_seq`` (a filtered log: it holds every event of the log after
  that seq that concerns the reader, so its seqs skip those filtered out), reports a ``GAP``
  only when ``from_seq`` is beyond last seen (the log no longer held the seqs in between), and
  moves last seen on to the body's ``last_seq`` (how far the server looked);
- treats a read whose newest seq is below the last seen as a server restart: one
  ``GAP`` with ``reason: "reset"``, then the read's events are delivered;
- passes in-band ``ERROR`` events through like any other event;
- never raises on a bad body: a :class:`BodyError` names what was wrong, and the events
  that were well-formed are still delivered.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping
from itertools import islice, repeat
from operator import itemgetter, lt
from typing import Any, Final

import attrs

from asyncai_watch.core.changes import modified_paths
from asyncai_watch.core.events import GAP, MODIFIED, Event, make_event
from asyncai_watch.core.identity import item_key
from asyncai_watch.core.jsontext import JsonError, parse_json

__all__ = [
    "AFTER_META_KEY",
    "GAP_LIMIT",
    "GAP_RESET",
    "GAP_TRUNCATED",
    "BodyError",
    "FeedResult",
    "Position",
    "Sequencer",
    "position",
]

AFTER_META_KEY: Final = "asyncai-watch/events-after"
"""``resources/read`` ``_meta`` key naming a reader's position ``{"log_id": str, "seq": int}``: a
server that knows it answers with the events after it (docs/server-contract.md); one that does
not ignores it and answers the whole log, which is always correct."""

Position = tuple[str, int]
"""An event-log reader's position: the log's ``log_id`` and the newest ``seq`` read."""

# For the C-level passes over a body's events (map/set instead of a Python test per event).
_dict_get: Final = dict.get
_SEQ: Final = repeat("seq")
_TYPE: Final = repeat("type")
_DICT: Final = frozenset({dict})
_INT: Final = frozenset({int})
_STR: Final = frozenset({str})


def position(body: Any) -> Position | None:
    """The position a read leaves its reader at: ``(log_id, newest seq)``, when the body names
    its log (no ``log_id``: the server cannot take a position anyway)."""
    if not isinstance(body, Mapping):
        return None
    mark, log_id = _header(body)
    if log_id is None:
        return None
    events = body.get("events") or ()
    seqs: list[Any] = []
    # All events well-formed (the usual case): C-level passes instead of a test per event.
    if type(events) is list and {*map(type, events)} == _DICT:
        seqs = list(map(_dict_get, events, _SEQ))
    if {*map(type, seqs)} != _INT:
        seqs = [ev["seq"] for ev in events if type(ev) is dict and type(ev.get("seq")) is int]
    top = max([*seqs, *([mark] if mark is not None else [])], default=None)
    return None if top is None else (log_id, top)


GAP_TRUNCATED: Final = "truncated"
"""GAP reason: the server's ring no longer held those seqs when this reader read."""
GAP_LIMIT: Final = "limit"
"""GAP reason: more than ``limit`` new events in one read; the older ones were skipped."""
GAP_RESET: Final = "reset"
"""GAP reason: seqs went backwards (the server restarted); what happened in between is unknown."""

_EXPECTED: Final = 'expected {"events": [{"seq": <int>, "type": <str>, ...}, ...]}'
_MAX_PROBLEMS: Final = 3


@attrs.frozen
class BodyError:
    """A read body that is not a valid event log; ``message`` says what was wrong."""

    message: str


@attrs.frozen
class FeedResult:
    """One read's outcome: the events to deliver (GAPs first) and a body error, if any."""

    events: list[Event]
    error: BodyError | None = None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _header(data: Mapping[str, Any] | None) -> tuple[int | None, str | None]:
    """The body's optional ``last_seq`` (an int >= 0) and ``log_id`` (a non-empty str)."""
    if data is None:
        return None, None
    mark, log_id = data.get("last_seq"), data.get("log_id")
    return (
        mark if type(mark) is int and mark >= 0 else None,
        log_id if type(log_id) is str and log_id else None,
    )


def _parse(
    body: str | bytes | bytearray | Mapping[str, Any],
) -> tuple[list[tuple[int, Any]], BodyError | None, Mapping[str, Any] | None]:
    """``(seq, event)`` pairs of the well-formed events in body order, the first problems,
    and the body's top-level object (for ``last_seq`` / ``log_id``; None when not an object)."""
    data: Any
    if isinstance(body, str | bytes | bytearray):
        try:
            data = parse_json(body)
        except JsonError as exc:
            return [], BodyError(f"event-log body is not JSON ({exc}); {_EXPECTED}"), None
    else:
        data = body
    if not isinstance(data, Mapping):
        return [], BodyError(f"event-log body is a JSON {_json_type(data)}; {_EXPECTED}"), None
    if "events" not in data:
        keys = ", ".join(sorted(map(str, data))[:10]) or "none"
        return [], BodyError(f'event-log body has no "events" key (keys: {keys}); {_EXPECTED}'), data
    raw = data["events"]
    if not isinstance(raw, list):
        return (
            [],
            BodyError(f'event-log "events" is a JSON {_json_type(raw)}, not an array; {_EXPECTED}'),
            data,
        )
    # The common all-valid body in C-level passes (a Python test per event costs more than the
    # rest of the sequencer); the loop below only runs when one fails, to name the problems.
    if raw and {*map(type, raw)} == _DICT:
        seqs: list[Any] = list(map(_dict_get, raw, _SEQ))
        if {*map(type, seqs)} == _INT and {*map(type, map(_dict_get, raw, _TYPE))} == _STR:
            return list(zip(seqs, raw, strict=True)), None, data
    out: list[tuple[int, Any]] = []
    problems: list[str] = []
    for i, ev in enumerate(raw):
        if type(ev) is dict or isinstance(ev, Mapping):
            seq = ev.get("seq")
            if type(seq) is int and type(ev.get("type")) is str:
                out.append((seq, ev))
                continue
        problems.append(_problem(i, ev))
    if not problems:
        return out, None, data
    shown = "; ".join(problems[:_MAX_PROBLEMS])
    more = f"; and {len(problems) - _MAX_PROBLEMS} more" if len(problems) > _MAX_PROBLEMS else ""
    return out, BodyError(f"{shown}{more}. Those events were skipped; {_EXPECTED}"), data


def _problem(i: int, ev: Any) -> str:
    if not isinstance(ev, Mapping):
        return f"events[{i}] is a JSON {_json_type(ev)}, not an object"
    if "seq" not in ev:
        return f'events[{i}] has no "seq"'
    seq = ev["seq"]
    if type(seq) is not int:
        return f"events[{i}].seq is {_short(seq)} (a JSON {_json_type(seq)}), not an integer"
    if "type" not in ev:
        return f'events[{i}] (seq {seq}) has no "type"'
    return f"events[{i}].type is {_short(ev['type'])} (a JSON {_json_type(ev['type'])}), not a string"


def _gap(reason: str, from_seq: int | None, to_seq: int | None, missed: int | None, **extra: Any) -> Event:
    fields: dict[str, Any] = {
        "type": GAP,
        "from_seq": from_seq,
        "to_seq": to_seq,
        "missed": missed,
        "reason": reason,
        **extra,
    }
    return Event(type=GAP, fields=fields)


class Sequencer:
    """At-most-once delivery per ``seq`` over stateless event-log reads (see the module docstring)."""

    __slots__ = ("last_seq", "log_id")

    def __init__(self, last_seq: int | None = None) -> None:
        self.last_seq: int | None = last_seq
        """The newest seq seen; ``None`` before any event was seen (then nothing counts as missed)."""
        self.log_id: str | None = None
        """The body's ``log_id`` when the server sends one: a new id means a new log (a restart)."""

    def prime(self, body: str | bytes | bytearray | Mapping[str, Any]) -> BodyError | None:
        """Take the baseline read: remember its newest seq, deliver nothing.

        The newest seq is the highest event ``seq``, or the body's optional top-level
        ``last_seq`` (the server's high-water mark) when that is higher: with it, an empty
        log still gives a point to measure a GAP from. A body with neither leaves
        ``last_seq`` as it was, so the next read's events are all new and none is reported
        missed (seqs need not start at 1). The body's ``log_id``, if any, is remembered.
        """
        items, error, data = _parse(body)
        marks = [seq for seq, _ in items]
        mark, log_id = _header(data)
        if mark is not None:
            marks.append(mark)
        if marks:
            self.last_seq = max(marks)
        if log_id is not None:
            self.log_id = log_id
        return error

    def feed(
        self, body: str | bytes | bytearray | Mapping[str, Any], *, limit: int | None = None
    ) -> FeedResult:
        """The events of one read that were not delivered before, GAPs first."""
        events, new, error = self._take(body, limit)
        append = events.append
        make = make_event
        for seq, ev in new:
            obj = ev.get("object")
            typ = ev["type"]
            append(make(typ, _key(obj), obj, ev.get("old") if typ == MODIFIED else None, (), seq, ev))
        return FeedResult(events, error)

    def feed_annotated(
        self, body: str | bytes | bytearray | Mapping[str, Any], *, limit: int | None = None
    ) -> tuple[FeedResult, list[Event]]:
        """:meth:`feed` with :func:`~asyncai_watch.core.changes.annotate` applied in the same pass:
        the result holds the annotated events that are not no-ops, and the no-op ``MODIFIED``
        events (as :meth:`feed` delivers them) come apart, in order. Builds one Event per event,
        where ``feed`` then ``annotate`` build two: this is the watch's per-event hot path."""
        events, new, error = self._take(body, limit)
        append = events.append
        make = make_event
        noops: list[Event] = []
        for seq, ev in new:
            obj = ev.get("object")
            # _key's usual answer inline (a call per event costs more than the test).
            key: str | None = None
            if type(obj) is dict:
                meta = obj.get("metadata")
                if type(meta) is dict:
                    uid = meta.get("uid")
                    if type(uid) is str and uid:
                        key = uid
            if key is None:
                key = item_key(obj)
            typ = ev["type"]
            if typ != MODIFIED:
                append(make(typ, key, obj, None, (), seq, ev))
                continue
            old = ev.get("old")
            if old is None and (ev and "old" not in ev):
                # No "old" sent: annotate passes such an event through as it is.
                append(make(typ, key, obj, None, (), seq, ev))
            elif changed := modified_paths(old, obj):
                append(make(typ, key, obj, old, changed, seq, ev))
            else:
                noops.append(make(typ, key, obj, old, (), seq, ev))
        return FeedResult(events, error), noops

    def _take(
        self, body: str | bytes | bytearray | Mapping[str, Any], limit: int | None
    ) -> tuple[list[Event], list[tuple[int, Any]], BodyError | None]:
        """One read's GAPs, its new ``(seq, event)`` items (at most ``limit``, by seq) and its body
        error; moves :attr:`last_seq` past the new items."""
        if limit is not None and (type(limit) is not int or limit < 1):
            raise ValueError(f"Sequencer.feed: limit must be a positive int or None, got {limit!r}")
        items, error, data = _parse(body)
        restarted = False
        if data is not None and "log_id" in data:
            mark, log_id = _header(data)
            if log_id is not None and log_id != self.log_id:
                # A new log behind the same URI (the server restarted): its seqs say nothing
                # about ours, even when they already ran past our last one.
                restarted = self.log_id is not None
                self.log_id = log_id
                if restarted and not items:
                    previous, self.last_seq = self.last_seq, mark
                    gap = _gap(GAP_RESET, None, None, None, previous_seq=previous, first_seq=None)
                    return [gap], [], error
        covered = data.get("from_seq") if data is not None else None
        if type(covered) is int and self.last_seq is not None and not restarted:
            return self._take_sparse(items, covered, data, error, limit)
        if not items:
            return [], [], error
        items = _sorted_unique(items)
        last = self.last_seq
        gaps: list[Event] = []
        hole_from: int | None = None
        hole_missed = 0
        if last is None:
            new = items
        elif restarted or items[-1][0] < last:
            # A new log_id, or seqs that went backwards: the server's log started over. Everything
            # in this read is new to us; what happened between our last seq and the restart is unknown.
            gaps.append(_gap(GAP_RESET, None, None, None, previous_seq=last, first_seq=items[0][0]))
            new = items
        else:
            new = items[bisect_right(items, last, key=_first) :]
            if not new:
                return [], [], error
            if new[0][0] > last + 1:
                hole_from, hole_missed = last + 1, new[0][0] - last - 1
        if limit is not None and len(new) > limit:
            dropped, new = new[:-limit], new[-limit:]
            start = hole_from if hole_from is not None else dropped[0][0]
            gaps.append(_gap(GAP_LIMIT, start, dropped[-1][0], hole_missed + len(dropped), limit=limit))
        elif hole_from is not None:
            kept = data.get("retention") if data is not None else None
            extra = {"retention": kept} if type(kept) is str and kept else {}
            gaps.append(_gap(GAP_TRUNCATED, hole_from, new[0][0] - 1, hole_missed, **extra))
        self.last_seq = new[-1][0]
        return gaps, new, error

    def _take_sparse(
        self,
        items: list[tuple[int, Any]],
        covered: int,
        data: Mapping[str, Any] | None,
        error: BodyError | None,
        limit: int | None,
    ) -> tuple[list[Event], list[tuple[int, Any]], BodyError | None]:
        """:meth:`_take` for a body holding every event after seq ``covered`` that concerns this
        reader: skipped seqs were filtered out, not lost; only a ``covered`` beyond last seen is."""
        last = self.last_seq
        assert last is not None
        mark, _ = _header(data)
        new = _sorted_unique(items) if items else []
        if new and new[-1][0] < last and (mark is None or mark < last):
            return self._take({k: v for k, v in (data or {}).items() if k != "from_seq"}, limit)
        new = new[bisect_right(new, last, key=_first) :]
        gaps: list[Event] = []
        if covered > last:
            kept = data.get("retention") if data is not None else None
            extra = {"retention": kept} if type(kept) is str and kept else {}
            gaps.append(_gap(GAP_TRUNCATED, last + 1, covered, covered - last, **extra))
        if limit is not None and len(new) > limit:
            dropped, new = new[:-limit], new[-limit:]
            gaps.append(_gap(GAP_LIMIT, dropped[0][0], dropped[-1][0], len(dropped), limit=limit))
        self.last_seq = max([last, covered, *([mark] if mark is not None else []), *(s for s, _ in new[-1:])])
        return gaps, new, error


def _key(obj: Any) -> str | None:
    """:func:`item_key`, its usual answer first: a Kubernetes object's non-empty string
    ``metadata.uid``; anything else gets the full rules."""
    if type(obj) is dict:
        meta = obj.get("metadata")
        if type(meta) is dict:
            uid = meta.get("uid")
            if type(uid) is str and uid:
                return uid
    return item_key(obj)


_first: Final = itemgetter(0)


def _sorted_unique(items: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
    """Sorted by seq, first occurrence of each seq kept; the common already-sorted case is one pass."""
    seqs = list(map(_first, items))
    if all(map(lt, seqs, islice(seqs, 1, None))):
        return items
    items = sorted(items, key=_first)  # stable: a repeated seq keeps its first occurrence
    out = [items[0]]
    for item in items[1:]:
        if item[0] != out[-1][0]:
            out.append(item)
    return out
