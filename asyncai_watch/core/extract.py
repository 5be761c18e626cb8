"""A URI's reads turned into events: the extraction half of a watch, pure and picklable.

Every watch on one URI of one connection shares one :class:`Extraction`: the feed
(:mod:`asyncai_watch.core.feed`) begins them all at the same read, so their positions agree,
and each read is parsed, diffed or sequenced once for all of them; they differ only from the
filter on (:mod:`asyncai_watch.core.deliver`). An extraction is a plain value (it pickles), so
the shell may run it in the large-body worker process instead of on its event loop.

It is fed in this order, and an input out of order raises :class:`ExtractionStateError`::

    shape = x.baseline(body)      # the first read (raises BaselineError when it cannot be one)
    pending = x.read(body)        # each later read -> events + final notes
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Final

import attrs

from asyncai_watch.core.changes import annotate
from asyncai_watch.core.echo import clip
from asyncai_watch.core.eventlog import Position, Sequencer
from asyncai_watch.core.events import Event, Shape, is_json_mime_type, shape_for_mime_type
from asyncai_watch.core.jsontext import JsonError, parse_json
from asyncai_watch.core.limits import Limits
from asyncai_watch.core.state_index import StateIndex, diff_reads
from asyncai_watch.errors import BaselineError

__all__ = ["MAX_MERGED_EVENTS", "Body", "Extraction", "ExtractionStateError", "Pending"]

MAX_MERGED_EVENTS: Final = 8192
"""The most events a watch keeps from reads its filter has not taken yet."""


class ExtractionStateError(RuntimeError):
    """An extraction was fed out of order (a read before its baseline): a bug in the shell."""


@attrs.frozen
class Body:
    """One read of a URI.

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
    index: StateIndex | None = None

    @classmethod
    def of(cls, text: str, mime_type: str | None = None) -> Body:
        """What an extraction takes from a read: a state's items indexed (:class:`StateIndex`;
        parsed when the body is not a JSON list or object), an event log parsed."""
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
        """A body left unparsed (a large one: parsed where its events are extracted)."""
        return cls(text, mime_type, None, None, parsed=False)

    def parsed_body(self) -> Body:
        return self if self.parsed else Body.of(self.text, self.mime_type)

    @property
    def state(self) -> Any:
        """A state read as :func:`diff_reads` takes it: the index, else the value."""
        return self.index if self.index is not None else self.value


@attrs.frozen
class Pending:
    """One read's result before filtering: the events to turn into lines, the notes that are
    already final lines (a body error, ``+N more``), and the no-op ``MODIFIED`` events dropped
    (logged, never shown)."""

    events: tuple[Event, ...] = ()
    notes: tuple[str, ...] = ()
    noops: tuple[Event, ...] = ()
    summary: tuple[str, ...] = ()
    """Final lines shown before the events: how many changed, when not all are shown."""

    def then(self, newer: Pending, *, max_events: int) -> Pending:
        """This read's result followed by ``newer``'s, for a watch still busy with this one: every
        event of both, oldest first, at most ``max_events`` (the oldest beyond it are counted in a
        note, never dropped silently)."""
        events = self.events + newer.events
        notes = self.notes + newer.notes
        if len(events) > max_events:
            notes += (f"+{len(events) - max_events} earlier changes not shown (a slow filter fell behind)",)
            events = events[-max_events:]
        return Pending(events, notes, self.noops + newer.noops, self.summary + newer.summary)


@attrs.define(eq=False)
class Extraction:
    """The extraction state of one URI: its shape, and its last state read or its event-log
    sequencer (see the module docstring)."""

    uri: str
    limits: Limits = attrs.field(factory=Limits)
    shape: Shape | None = None
    """``None`` until the baseline."""
    _json: bool = False  # the mimeType promises JSON: a body that is not JSON is an error
    _previous: Any = None
    _sequencer: Sequencer = attrs.field(factory=Sequencer)

    @property
    def position(self) -> Position | None:
        """Where an event log's reader stands (``(log_id, newest seq)``), for the next read's
        ``after``; ``None`` for a state, or a log that names no ``log_id``."""
        seq = self._sequencer
        if self.shape != "event-log" or seq.log_id is None or seq.last_seq is None:
            return None
        return seq.log_id, seq.last_seq

    @property
    def last_text(self) -> str | None:
        """The text of the last state read taken (``None`` for an event log)."""
        previous = self._previous
        return previous.text if isinstance(previous, StateIndex) else None

    def baseline(self, body: Body) -> Shape:
        """Take the first read; raises :class:`~asyncai_watch.errors.BaselineError` when it cannot be one."""
        if self.shape is not None:
            raise ExtractionStateError(f"Extraction.baseline: {clip(self.uri)} already has a baseline")
        body = body.parsed_body()
        shape = shape_for_mime_type(body.mime_type)
        if shape == "event-log":
            error = self._sequencer.prime(body.value if body.error is None else body.text)
            if error is not None:
                raise BaselineError(
                    f"{clip(self.uri)} is an event log ({body.mime_type}) but its body is not valid: "
                    f"{error.message}"
                )
        else:
            self._json = is_json_mime_type(body.mime_type)
            if self._json and body.error is not None:
                raise BaselineError(
                    f"{clip(self.uri)} is served as {body.mime_type} but its body is not JSON "
                    f"({body.error}); a state resource's body must parse as its mimeType says"
                )
            self._previous = body.state
        self.shape = shape
        return shape

    def read(self, body: Body) -> Pending:
        """The events of a later read (annotated; no-op ``MODIFIED`` kept apart) and its notes."""
        if self.shape is None:
            raise ExtractionStateError(f"Extraction.read: {clip(self.uri)} has no baseline yet")
        body = body.parsed_body()
        limit = self.limits.events_per_update
        if self.shape == "event-log":
            # Annotated in the sequencer's own pass (one Event per event instead of two).
            fed, unchanged = self._sequencer.feed_annotated(
                body.value if body.error is None else body.text, limit=limit
            )
            error = (f"ERROR {fed.error.message}",) if fed.error is not None else ()
            return Pending(tuple(fed.events), error, tuple(unchanged))
        if self._json and body.error is not None:
            # Keep the last good baseline: the next good read diffs against it.
            return Pending(
                notes=(
                    f"ERROR {clip(self.uri)} is served as {body.mime_type} but this read is not JSON ({body.error})",
                )
            )
        events = diff_reads(self._previous, body.state)
        self._previous = body.state
        summary: tuple[str, ...] = ()
        if len(events) > limit:
            # First, so that a notice's line cap cannot hide how big the change was.
            kinds = ", ".join(f"{kind} {n:,}" for kind, n in Counter(ev.type for ev in events).items())
            summary = (
                f"{len(events):,} changes in one update ({kinds}); the first {limit:,} follow, the rest "
                f"are not shown (Limits.events_per_update={limit:,})",
            )
            events = events[:limit]
        kept: list[Event] = []
        noops: list[Event] = []
        for ev in events:
            annotated = annotate(ev)
            if annotated is None:
                noops.append(ev)
            else:
                kept.append(annotated)
        return Pending(tuple(kept), (), tuple(noops), summary)
