"""Resuming a watch after a restart: what it left, what it missed, and the notices that say so.

Pure: no I/O, no clock (``now`` comes in). The shell (:mod:`asyncai_watch.resume_store`) keeps
the :class:`Checkpoint` of each watch on disk and the notices handed to the agent until their
turn completes; this module decides what a restart makes of them (docs/watch-manager.md,
"Resuming"):

- an event-log watch reads from its saved ``(log_id, seq)``: the events after it are what it
  missed (:func:`catch_up_log`); a ``GAP`` only when the server's log restarted (a new
  ``log_id``) or the position fell out of its retention, by the :class:`Sequencer`'s rules;
- a state watch diffs its saved body against the current read (:func:`catch_up_state`): the
  net change while it was away;
- either way the missed changes arrive as one ``while you were away`` notice
  (:func:`away_notice`), and the restore notice says per watch ``resumed`` / ``caught up N
  changes`` / ``fresh baseline`` and why (:meth:`Outcome.line`);
- a notice handed to the agent whose turn did not complete is handed over again, flagged
  (:func:`redelivered`).

What may be saved is decided by :class:`Checkpoints`: a watch's checkpoint moves only past
changes the agent has been handed (or that made no line at all), and writes are batched, so a
busy watch commits at most once per ``window`` seconds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal

import attrs

from asyncai_watch.core.changes import annotate
from asyncai_watch.core.deliver import notice_event
from asyncai_watch.core.echo import clip
from asyncai_watch.core.eventlog import GAP_RESET, GAP_TRUNCATED, Position, Sequencer
from asyncai_watch.core.events import GAP, Event, shape_for_mime_type
from asyncai_watch.core.extract import Body
from asyncai_watch.core.lines import default_line
from asyncai_watch.core.notice import SOURCE_WATCH, Notice
from asyncai_watch.core.state_index import diff_reads

__all__ = [
    "MAX_CATCH_UP_LINES",
    "MAX_SAVED_BODY",
    "REDELIVERED_META_KEY",
    "SAVE_WINDOW",
    "CatchUp",
    "Checkpoint",
    "Checkpoints",
    "Outcome",
    "away_notice",
    "catch_up",
    "catch_up_log",
    "catch_up_state",
    "redelivered",
]

MAX_SAVED_BODY: Final = 1 << 20
"""Bytes of a state watch's last body kept for resuming (1 MiB, UTF-8). A larger body is not
kept: after a restart that watch starts from a fresh baseline and the restore notice says why."""

SAVE_WINDOW: Final = 1.0
"""Seconds a checkpoint waits before it is written (one transaction for every watch that moved
in that time). A crash loses at most this window of checkpoints; what it loses is re-read, never
missed: a checkpoint that stays behind only makes the next start read from further back."""

MAX_CATCH_UP_LINES: Final = 1000
"""Lines a ``while you were away`` notice shows; the rest are counted in its last line."""

REDELIVERED_META_KEY: Final = "redelivered"
"""Notice ``meta`` key, ``"1"`` on a notice handed over again after a restart: the agent was given
it before, but the turn that read it did not complete."""

Kind = Literal["resumed", "caught_up", "fresh"]


@attrs.frozen
class Checkpoint:
    """What one watch leaves for its next start: where its event log's reader stood, or the
    state body the agent has last been told of (at most :data:`MAX_SAVED_BODY` bytes)."""

    uri: str
    position: Position | None = None
    body: str | None = None
    mime_type: str | None = None
    skipped: str | None = None
    """Why no body was kept (too large), for the restore notice."""

    @classmethod
    def of_state(cls, uri: str, text: str, mime_type: str | None, *, cap: int = MAX_SAVED_BODY) -> Checkpoint:
        """A state watch's checkpoint; a body over ``cap`` bytes is not kept, and says so."""
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > cap:
            return cls(
                uri,
                mime_type=mime_type,
                skipped=f"its last body was {size:,} bytes, over the {cap:,} kept for resuming (MAX_SAVED_BODY)",
            )
        return cls(uri, body=text, mime_type=mime_type)


