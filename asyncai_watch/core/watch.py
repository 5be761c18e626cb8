"""One watch's whole life as a pure object: reads in, notices out.

Sans-IO, in the shape of h11's ``Connection``: nothing here awaits, reads a clock or logs.
The async shell (:mod:`asyncai_watch.runtime.manager`) owns the I/O and calls these methods with
``now`` passed in; every answer is a value.

A :class:`Watch` is fed in this order::

    shape = w.baseline(body)                   # the first read (raises WatchError if unusable)
    pending = w.read(body)                     # each later read -> events + ready lines
    lines = w.lines(pending, filter_results)   # filter outcomes (or the default line) -> lines
    deadline = w.add(lines, now)               # dedupe + debounce -> when a notice is due
    notice = w.due(now)                        # the notice once its deadline passed, else None
    notices = w.failed(reason, attempts)       # the subscription gave up: pending + failure notice

``baseline``/``read`` touch only the extraction state (baseline value or event-log
sequencer, the event counter) and ``add``/``due``/``failed`` only the delivery state
(dedupe, debounce, the notice counter), so a shell may run a large read's ``read`` in a
worker thread while it keeps flushing due notices of the same watch.

The subscription a watch rides on is shared by every watch on the same URI, so its
resubscribe policy is a pure object of its own, :class:`Resubscribe`: "the subscription
ended" in, "retry after N s" or "give up after N attempts" out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import compress
from typing import Any, Final, Literal, Protocol

import attrs

from asyncai_watch.core.backoff import Backoff
from asyncai_watch.core.changes import annotate
from asyncai_watch.core.debounce import Debouncer
from asyncai_watch.core.dedupe import Deduper
from asyncai_watch.core.eventlog import Sequencer
from asyncai_watch.core.events import Event, Shape, is_json_mime_type, shape_for_mime_type
from asyncai_watch.core.jsontext import JsonError, parse_json
from asyncai_watch.core.limits import Limits
from asyncai_watch.core.lines import default_line
from asyncai_watch.core.notice import SOURCE_WATCH, Notice
from asyncai_watch.core.state_index import StateIndex, diff_reads
from asyncai_watch.errors import WatchError

__all__ = [
    "Body",
    "EventRecord",
    "FilterResult",
    "GiveUp",
    "Line",
    "Pending",
    "Resubscribe",
    "Retry",
    "Watch",
]

Outcome = Literal["noop", "dropped", "error", "kept", "deduped"]
"""What became of one event (the ``watch.event`` log record's ``outcome``)."""

_MISSING: Final[Any] = object()

MAX_MERGED_EVENTS: Final = 8192
"""The most events a watch keeps from positioned reads it has not processed yet."""


@attrs.frozen
class Body:
    """One read of a URI, parsed once for every watch on it.

    ``value`` is the parsed JSON, or the text itself when it is not JSON; ``error`` says why
    it is not (``None`` when it parsed). A state read made by :meth:`of` has its ``index``
    instead (``value`` stays ``None``): its items are parsed only when they changed.
    """

    text: str
    mime_type: str | None = None
    value: Any = None
    error: str | None = None
    parsed: bool = True
    """``False`` for a :meth:`raw` body: parsed by whoever extracts its events."""
    delta: bool = False
    """An event-log read made with the reader's position: only the events after it."""
    index: StateIndex | None = None

    @classmethod
    def of(cls, text: str, mime_type: str | None = None) -> Body:
        """What a watch takes from a read: a state's items indexed (:class:`StateIndex`; parsed
        when the body is not a JSON list or object), an event log parsed."""
        if shape_for_mime_type(mime_type) == "state":
            index = StateIndex.of(text)
            if index is not None:
                return cls(text, mime_type, index=index)
        return cls.parse(text, mime_type)

    @classmethod
    def parse(cls, text: str, mime_type: str | None = None) -> Body:
        """``text`` parsed whole."""
        try:
            return cls(text, mime_type, parse_json(text), None)
        except JsonError as exc:
            return cls(text, mime_type, text, str(exc))

    @classmethod
    def raw(cls, text: str, mime_type: str | None = None) -> Body:
        """A body left unparsed (a large one: it is parsed where its events are extracted)."""
        return cls(text, mime_type, None, None, parsed=False)

    def parsed_body(self) -> Body:
        return self if self.parsed else Body.of(self.text, self.mime_type)

    @property
    def state(self) -> Any:
        """A state read as :func:`diff_reads` takes it: the index, else the value."""
        return self.index if self.index is not None else self.value

    def then(self, newer: Body, *, max_events: int = MAX_MERGED_EVENTS) -> Body:
        """What a watch that has not taken this body yet should take once ``newer`` came too.

        Usually ``newer`` alone (the newest read of a state is the net change, and a whole event
        log's newest read holds the older events). A positioned event-log read holds only what
        came after the previous one, so two of those are joined: the events of both, oldest
        first, at most ``max_events`` (the oldest are dropped, and the sequencer reports them as
        a GAP, never silently)."""
        if not (newer.delta and self.parsed and newer.parsed):
            return newer
        old, new = self.value, newer.value
        if not (isinstance(old, Mapping) and isinstance(new, Mapping)):
            return newer
        if old.get("log_id") != new.get("log_id"):
            return newer
        events = [*(old.get("events") or ()), *(new.get("events") or ())][-max_events:]
        return attrs.evolve(newer, value={**new, "events": events})


@attrs.frozen
class Line:
    """One notice line: its text, its dedupe key (``None``: never deduped) and its event
    (``None`` for error and summary lines)."""

    text: str
    key: str | None = None
    event: Event | None = None


@attrs.frozen
class EventRecord:
    """What happened to one event, for the shell's ``watch.event`` log record."""

    event: Event
    outcome: Outcome
    line: str | None = None


@attrs.frozen
class Pending:
    """A read's result before filtering: the events to turn into lines, the lines that are
    already final (body errors, "+N more"), and the records of events dropped as no-ops."""

    events: tuple[Event, ...] = ()
    lines: tuple[Line, ...] = ()
    records: tuple[EventRecord, ...] = ()


# Fast constructors for the per-event hot path (one Line and one EventRecord per event), as
# events.make_event: the slots set directly, without attrs' __init__ (no validators or
# converters here, so the result is the same object).
_new_object = object.__new__
_set_line_text, _set_line_key, _set_line_event = (Line.__dict__[a.name].__set__ for a in attrs.fields(Line))
_set_record_event, _set_record_outcome, _set_record_line = (
    EventRecord.__dict__[a.name].__set__ for a in attrs.fields(EventRecord)
)


def _make_line(text: str, key: str | None, event: Event | None) -> Line:
    line: Line = _new_object(Line)
    _set_line_text(line, text)
    _set_line_key(line, key)
    _set_line_event(line, event)
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
class Watch:
    """One watch: baseline, events, lines, dedupe and debounce (see the module docstring)."""

    name: str
    uri: str
    limits: Limits = attrs.field(factory=Limits)
    shape: Shape | None = None
    events: int = 0
    """Events that reached a filter or a default line (no-ops excluded)."""
    notices: int = 0
    remote: bool = False
    """Extraction happens elsewhere (a worker process, for large bodies): :meth:`baseline` and
    :meth:`read` run there, and this object keeps delivery and the counters."""
    last_text: str | None = None
    """The text of the last read taken here (what a worker takes over as its baseline)."""
    _json: bool = False  # the mimeType promises JSON: a body that is not JSON is an error
    _previous: Any = None
    _sequencer: Sequencer = attrs.field(factory=Sequencer)
    _deduper: Deduper = attrs.field(factory=Deduper)
    _debouncer: Debouncer = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        limits = self.limits
        self._debouncer = Debouncer(
            quiet=limits.debounce_quiet, max_wait=limits.debounce_max_wait, max_lines=limits.lines_per_notice
        )

    # -- extraction -----------------------------------------------------------------------------

    def baseline(self, body: Body) -> Shape:
        """Take the first read; raises :class:`WatchError` when it cannot be a baseline."""
        body = body.parsed_body()
        self.last_text = body.text
        shape = shape_for_mime_type(body.mime_type)
        if shape == "event-log":
            error = self._sequencer.prime(body.value if body.error is None else body.text)
            if error is not None:
                raise WatchError(
                    f"watch_start: {self.uri} is an event log ({body.mime_type}) but its body is not valid: "
                    f"{error.message}"
                )
        else:
            self._json = is_json_mime_type(body.mime_type)
            if self._json and body.error is not None:
                raise WatchError(
                    f"watch_start: {self.uri} is served as {body.mime_type} but its body is not JSON "
                    f"({body.error}); a state resource's body must parse as its mimeType says"
                )
            self._previous = body.state
        self.shape = shape
        return shape

    def read(self, body: Body) -> Pending:
        """The events of a later read (annotated; no-op ``MODIFIED`` dropped) and its final lines."""
        body = body.parsed_body()
        self.last_text = body.text
        limit = self.limits.events_per_update
        lines: list[Line] = []
        if self.shape == "event-log":
            # Annotated in the sequencer's own pass (one Event per event instead of two).
            fed, unchanged = self._sequencer.feed_annotated(
                body.value if body.error is None else body.text, limit=limit
            )
            if fed.error is not None:
                lines.append(Line(f"ERROR {fed.error.message}"))
            self.events += len(fed.events)
            noop_records = tuple(EventRecord(ev, "noop") for ev in unchanged)
            return Pending(tuple(fed.events), tuple(lines), noop_records)
        elif self._json and body.error is not None:
            # Keep the last good baseline: the next good read diffs against it.
            return Pending(
                lines=(
                    Line(
                        f"ERROR {self.uri} is served as {body.mime_type} but this read is not JSON ({body.error})"
                    ),
                )
            )
        else:
            events = diff_reads(self._previous, body.state)
            self._previous = body.state
            if len(events) > limit:
                lines.append(
                    Line(f"+{len(events) - limit} more changes not shown (Limits.events_per_update={limit})")
                )
                events = events[:limit]
        kept: list[Event] = []
        noops: list[EventRecord] = []
        for ev in events:
            annotated = annotate(ev)
            if annotated is None:
                noops.append(EventRecord(ev, "noop"))
            else:
                kept.append(annotated)
        self.events += len(kept)
        return Pending(tuple(kept), tuple(lines), tuple(noops))

    def moved(self, shape: Shape) -> None:
        """Extraction moved to a worker that took over with ``shape``: drop the local state."""
        self.remote, self.shape = True, shape
        self._previous = self.last_text = None
        self._sequencer = Sequencer()

    def extracted(self, pending: Pending) -> Pending:
        """Count the events of a read extracted elsewhere."""
        self.events += len(pending.events)
        return pending

    def read_failed(self, error: str) -> Pending:
        """A read after an update signal failed: one error line, the baseline kept."""
        return Pending(lines=(Line(f"ERROR reading {self.uri}: {error}"),))

    def lines(
        self, pending: Pending, results: Sequence[FilterResult] | None = None
    ) -> tuple[list[Line], list[EventRecord]]:
        """``pending``'s lines: each event's filter result (``results``, one per event) or,
        without a filter, its default line; then the final lines. Records the filter's drops
        and errors (kept lines are recorded by :meth:`add`, once dedupe has had its say)."""
        records = list(pending.records)
        out: list[Line] = []
        if results is None:
            out = [_make_line(default_line(ev), ev.key, ev) for ev in pending.events]
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
        out.extend(pending.lines)
        return out, records

    def filter_failed(self, pending: Pending, error: str) -> tuple[list[Line], list[EventRecord]]:
        """The filter session failed as a whole for ``pending``: one error line for its events."""
        text = f"filter error: {error}"
        records = [*pending.records, *(EventRecord(ev, "error", text) for ev in pending.events)]
        return [Line(text), *pending.lines], records

    # -- delivery -------------------------------------------------------------------------------

    def add(self, lines: Sequence[Line], now: float, *, records: bool = True) -> list[EventRecord]:
        """Dedupe ``lines`` and queue the rest for the next notice; returns the records of the
        events the lines stand for (``kept`` or ``deduped``), or ``[]`` with ``records=False``
        (nobody logs them). :attr:`deadline` says when next."""
        texts = [line.text for line in lines]
        admitted = self._deduper.admit_all([line.key for line in lines], texts)
        self._debouncer.add_all(list(compress(texts, admitted)), now)
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
        """The notice of the pending lines once :attr:`deadline` has passed at ``now``."""
        text = self._debouncer.flush_due(now)
        return None if text is None else self._notice(text)

    def flush(self) -> Notice | None:
        """The notice of everything pending, now (``None`` when nothing is)."""
        text = self._debouncer.flush()
        return None if text is None else self._notice(text)

    def failed(self, reason: str, attempts: int) -> list[Notice]:
        """The watch gives up: what was pending, then the failure notice."""
        text = (
            f"watch {self.name!r} failed: its subscription to {self.uri} ended and "
            f"{attempts} resubscribe attempts failed (last: {reason}). It no longer delivers changes; "
            f'start it again with watch_start(name="{self.name}", uri="{self.uri}", ...) or drop it with '
            f'watch_stop(name="{self.name}").'
            if attempts
            else f"watch {self.name!r} failed: {reason}. Start it again with watch_start or drop it with watch_stop."
        )
        pending = self.flush()
        return [*([pending] if pending is not None else []), self._notice(text, failed="true")]

    def _notice(self, text: str, **extra: str) -> Notice:
        self.notices += 1
        return Notice(SOURCE_WATCH, text, meta={"name": self.name, "uri": self.uri, **extra})


@attrs.frozen
class Retry:
    """Resubscribe after ``delay`` seconds; ``attempt`` counts from 1 since the last healthy one."""

    delay: float
    attempt: int


@attrs.frozen
class GiveUp:
    """The attempts are used up; ``attempts`` failed in a row."""

    attempts: int


@attrs.define
class Resubscribe:
    """The resubscribe policy of one (shared) subscription.

    A subscription counts as healthy once an update arrived on it or it stayed up
    ``healthy_after`` seconds; a healthy one resets the failure count. Each ending asks
    :attr:`backoff` for the next delay: 1, 2, 4, 8, 16 s by default, then give up.
    """

    backoff: Backoff = attrs.field(factory=Backoff)
    healthy_after: float = 16.0
    failures: int = 0
    _opened: float | None = None
    _healthy: bool = False
    _resubscribing: bool = False

    @classmethod
    def for_limits(cls, limits: Limits) -> Resubscribe:
        return cls(backoff=limits.backoff, healthy_after=limits.resubscribe_max)

    def subscribed(self, now: float) -> int:
        """The subscription is up (acknowledged and read); returns its attempt number (0: the first)."""
        self._opened = now
        self._healthy = False
        return self.failures + 1 if self._resubscribing else 0

    def updated(self) -> None:
        """An update arrived: the subscription works."""
        self._healthy = True

    def ended(self, now: float) -> Retry | GiveUp:
        """The subscription ended (or an attempt failed before it was up): retry or give up."""
        opened, self._opened = self._opened, None
        if self._healthy or (opened is not None and now - opened >= self.healthy_after):
            self.failures = 0
        elif self._resubscribing:
            self.failures += 1
        self._healthy = False
        self._resubscribing = True
        delay = self.backoff.delay(self.failures)
        if delay is None:
            return GiveUp(self.failures)
        return Retry(delay, self.failures + 1)
