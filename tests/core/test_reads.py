"""Read scheduling (``core/reads.py``), driven directly: named states, the cap, the dirty mark,
the retry heap, and the inputs that make no sense in a state.

Scenarios first, then a hypothesis state machine against a model of what it must guarantee.
"""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import assume, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from asyncai_watch.core.feed_state import FeedStateError
from asyncai_watch.core.reads import MOVES, Reads, ReadState


def test_reads_past_the_cap_wait_their_turn_in_arrival_order() -> None:
    reads = Reads(max_reads=1)
    for uri in "abc":
        reads.track(uri)
    assert reads.start("a") is True
    assert reads.start("b") is False
    assert reads.start("c") is False
    assert [reads.state(u) for u in "abc"] == [ReadState.READING, ReadState.QUEUED, ReadState.QUEUED]
    assert reads.pump() == []  # no slot free
    reads.finish("a", ok=True)
    assert reads.pump() == ["b"]
    reads.finish("b", ok=True)
    assert reads.pump() == ["c"]


def test_an_update_during_a_read_owes_exactly_one_more_read() -> None:
    reads = Reads(max_reads=2)
    reads.track("a")
    assert reads.request("a") is True
    assert reads.request("a") is False  # marked dirty
    assert reads.request("a") is False  # still one mark
    assert reads.finish("a", ok=True) is True
    assert reads.state("a") is ReadState.IDLE
    assert reads.request("a") is True
    assert reads.finish("a", ok=True) is False


def test_a_queued_read_of_a_uri_nobody_watches_any_more_is_skipped() -> None:
    reads = Reads(max_reads=1)
    for uri in "ab":
        reads.track(uri)
    reads.start("a")
    reads.start("b")
    reads.untrack("b")
    reads.finish("a", ok=True)
    assert reads.pump() == []
    assert reads.in_flight == 0


def test_a_retry_is_dropped_once_a_read_of_the_uri_starts_or_the_time_changes() -> None:
    reads = Reads(max_reads=1)
    reads.track("a")
    reads.retry_at("a", 5.0)
    assert reads.next_retry() == (5.0, "a")
    reads.start("a")
    assert reads.next_retry() is None  # being read: the retry is stale
    reads.finish("a", ok=False)
    reads.retry_at("a", 7.0)
    reads.clear_retry("a")
    assert reads.next_retry() is None


def test_failures_count_in_a_row_and_a_good_read_resets_them() -> None:
    reads = Reads(max_reads=1)
    reads.track("a")
    for n in range(3):
        reads.start("a")
        reads.finish("a", ok=False)
        assert reads.failed("a") == n
    reads.start("a")
    reads.finish("a", ok=True)
    assert reads.failures("a") == 0


@pytest.mark.parametrize(
    ("setup", "call", "match"),
    [
        ([], lambda r: r.finish("a", ok=True), "no read of 'a' is in flight"),
        (["start"], lambda r: r.start("a"), "'start' is not possible in state READING"),
        (["start"], lambda r: r.untrack("a"), "in flight"),
        (["start"], lambda r: r.retry_at("a", 1.0), "queued or in flight"),
        ([], lambda r: r.mark("a"), "no read of 'a' is queued or in flight"),
        ([], lambda r: r.track("a"), "already tracked"),
        ([], lambda r: r.state("nope"), "'nope' is not tracked"),
    ],
)
def test_an_input_that_makes_no_sense_in_the_state_raises(setup: list[str], call: object, match: str) -> None:
    reads = Reads(max_reads=2)
    reads.track("a")
    for step in setup:
        getattr(reads, step)("a")
    with pytest.raises(FeedStateError, match=match):
        call(reads)  # type: ignore[operator]


def test_a_queued_uri_cannot_be_queued_again() -> None:
    reads = Reads(max_reads=1)
    reads.track("a")
    reads.track("b")
    reads.start("a")
    reads.start("b")
    with pytest.raises(FeedStateError, match="'queue' is not possible in state QUEUED"):
        reads.start("b")


def test_the_table_lists_every_legal_move() -> None:
    assert MOVES == {
        (ReadState.IDLE, "start"): ReadState.READING,
        (ReadState.IDLE, "queue"): ReadState.QUEUED,
        (ReadState.QUEUED, "start"): ReadState.READING,
        (ReadState.READING, "finish"): ReadState.IDLE,
    }