@attrs.frozen
class Outcome:
    """What a restart made of one saved watch."""

    kind: Kind
    changes: int = 0
    reason: str = ""
    gaps: int = 0

    def line(self, name: str, uri: str) -> str:
        """The watch's line in the restore notice."""
        if self.kind == "resumed":
            return f"- {name} {uri}: restored, resumed (nothing changed while the agent was down)"
        if self.kind == "caught_up":
            plural = "change" if self.changes == 1 else "changes"
            gap = f"; {self.reason}" if self.reason else ""
            return f"- {name} {uri}: restored, caught up {self.changes} {plural} made while the agent was down{gap}"
        return f"- {name} {uri}: restored, fresh baseline ({self.reason})"


@attrs.frozen
class CatchUp:
    """One watch's restart: its outcome, and the missed events (GAPs included) in order."""

    outcome: Outcome
    events: tuple[Event, ...] = ()


def catch_up_log(saved: Position | None, body: Any) -> tuple[CatchUp, Sequencer]:
    """An event-log watch's first read after a restart, from its saved position.

    ``body`` is the read (the server answered the ``after`` position, or the whole log: the
    sequencer takes either). Returns the outcome with every event after the position (no
    ``limit``: a catch-up shows every missed event) and the sequencer to go on with.
    """
    sequencer = Sequencer()
    if saved is None:
        error = sequencer.prime(body)
        why = "no position was saved for it" if error is None else f"its read is not valid: {error.message}"
        return CatchUp(Outcome("fresh", reason=why)), sequencer
    sequencer.log_id, sequencer.last_seq = saved
    fed = sequencer.feed(body)
    events = tuple(fed.events)
    gaps = [ev for ev in events if ev.type == GAP]
    changes = len(events) - len(gaps)
    reasons = []
    for gap in gaps:
        fields = gap.fields
        if fields.get("reason") == GAP_RESET:
            reasons.append("the server's log restarted, so what happened before it is unknown (GAP)")
        elif fields.get("reason") == GAP_TRUNCATED:
            reasons.append(
                f"seqs {fields.get('from_seq')}..{fields.get('to_seq')} fell out of the server's retention (GAP)"
            )
    if changes == 0 and not gaps:
        return CatchUp(Outcome("resumed")), sequencer
    return CatchUp(Outcome("caught_up", changes, "; ".join(reasons), len(gaps)), events), sequencer


def catch_up_state(saved: Checkpoint | None, current: Body) -> CatchUp:
    """A state watch's first read after a restart: its saved body diffed against ``current``."""
    if saved is None:
        return CatchUp(Outcome("fresh", reason="no body was saved for it"))
    if saved.body is None:
        return CatchUp(Outcome("fresh", reason=saved.skipped or "no body was saved for it"))
    if shape_for_mime_type(current.mime_type) != "state":
        return CatchUp(Outcome("fresh", reason=f"it is now served as {current.mime_type}, an event log"))
    old = Body.of(saved.body, saved.mime_type)
    if (old.error is not None and current.error is None) or (old.error is None and current.error is not None):
        # One side JSON, the other not: no item-by-item diff; the current read is the baseline.
        return CatchUp(Outcome("fresh", reason="its body changed between JSON and text while it was down"))
    # Annotated as a live read's are (changed paths; no-op MODIFIED dropped).
    events = [
        ev for ev in map(annotate, diff_reads(old.state, current.parsed_body().state)) if ev is not None
    ]
    if not events:
        return CatchUp(Outcome("resumed"))
    return CatchUp(Outcome("caught_up", len(events)), tuple(events))


def catch_up(saved: Checkpoint | None, current: Body) -> CatchUp:
    """:func:`catch_up_log` or :func:`catch_up_state`, by the current read's shape."""
    if shape_for_mime_type(current.mime_type) == "event-log":
        position = saved.position if saved is not None else None
        value = current.parsed_body()
        return catch_up_log(position, value.value if value.error is None else value.text)[0]
    return catch_up_state(saved, current)


