"""A watched URI (``core/watched.py``), driven directly: who takes a read, how a start fails,
the Sync moves, and the inputs that make no sense.

Scenarios first, then a hypothesis state machine against a model of what it must guarantee.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from asyncai_watch.core.feed_actions import Begin, Deliver, ReadFailed, StartFailed
from asyncai_watch.core.feed_state import FeedStateError
from asyncai_watch.core.watched import SYNC_MOVES, Sync, Watched

URI = "memo://notes/a"


def test_the_first_read_begins_the_joiners_fresh_and_delivers_to_nobody() -> None:
    entry: Watched[str] = Watched()
    assert entry.join("w1", URI, at_once=False) is False
    entry.join("w2", URI, at_once=False)
    out: list[Any] = []
    entry.read(URI, "events", covered=True, out=out)
    assert out == [Begin(URI, ("w1", "w2"), fresh=True)]
    assert entry.sync is Sync.CURRENT
    assert entry.watchers == {"w1", "w2"}
    assert not entry.joiners


def test_a_later_read_goes_to_the_watchers_and_begins_the_joiners_on_it() -> None:
    entry: Watched[str] = Watched()
    entry.join("w1", URI, at_once=False)
    entry.read(URI, None, covered=True, out=[])
    entry.join("w2", URI, at_once=False)
    out: list[Any] = []
    entry.read(URI, "events", covered=True, out=out)
    assert out == [Deliver(URI, ("w1",), "events"), Begin(URI, ("w2",), fresh=False)]


def test_a_watcher_that_joins_at_once_is_delivered_the_next_read() -> None:
    entry: Watched[str] = Watched()
    entry.join("w1", URI, at_once=False)
    entry.read(URI, None, covered=True, out=[])
    assert entry.join("w2", URI, at_once=True) is True
    out: list[Any] = []
    entry.read(URI, "events", covered=True, out=out)
    assert len(out) == 1
    assert isinstance(out[0], Deliver)
    assert set(out[0].watchers) == {"w1", "w2"}


def test_a_read_no_listen_covers_leaves_the_uri_stale_until_covered() -> None:
    entry: Watched[str] = Watched()
    entry.join("w1", URI, at_once=False)
    entry.read(URI, None, covered=False, out=[])
    assert entry.stale
    assert entry.baseline
    entry.moved("covered")
    assert entry.sync is Sync.CURRENT


def test_a_failed_first_read_turns_the_joiners_away() -> None:
    entry: Watched[str] = Watched()
    entry.join("w1", URI, at_once=False)
    out: list[Any] = []
    assert entry.read_failed(URI, "boom", out) is False
    assert out == [StartFailed(URI, "boom", ("w1",))]
    assert not entry.joiners
    assert not entry.watchers
    assert entry.sync is Sync.UNREAD


def test_a_failed_later_read_is_heard_by_the_watchers_and_the_joiners_begin() -> None:
    entry: Watched[str] = Watched()
    entry.join("w1", URI, at_once=False)
    entry.read(URI, None, covered=True, out=[])
    entry.join("w2", URI, at_once=False)
    out: list[Any] = []
    assert entry.read_failed(URI, "boom", out) is True
    assert out == [ReadFailed(URI, "boom", ("w1",)), Begin(URI, ("w2",), fresh=False)]


def test_a_failed_subscription_turns_away_only_joiners_waiting_for_the_baseline() -> None:
    fresh: Watched[str] = Watched()
    fresh.join("w1", URI, at_once=False)
    out: list[Any] = []
    fresh.fail_start(URI, "refused", out)
    assert out == [StartFailed(URI, "refused", ("w1",))]

    read: Watched[str] = Watched()
    read.join("w1", URI, at_once=False)
    read.read(URI, None, covered=True, out=[])
    read.join("w2", URI, at_once=False)
    out = []
    read.fail_start(URI, "refused", out)
    assert out == []
    assert read.joiners == ["w2"]  # it begins on the next read


def test_giving_up_turns_the_joiners_away_and_forgets_the_watchers() -> None:
    entry: Watched[str] = Watched()
    entry.join("w1", URI, at_once=False)
    entry.read(URI, None, covered=True, out=[])
    entry.join("w2", URI, at_once=False)
    out: list[Any] = []
    entry.give_up(URI, "gone", out)
    assert out == [StartFailed(URI, "gone", ("w2",))]
    assert not entry.watchers
    assert not entry.joiners


def test_joining_twice_or_leaving_a_uri_never_joined_raises() -> None:
    entry: Watched[str] = Watched()
    entry.join("w1", URI, at_once=False)
    with pytest.raises(FeedStateError, match=r"Feed.watch: 'w1' already watches 'memo://notes/a'"):
        entry.join("w1", URI, at_once=True)
    with pytest.raises(FeedStateError, match=r"Feed.unwatch: 'w2' does not watch 'memo://notes/a'"):
        entry.leave("w2", URI)
    entry.leave("w1", URI)
    assert not entry.joiners


def test_every_sync_event_is_legal_in_every_state() -> None:
    events = {"read", "read uncovered", "lost", "covered"}
    assert set(SYNC_MOVES) == set(itertools.product(Sync, events))


WATCHERS = ["w1", "w2", "w3"]


class WatchedMachine(RuleBasedStateMachine):
    """:class:`Watched` against a model: who began, who waits, whether a baseline was read."""

    @initialize()
    def setup(self) -> None:
        self.entry: Watched[str] = Watched()
        self.began: set[str] = set()
        self.waiting: list[str] = []
        self.read_once = False

    @rule(w=st.sampled_from(WATCHERS), at_once=st.booleans())
    def join(self, w: str, at_once: bool) -> None:
        if w in self.began or w in self.waiting:
            with pytest.raises(FeedStateError):
                self.entry.join(w, URI, at_once=at_once)
            return
        self.entry.join(w, URI, at_once=at_once)
        if at_once:
            self.began.add(w)
        else:
            self.waiting.append(w)

    @rule(w=st.sampled_from(WATCHERS))
    def leave(self, w: str) -> None:
        if w not in self.began and w not in self.waiting:
            with pytest.raises(FeedStateError):
                self.entry.leave(w, URI)
            return
        self.entry.leave(w, URI)
        self.began.discard(w)
        if w in self.waiting:
            self.waiting.remove(w)

    @rule(covered=st.booleans())
    def read(self, covered: bool) -> None:
        out: list[Any] = []
        self.entry.read(URI, "p", covered=covered, out=out)
        expected: list[Any] = []
        if self.began and self.read_once:
            expected.append(("deliver", self.began))
        if self.waiting:
            expected.append(("begin", tuple(self.waiting), not self.read_once))
        got = [
            ("deliver", set(a.watchers)) if isinstance(a, Deliver) else ("begin", a.watchers, a.fresh)
            for a in out
        ]
        assert got == expected
        self.began.update(self.waiting)
        self.waiting.clear()
        self.read_once = True

    @rule()
    def read_fails(self) -> None:
        out: list[Any] = []
        later = self.entry.read_failed(URI, "boom", out)
        assert later is self.read_once
        if not self.read_once:
            assert out == ([StartFailed(URI, "boom", tuple(self.waiting))] if self.waiting else [])
        else:
            kinds = [type(a) for a in out]
            assert kinds == [ReadFailed] * bool(self.began) + [Begin] * bool(self.waiting)
            self.began.update(self.waiting)
        self.waiting.clear()

    @rule(event=st.sampled_from(["lost", "covered"]))
    def coverage_changes(self, event: str) -> None:
        before = self.entry.sync
        self.entry.moved(event)
        assert self.entry.sync is SYNC_MOVES[before, event]

    @invariant()
    def matches_the_model(self) -> None:
        if not hasattr(self, "entry"):
            return
        assert self.entry.watchers == self.began
        assert self.entry.joiners == self.waiting
        assert self.entry.baseline is self.read_once
        assert not (self.entry.watchers & set(self.entry.joiners))


TestWatchedMachine = WatchedMachine.TestCase
TestWatchedMachine.settings = settings(max_examples=100, stateful_step_count=30, deadline=None)
