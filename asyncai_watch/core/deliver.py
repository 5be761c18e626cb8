"""A watch's own half: filter outcomes -> lines -> dedupe -> debounce -> notice. Pure.

Each watch has one :class:`Delivery`; the extraction it shares with the other watches on its
URI (:mod:`asyncai_watch.core.extract`) hands it a :class:`~asyncai_watch.core.extract.Pending`
per read. Nothing here awaits, reads a clock or logs; ``now`` is passed in::

    lines, records = d.lines(pending)            # default lines (no filter) ...
    lines, records = d.lines(pending, results)   # ... or the filter's outcome per event
    records += d.add(lines, now)                 # dedupe + debounce; d.deadline says when
    notice = d.due(now)                          # the notice once its deadline passed, else None
    notices = d.failed(reason, attempts)         # the subscription gave up: pending + failure notice
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import compress
from typing import Any, Final, Literal, Protocol

import attrs

from asyncai_watch.core.debounce import Debouncer, notice_text
from asyncai_watch.core.dedupe import Deduper
from asyncai_watch.core.echo import clip
from asyncai_watch.core.events import DELETED, ERROR, GAP, Event
from asyncai_watch.core.extract import Pending
from asyncai_watch.core.limits import Limits
from asyncai_watch.core.lines import default_line
from asyncai_watch.core.netchange import WHOLE_VALUE as _WHOLE
from asyncai_watch.core.netchange import is_reducible, net_change
from asyncai_watch.core.notice import FAILED, NOTE, SOURCE_WATCH, Notice, NoticeEvent, NoticeEvents

__all__ = ["Delivery", "EventRecord", "FilterResult", "Line", "Outcome", "notice_event"]

Outcome = Literal["noop", "dropped", "error", "kept", "deduped"]
"""What became of one event (the ``watch.event`` log record's ``outcome``)."""


@attrs.frozen
class Line:
    """One notice line: its text, its dedupe key (``None``: never deduped) and its event
    (``None`` for error and summary lines); ``default`` when it is the event's default line
    (not a filter's), so a reduced event's line can be made again."""

    text: str
    key: str | None = None
    event: Event | None = None
    default: bool = False


@attrs.frozen
class EventRecord:
    """What happened to one event, for the shell's ``watch.event`` log record."""

    event: Event
    outcome: Outcome
    line: str | None = None


# Fast constructors for the per-event hot path (one Line and one EventRecord per event), as
# events.make_event: the slots set directly, without attrs' __init__ (no validators or
# converters here, so the result is the same object).
_new_object = object.__new__
_set_line_text, _set_line_key, _set_line_event, _set_line_default = (
    Line.__dict__[a.name].__set__ for a in attrs.fields(Line)
)
_set_record_event, _set_record_outcome, _set_record_line = (
    EventRecord.__dict__[a.name].__set__ for a in attrs.fields(EventRecord)
)


def _make_line(text: str, key: str | None, event: Event | None, default: bool) -> Line:
    line: Line = _new_object(Line)
    _set_line_text(line, text)
    _set_line_key(line, key)
    _set_line_event(line, event)
    _set_line_default(line, default)
    return line


def _make_record(event: Event, outcome: Outcome, line: str | None) -> EventRecord:
    record: EventRecord = _new_object(EventRecord)
    _set_record_event(record, event)
    _set_record_outcome(record, outcome)
    _set_record_line(record, line)
    return record


class FilterResult(Protocol):
    """One event's filter outcome: a line, a drop (both ``None``) or an error."""

    @property
    def line(self) -> str | None: ...

    @property
    def error(self) -> str | None: ...


@attrs.define(eq=False)
class Delivery:
    """One watch's lines, dedupe, debounce and notices (see the module docstring)."""

    name: str
    uri: str
    limits: Limits = attrs.field(factory=Limits)
    events: int = 0
    """Events that reached a filter or a default line (no-ops excluded)."""
    notices: int = 0
    _deduper: Deduper = attrs.field(factory=Deduper)
    _debouncer: Debouncer = attrs.field(init=False)
    # The window, for the notice's events: its lines in order, a state object's as its id (its
    # first and last line in _objects, all its net change needs); at most
    # Limits.events_per_update entries (the rest counted), so a long burst holds few objects.
    # _repeat: an object came twice (then the notice is made again from the net changes).
    _window: list[Line | str] = attrs.field(init=False, factory=list)
    _objects: dict[str, list[Line]] = attrs.field(init=False, factory=dict)
    _omitted: int = attrs.field(init=False, default=0)
    _repeat: bool = attrs.field(init=False, default=False)

    def __attrs_post_init__(self) -> None:
        limits = self.limits
        self._debouncer = Debouncer(
            quiet=limits.debounce_quiet, max_wait=limits.debounce_max_wait, max_lines=limits.lines_per_notice
        )

    def lines(
        self, pending: Pending, results: Sequence[FilterResult] | None = None
    ) -> tuple[list[Line], list[EventRecord]]:
        """``pending``'s lines: each event's filter result (``results``, one per event) or,
        without a filter, its default line; then the notes. Records the no-ops and the filter's
        drops and errors (kept lines are recorded by :meth:`add`, once dedupe has had its say)."""
        self.events += len(pending.events)
        records = [_make_record(ev, "noop", None) for ev in pending.noops]
        out: list[Line] = [Line(text) for text in pending.summary]
        if results is None:
            out += [_make_line(default_line(ev), ev.key, ev, True) for ev in pending.events]
        else:
            for ev, result in zip(pending.events, results, strict=False):
                if result.error is not None:
                    text = f"filter error: {result.error}"
                    records.append(EventRecord(ev, "error", text))
                    out.append(Line(text))
                elif result.line is None:
                    records.append(EventRecord(ev, "dropped"))
                else:
                    out.append(Line(result.line, ev.key, ev))
        out.extend(Line(note) for note in pending.notes)
        return out, records

    def filter_failed(self, pending: Pending, error: str) -> tuple[list[Line], list[EventRecord]]:
        """The filter failed as a whole for ``pending``: one error line for its events."""
        self.events += len(pending.events)
        text = f"filter error: {error}"
        records = [
            *(_make_record(ev, "noop", None) for ev in pending.noops),
            *(EventRecord(ev, "error", text) for ev in pending.events),
        ]
        return [
            *(Line(s) for s in pending.summary),
            Line(text),
            *(Line(note) for note in pending.notes),
        ], records

    def read_failed(self, error: str) -> list[Line]:
        """A read after an update failed: one error line (the shared state is kept)."""
        return [Line(f"ERROR reading {clip(self.uri)}: {error}")]

    def add(self, lines: Sequence[Line], now: float, *, records: bool = True) -> list[EventRecord]:
        """Dedupe ``lines`` and queue the rest for the next notice; returns the records of the
        events the lines stand for (``kept`` or ``deduped``), or ``[]`` with ``records=False``
        (nobody logs them). :attr:`deadline` says when next."""
        texts = [line.text for line in lines]
        admitted = self._deduper.admit_all([line.key for line in lines], texts)
        kept = list(compress(lines, admitted))
        self._debouncer.add_all([line.text for line in kept], now)
        window, objects, cap = self._window, self._objects, self.limits.events_per_update
        for line in kept:
            ev = line.event
            # is_reducible's first test inline: an event log's events (with fields) never are.
            if ev is not None and not ev.fields and is_reducible(ev):
                obj = _WHOLE if ev.key is None else ev.key
                pair = objects.get(obj)
                if pair is not None:
                    pair[1] = line
                    self._repeat = True
                elif len(window) < cap:
                    objects[obj] = [line, line]
                    window.append(obj)
                else:
                    self._omitted += 1
            elif len(window) < cap:
                window.append(line)
            else:
                self._omitted += 1
        if not records:
            return []
        return [
            _make_record(line.event, "kept" if ok else "deduped", line.text)
            for line, ok in zip(lines, admitted, strict=True)
            if line.event is not None
        ]

    @property
    def deadline(self) -> float | None:
        """When the pending lines are due as a notice; ``None`` when nothing is pending."""
        return self._debouncer.deadline

    def due(self, now: float) -> Notice | None:
        """The notice of the pending lines once :attr:`deadline` has passed at ``now``
        (``None`` too when the window's changes cancel out)."""
        text = self._debouncer.flush_due(now)
        return None if text is None else self._window_notice(text)

    def flush(self) -> Notice | None:
        """The notice of everything pending, now (``None`` when nothing is, or it cancels out)."""
        text = self._debouncer.flush()
        return None if text is None else self._window_notice(text)

    def failed(self, reason: str, attempts: int) -> list[Notice]:
        """The watch gives up: what was pending, then the failure notice."""
        uri = clip(self.uri)
        text = (
            f"watch {self.name!r} failed: its subscription to {uri} ended and "
            f"{attempts} resubscribe attempts failed (last: {reason}). It no longer delivers changes; "
            f'start it again with watch_start(name="{self.name}", uri="{uri}", ...) or drop it with '
            f'watch_stop(name="{self.name}").'
            if attempts
            else f"watch {self.name!r} failed: {reason}. Start it again with watch_start or drop it with watch_stop."
        )
        pending = self.flush()
        event = NoticeEvent(
            type=FAILED,
            watch=self.name,
            uri=self.uri,
            message=reason,
            fields={"attempts": attempts},
            line=text,
        )
        return [*([pending] if pending is not None else []), self._notice(text, (event,), failed="true")]

    def _window_notice(self, text: str) -> Notice | None:
        window, objects, omitted, repeat = self._window, self._objects, self._omitted, self._repeat
        self._window, self._objects, self._omitted, self._repeat = [], {}, 0, False
        kept: list[tuple[Line, Event | None]] = []
        for entry in window:
            if isinstance(entry, Line):
                kept.append((entry, entry.event))
                continue
            first, last = objects[entry]
            if first is last:
                kept.append((first, first.event))
                continue
            assert first.event is not None
            assert last.event is not None
            net = net_change(first.event, last.event)
            if net is not None:
                # Its default line made again, or the filter's last line (it saw the last event).
                kept.append(
                    (_make_line(default_line(net), net.key, net, True) if last.default else last, net)
                )
        if repeat:
            reduced = notice_text([line.text for line, _ in kept], self.limits.lines_per_notice, more=omitted)
            if reduced is None:
                return None  # every change in the window cancelled out
            text = reduced
        name, uri, cap = self.name, self.uri, self.limits.events_per_update

        def make() -> tuple[NoticeEvent, ...]:
            events = [notice_event(name, uri, line.text, ev) for line, ev in kept]
            if omitted:
                note = f"+{omitted} more events not carried (Limits.events_per_update={cap})"
                events.append(NoticeEvent(type=NOTE, watch=name, uri=uri, message=note))
            return tuple(events)

        return self._notice(text, NoticeEvents(make))

    def _notice(self, text: str, events: Sequence[NoticeEvent], **extra: str) -> Notice:
        self.notices += 1
        return Notice(SOURCE_WATCH, text, meta={"name": self.name, "uri": self.uri, **extra}, events=events)


def notice_event(watch: str, uri: str, text: str, ev: Event | None) -> NoticeEvent:
    """The typed event behind one notice line ``text`` (``ev`` ``None``: a line only)."""
    if ev is None:
        typ = ERROR if text.startswith(("ERROR", "filter error")) else NOTE
        return NoticeEvent(type=typ, watch=watch, uri=uri, message=text, line=text)
    fields = ev.fields
    message = text if ev.type in (GAP, ERROR) else fields.get("message") if fields else None
    return NoticeEvent(
        type=ev.type,
        watch=watch,
        uri=uri,
        key=ev.key,
        paths=ev.changed,
        old=ev.item if ev.type == DELETED else ev.old,
        new=ev.new,
        seq=ev.seq,
        time=_server_time(fields) if fields else None,
        message=message if isinstance(message, str) else None,
        fields={k: v for k, v in fields.items() if k not in _GIVEN} if fields else {},
        line=text,
    )


_GIVEN: Final = frozenset({"type", "seq", "key", "object", "old", "new"})
"""An event-log event's fields that :class:`NoticeEvent` carries as its own."""
_TIME_FIELDS: Final = ("time", "timestamp", "at", "received")


def _server_time(fields: Mapping[str, Any]) -> str | int | float | None:
    for name in _TIME_FIELDS:
        value = fields.get(name)
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return value
    return None