def away_notice(
    name: str, uri: str, events: Sequence[Event], *, lines: Iterable[str] | None = None
) -> Notice:
    """The one notice of what a watch missed while the agent was down (``lines``: the watch's own
    lines for ``events``, when its filter made them; the default lines otherwise)."""
    shown = list(lines) if lines is not None else [default_line(ev) for ev in events]
    extra = len(shown) - MAX_CATCH_UP_LINES
    if extra > 0:
        shown = [*shown[:MAX_CATCH_UP_LINES], f"+{extra} more changes not shown (MAX_CATCH_UP_LINES)"]
    plural = "change" if len(events) == 1 else "changes"
    head = f"While you were away ({len(events)} {plural} to {clip(uri)} while the agent was down):"
    # Typed like a live notice's (each with its default line: a filter's lines need not be one per event).
    typed = [notice_event(name, uri, default_line(ev), ev) for ev in events[:MAX_CATCH_UP_LINES]]
    if len(events) > MAX_CATCH_UP_LINES:
        note = f"+{len(events) - MAX_CATCH_UP_LINES} more events not carried (MAX_CATCH_UP_LINES)"
        typed.append(notice_event(name, uri, note, None))
    return Notice(
        SOURCE_WATCH,
        "\n".join([head, *shown]),
        meta={"name": name, "uri": uri, "away": "1"},
        events=tuple(typed),
    )


def redelivered(notice: Notice) -> Notice:
    """``notice`` handed over again after a restart, flagged in its text and ``meta``."""
    meta: Mapping[str, str] = {**notice.meta, REDELIVERED_META_KEY: "1"}
    text = (
        "(Redelivered: this was handed to you before the agent stopped, but the turn that read it "
        f"did not complete.)\n{notice.text}"
    )
    return attrs.evolve(notice, text=text, meta=meta)


@attrs.define
class Checkpoints:
    """The checkpoints waiting to be written, and when (pure: ``now`` comes in).

    :meth:`quiet` records a checkpoint that made no line the agent has not been handed (a read
    whose events were all filtered out or no-ops, or whose notice was handed already); it is
    written at most :attr:`window` seconds later, together with every other one staged by then.
    :meth:`hold` says the watch has lines in its debounce: its checkpoint stays where it was until
    they are handed (:meth:`handed`), so a crash never skips a change the agent was not given.
    """

    window: float = SAVE_WINDOW
    staged: dict[str, Checkpoint | None] = attrs.field(factory=dict)
    """Name -> the checkpoint to write (``None``: delete it, the watch stopped)."""
    deadline: float | None = None
    held: set[str] = attrs.field(factory=set)

    def quiet(self, name: str, checkpoint: Checkpoint, now: float) -> float | None:
        """Stage ``checkpoint`` unless the watch holds undelivered lines; the write deadline."""
        if name in self.held:
            return self.deadline
        return self._stage(name, checkpoint, now)

    def hold(self, name: str) -> None:
        """The watch's debounce holds lines not handed yet: its checkpoint waits for them."""
        self.held.add(name)

    def handed(self, name: str, checkpoint: Checkpoint, now: float) -> float | None:
        """The watch's notice was handed; ``checkpoint`` is where its reader stood then."""
        self.held.discard(name)
        return self._stage(name, checkpoint, now)

    def forget(self, name: str, now: float) -> float | None:
        """The watch stopped: its checkpoint is deleted with the next write."""
        self.held.discard(name)
        return self._stage(name, None, now)

    def _stage(self, name: str, checkpoint: Checkpoint | None, now: float) -> float | None:
        self.staged[name] = checkpoint
        if self.deadline is None:
            self.deadline = now + self.window
        return self.deadline

    def due(self, now: float) -> bool:
        return self.deadline is not None and now >= self.deadline

    def take(self) -> dict[str, Checkpoint | None]:
        """Everything staged, to write in one transaction; nothing is staged after."""
        staged, self.staged, self.deadline = self.staged, {}, None
        return staged
