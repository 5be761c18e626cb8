"""A watched URI of one connection: who watches it, how its last read stands, who takes a read.

Pure, a part of :class:`~asyncai_watch.core.feed.Feed`: one :class:`Watched` per URI that has
watchers or joiners. The watchers began (they take every read: :class:`Deliver`); the joiners
wait for the URI's next read, or for a listen. Its :class:`Sync` is moved only by
:data:`SYNC_MOVES`::

    UNREAD ──read──► CURRENT ──lost──► STALE ──covered──► CURRENT
    (a read while no acknowledged listen covers it: "read uncovered" ──► STALE)

The handoff of a read: the joiners begin on it (:class:`Begin`, ``fresh`` when it makes the
baseline) and become watchers; a failed first read or subscription turns them away
(:class:`StartFailed`); a failed later read is :class:`ReadFailed` for the watchers, and the
joiners begin on the current state. Joining twice or leaving a URI never joined raises
:class:`~asyncai_watch.core.feed_state.FeedStateError`.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable
from typing import Final, Generic, TypeVar

import attrs

from asyncai_watch.core.feed_actions import Action, Begin, Deliver, ReadFailed, StartFailed
from asyncai_watch.core.feed_state import FeedStateError, by_event

__all__ = ["CURRENT", "STALE", "SYNC_MOVES", "UNREAD", "Sync", "Watched"]

W = TypeVar("W", bound=Hashable)
P = TypeVar("P")


class Sync(enum.Enum):
    """How a watched URI's last read stands to its subscription."""

    __hash__ = object.__hash__  # members are singletons; the table lookups skip Enum.__hash__ (Python code)

    UNREAD = "unread"  # not read yet: its first read makes the baseline
    CURRENT = "current"  # read, and its listen held since: updates keep it current
    STALE = "stale"  # lost its listen: read again once a listen holds it again


# Module constants: an enum member looked up on its class costs ~10x a global on Python 3.11.
UNREAD: Final = Sync.UNREAD
CURRENT: Final = Sync.CURRENT
STALE: Final = Sync.STALE


SYNC_MOVES: Final[dict[tuple[Sync, str], Sync]] = {
    # A read finished while an acknowledged listen covers the URI, or while none does.
    (UNREAD, "read"): CURRENT,
    (CURRENT, "read"): CURRENT,
    (STALE, "read"): STALE,
    (UNREAD, "read uncovered"): STALE,
    (CURRENT, "read uncovered"): STALE,
    (STALE, "read uncovered"): STALE,
    # Its listen ended and no other acknowledged one covers it.
    (UNREAD, "lost"): UNREAD,
    (CURRENT, "lost"): STALE,
    (STALE, "lost"): STALE,
    # An acknowledged listen covers it again (the read that follows brings it up to date).
    (UNREAD, "covered"): UNREAD,
    (CURRENT, "covered"): CURRENT,
    (STALE, "covered"): CURRENT,
}
"""Every move of a URI's :class:`Sync` state (each event is legal in each state)."""
_ON: Final = by_event(SYNC_MOVES)


@attrs.define(eq=False, slots=True)
class Watched(Generic[W]):
    """One watched URI (see the module docstring)."""

    watchers: set[W] = attrs.field(factory=set)  # began: they get every read
    joiners: list[W] = attrs.field(factory=list)  # wait for the next read (or for a listen)
    sync: Sync = UNREAD

    def moved(self, event: str) -> None:
        self.sync = SYNC_MOVES[self.sync, event]

    @property
    def baseline(self) -> bool:
        """Read at least once since it was first watched."""
        return self.sync is not UNREAD

    @property
    def stale(self) -> bool:
        return self.sync is STALE

    def join(self, watcher: W, uri: str, *, at_once: bool) -> bool:
        """``watcher`` joins ``uri``: ``at_once``, it begins now on the current state (a watcher),
        else it waits for the next read (a joiner). Answers ``at_once``."""
        if watcher in self.watchers or watcher in self.joiners:
            raise FeedStateError(f"Feed.watch: {watcher!r} already watches {uri!r}")
        if at_once:
            self.watchers.add(watcher)
        else:
            self.joiners.append(watcher)
        return at_once

    def leave(self, watcher: W, uri: str) -> None:
        """``watcher`` leaves ``uri``: it began there, or was still waiting to."""
        if watcher in self.watchers:
            self.watchers.discard(watcher)
        elif watcher in self.joiners:
            self.joiners.remove(watcher)
        else:
            raise FeedStateError(f"Feed.unwatch: {watcher!r} does not watch {uri!r}")

    def admit(self) -> tuple[W, ...]:
        """The joiners begin: they are watchers from now on (answers them, in join order)."""
        joiners = tuple(self.joiners)
        self.joiners.clear()
        self.watchers.update(joiners)
        return joiners

    def turn_away(self) -> tuple[W, ...]:
        """The joiners never begin (their start failed): answers them, forgotten here."""
        joiners = tuple(self.joiners)
        self.joiners.clear()
        return joiners

    def read(self, uri: str, payload: P | None, *, covered: bool, out: list[Action[W, P]]) -> None:
        """A read of ``uri`` finished (``covered``: an acknowledged listen holds it now): the
        watchers take it, the joiners begin on it (``fresh`` when it makes the baseline)."""
        fresh = self.sync is UNREAD
        # Its listen may have gone while it was read: then it is read again once covered.
        self.sync = _ON["read" if covered else "read uncovered"][self.sync]
        if self.watchers and not fresh:
            out.append(Deliver(uri, tuple(self.watchers), payload))
        if self.joiners:
            out.append(Begin(uri, self.admit(), fresh=fresh))

    def read_failed(self, uri: str, error: str, out: list[Action[W, P]]) -> bool:
        """A read of ``uri`` failed with ``error``. Its first: the joiners are turned away. A later
        one: the watchers hear it, the joiners begin on the current state. Answers whether it was
        a later one (the URI has a baseline)."""
        if self.sync is UNREAD:
            self.fail_start(uri, error, out)
            return False
        if self.watchers:
            out.append(ReadFailed(uri, error, tuple(self.watchers)))
        if self.joiners:
            out.append(Begin(uri, self.admit(), fresh=False))
        return True

    def fail_start(self, uri: str, reason: str, out: list[Action[W, P]]) -> None:
        """The subscription or read that was to make the baseline failed: the joiners never begin."""
        if self.joiners and self.sync is UNREAD:
            out.append(StartFailed(uri, reason, self.turn_away()))

    def give_up(self, uri: str, reason: str, out: list[Action[W, P]]) -> None:
        """Resubscribing gave up: the joiners never begin, the watchers are gone (they hear
        :class:`~asyncai_watch.core.feed_actions.GaveUp`, for every URI at once)."""
        if self.joiners:
            out.append(StartFailed(uri, reason, self.turn_away()))
        self.watchers.clear()