def test_max_reads_is_checked() -> None:
    with pytest.raises(ValueError, match="max_reads must be an int >= 1, got 0"):
        Reads(max_reads=0)


# --- any interleaving -----------------------------------------------------------------------------

URIS = ["a", "b", "c", "d"]


class ReadsMachine(RuleBasedStateMachine):
    """:class:`Reads` against a model: a set in flight, a FIFO of waiting URIs, a dirty set."""

    @initialize(max_reads=st.integers(1, 3))
    def setup(self, max_reads: int) -> None:
        self.reads = Reads(max_reads)
        self.cap = max_reads
        self.tracked: set[str] = set()
        self.flying: set[str] = set()
        self.waiting: deque[str] = deque()
        self.dirty: set[str] = set()
        self.now = 0.0
        self.retry: dict[str, float] = {}

    def started(self, uris: list[str]) -> None:
        for uri in uris:
            assert uri not in self.flying, "two reads of one URI in flight"
            self.flying.add(uri)
            self.waiting.remove(uri)
            self.retry.pop(uri, None)

    @rule(uri=st.sampled_from(URIS))
    def track(self, uri: str) -> None:
        if uri in self.tracked:
            with pytest.raises(FeedStateError):
                self.reads.track(uri)
            return
        self.reads.track(uri)
        self.tracked.add(uri)

    @rule(uri=st.sampled_from(URIS))
    def untrack(self, uri: str) -> None:
        if uri not in self.tracked or uri in self.flying:
            with pytest.raises(FeedStateError):
                self.reads.untrack(uri)
            return
        self.reads.untrack(uri)
        self.tracked.discard(uri)
        self.dirty.discard(uri)
        self.retry.pop(uri, None)
        if uri in self.waiting:
            self.waiting.remove(uri)

    @rule(uri=st.sampled_from(URIS))
    def request(self, uri: str) -> None:
        assume(uri in self.tracked)
        busy = uri in self.flying or uri in self.waiting
        now = self.reads.request(uri)
        if busy:
            assert not now
            self.dirty.add(uri)
        elif len(self.flying) < self.cap:
            assert now
            self.flying.add(uri)
            self.retry.pop(uri, None)
        else:
            assert not now
            self.waiting.append(uri)
            self.retry.pop(uri, None)

    @precondition(lambda self: bool(self.flying))
    @rule(data=st.data(), ok=st.booleans(), later=st.booleans())
    def finish(self, data: st.DataObject, ok: bool, later: bool) -> None:
        uri = data.draw(st.sampled_from(sorted(self.flying)))
        self.flying.discard(uri)
        assert self.reads.finish(uri, ok=ok) is (uri in self.dirty)
        self.dirty.discard(uri)
        if not ok and later:
            self.reads.retry_at(uri, self.now + 1.0)
            self.retry[uri] = self.now + 1.0
        started = self.reads.pump()
        expected = []
        while self.waiting and len(self.flying) + len(expected) < self.cap:
            expected.append(self.waiting.popleft())
        assert started == expected
        for uri in started:
            self.flying.add(uri)
            self.retry.pop(uri, None)

    @rule(uri=st.sampled_from(URIS))
    def finish_what_is_not_read(self, uri: str) -> None:
        assume(uri not in self.flying)
        with pytest.raises(FeedStateError):
            self.reads.finish(uri, ok=True)

    @rule()
    def time_passes(self) -> None:
        nxt = self.reads.next_retry()
        if not self.retry:
            assert nxt is None
            return
        assert nxt is not None
        assert nxt == min((when, uri) for uri, when in self.retry.items())
        self.now = nxt[0]
        self.reads.drop_next_retry()
        self.reads.clear_retry(nxt[1])
        del self.retry[nxt[1]]

    @invariant()
    def states_match_the_model(self) -> None:
        if not hasattr(self, "reads"):
            return
        assert self.reads.in_flight == len(self.flying) <= self.cap
        for uri in self.tracked:
            state = self.reads.state(uri)
            if uri in self.flying:
                assert state is ReadState.READING
            elif uri in self.waiting:
                assert state is ReadState.QUEUED
            else:
                assert state is ReadState.IDLE
        # Nobody waits while a slot is free.
        assert not self.waiting or len(self.flying) == self.cap


TestReadsMachine = ReadsMachine.TestCase
TestReadsMachine.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)
