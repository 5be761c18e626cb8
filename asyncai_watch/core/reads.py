"""Read scheduling for one connection: a pure sub-machine of :class:`~asyncai_watch.core.feed.Feed`.

Each tracked URI is in one of three named states, moved only by :data:`MOVES`::

    IDLE ──start──► READING ──finish──► IDLE
    IDLE ──queue──► QUEUED ──start──► READING     (its turn for a read slot came)

plus a ``dirty`` mark: an update while a read is queued or in flight asks for exactly one more
read after it (:meth:`Reads.finish` answers the mark and clears it). At most ``max_reads`` URIs
are READING at once; the rest wait in arrival order (:meth:`Reads.pump` starts them as slots
free up). A failed read may be tried again at a time (:meth:`Reads.retry_at`): a heap of
``(when, uri)`` whose entries go stale when the URI's retry time changes or a read of it is
queued or in flight.

An impossible input (finishing a read never started, forgetting a URI while it is read, tracking
one twice) raises :class:`~asyncai_watch.core.feed_state.FeedStateError`.
"""

from __future__ import annotations

import enum
import heapq
from collections import deque
from typing import Final

import attrs

from asyncai_watch.core.feed_state import FeedStateError, by_event, illegal

__all__ = ["MOVES", "ReadState", "Reads"]


class ReadState(enum.Enum):
    __hash__ = object.__hash__  # members are singletons; the table lookups skip Enum.__hash__ (Python code)
    IDLE = "idle"
    QUEUED = "queued"  # waiting for a read slot
    READING = "reading"  # a read is in flight


# Module constants: an enum member looked up on its class costs ~10x a global on Python 3.11.
_IDLE: Final = ReadState.IDLE
_QUEUED: Final = ReadState.QUEUED
_READING: Final = ReadState.READING


MOVES: Final[dict[tuple[ReadState, str], ReadState]] = {
    (_IDLE, "start"): _READING,
    (_IDLE, "queue"): _QUEUED,
    (_QUEUED, "start"): _READING,
    (_READING, "finish"): _IDLE,
}
"""The legal moves: ``(state, event) -> state``; anything else raises."""
_ON: Final = by_event(MOVES)
_START: Final = _ON["start"]
_QUEUE: Final = _ON["queue"]
_FINISH: Final = _ON["finish"]


@attrs.define(eq=False, slots=True)
class _Entry:
    state: ReadState = _IDLE
    dirty: bool = False  # an update came while queued or reading: read once more after
    failures: int = 0  # reads that failed in a row
    retry_at: float | None = None  # a failed read is tried again then


class Reads:
    """The read state of every tracked URI, the read slots and the retry heap (see the module doc)."""

    def __init__(self, max_reads: int) -> None:
        if type(max_reads) is not int or max_reads < 1:
            raise ValueError(f"Feed: max_reads must be an int >= 1, got {max_reads!r}")
        self.max_reads = max_reads
        self._entries: dict[str, _Entry] = {}
        self._in_flight = 0
        self._waiting: deque[str] = deque()  # QUEUED URIs in arrival order (stale entries skipped)
        self._retries: list[tuple[float, str]] = []  # (when, uri), a heap; stale entries skipped

    # -- what the coordinator asks ------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def state(self, uri: str) -> ReadState:
        return self._entry(uri).state

    def busy(self, uri: str) -> bool:
        """A read of ``uri`` is queued or in flight."""
        entry = self._entries.get(uri)  # inline, not _entry(): the hot paths save a call
        if entry is None:
            raise _untracked(uri)
        return entry.state is not _IDLE

    def reading(self, uri: str) -> bool:
        """A read of ``uri`` is in flight (``False`` for a URI not tracked)."""
        entry = self._entries.get(uri)
        return entry is not None and entry.state is _READING

    def failures(self, uri: str) -> int:
        return self._entry(uri).failures

    # -- inputs -------------------------------------------------------------------------------------

    def track(self, uri: str) -> None:
        """``uri`` is watched from now on (IDLE)."""
        if uri in self._entries:
            raise FeedStateError(f"Reads.track: {uri!r} is already tracked")
        self._entries[uri] = _Entry()

    def untrack(self, uri: str) -> None:
        """Nobody watches ``uri`` any more; a queued read of it is skipped. Not while it is read."""
        entry = self._entry(uri)
        if entry.state is _READING:
            raise FeedStateError(f"Reads.untrack: a read of {uri!r} is in flight")
        del self._entries[uri]

    def start(self, uri: str) -> bool:
        """Read ``uri`` (IDLE): ``True`` when it is READING now (emit a read), ``False`` when it
        waits QUEUED for a slot."""
        entry = self._entries.get(uri)
        if entry is None:
            raise _untracked(uri)
        if self._in_flight < self.max_reads:
            nxt = _START.get(entry.state)
            if nxt is None:
                raise illegal(MOVES, entry.state, "start", "Reads.start", uri)
            entry.state = nxt
            self._in_flight += 1
            return True
        nxt = _QUEUE.get(entry.state)
        if nxt is None:
            raise illegal(MOVES, entry.state, "queue", "Reads.start", uri)
        entry.state = nxt
        self._waiting.append(uri)
        return False

    def mark(self, uri: str) -> None:
        """An update came while ``uri`` is QUEUED or READING: one more read after this one."""
        entry = self._entry(uri)
        if entry.state is _IDLE:
            raise FeedStateError(f"Reads.mark: no read of {uri!r} is queued or in flight (start one)")
        entry.dirty = True

    def request(self, uri: str) -> bool:
        """Read ``uri`` now or once more after the read queued or in flight; ``True`` when a read
        starts now."""
        if self.busy(uri):
            self.mark(uri)
            return False
        return self.start(uri)

    def finish(self, uri: str, *, ok: bool) -> bool:
        """The read of ``uri`` ended (``ok``: it succeeded; that resets the failure count); answers
        whether it owes one more read (the dirty mark, cleared here)."""
        entry = self._entries.get(uri)
        if entry is None or entry.state is not _READING:
            raise FeedStateError(f"Feed: no read of {uri!r} is in flight")
        entry.state = _FINISH[entry.state]  # READING, checked above
        self._in_flight -= 1
        if ok:
            entry.failures = 0
        dirty, entry.dirty = entry.dirty, False
        return dirty

    def failed(self, uri: str) -> int:
        """Count a failed read of ``uri``; answers the failures before it (for the backoff)."""
        entry = self._entry(uri)
        entry.failures += 1
        return entry.failures - 1

    def pump(self) -> list[str]:
        """Start queued reads while slots are free; answers the URIs now READING."""
        started: list[str] = []
        while self._waiting and self._in_flight < self.max_reads:
            uri = self._waiting.popleft()
            entry = self._entries.get(uri)
            if entry is not None and entry.state is _QUEUED:
                self.start(uri)
                started.append(uri)
        return started

    # -- the retry heap -----------------------------------------------------------------------------

    def retry_at(self, uri: str, when: float) -> None:
        """Read ``uri`` (IDLE) again at ``when``, unless a read of it starts first."""
        entry = self._entry(uri)
        if entry.state is not _IDLE:
            raise FeedStateError(f"Reads.retry_at: a read of {uri!r} is queued or in flight")
        entry.retry_at = when
        heapq.heappush(self._retries, (when, uri))

    def clear_retry(self, uri: str) -> None:
        entry = self._entries.get(uri)
        if entry is None:
            raise _untracked(uri)
        entry.retry_at = None

    def next_retry(self) -> tuple[float, str] | None:
        """The earliest retry still due to happen (stale heap entries are dropped on the way)."""
        retries = self._retries
        while retries and self._stale(*retries[0]):
            heapq.heappop(retries)
        return retries[0] if retries else None

    def drop_next_retry(self) -> None:
        """Drop the retry :meth:`next_retry` answered (the coordinator has a reason not to run it)."""
        heapq.heappop(self._retries)

    def _stale(self, when: float, uri: str) -> bool:
        entry = self._entries.get(uri)
        return entry is None or entry.retry_at != when or entry.state is not _IDLE

    def _entry(self, uri: str) -> _Entry:
        entry = self._entries.get(uri)
        if entry is None:
            raise _untracked(uri)
        return entry

    def __repr__(self) -> str:
        return f"<Reads tracked={len(self._entries)} in_flight={self._in_flight}/{self.max_reads}>"


def _untracked(uri: str) -> FeedStateError:
    return FeedStateError(f"Reads: {uri!r} is not tracked")
