"""Listen coverage (``core/coverage.py``), driven directly: listens OPENING / SENT / ACKED, what
they hold, grouping, merging, splitting on refusal, and the inputs that make no sense.

Scenarios first, then a hypothesis state machine against a model server's view of the listens.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from asyncai_watch.core.coverage import MERGE_WIDTH, MOVES, Coverage, ListenState
from asyncai_watch.core.feed_actions import CloseListen, OpenListen
from asyncai_watch.core.feed_state import FeedStateError


def test_a_burst_joins_the_listen_not_sent_yet_and_waits_while_it_is_acknowledged() -> None:
    cov = Coverage(mode="listen", max_listen=100)
    cov.watch("a")
    assert cov.cover("cover") == [OpenListen(1, frozenset({"a"}))]
    cov.watch("b")
    assert cov.cover("cover") == []  # into listen 1
    assert cov.send(1) == frozenset({"a", "b"})
    cov.watch("c")
    assert cov.cover("cover") == []  # waits: listen 1 is being acknowledged
    assert cov.held("c") is False
    ack = cov.ack(1, None)
    assert ack.newly == ["a", "b"]
    assert cov.covered("a")
    assert cov.covered("b")
    assert cov.cover("cover") == [OpenListen(2, frozenset({"c"}))]


def test_four_acknowledged_listens_of_one_size_are_merged_before_they_are_closed() -> None:
    cov = Coverage(mode="listen", max_listen=100)
    for i in range(MERGE_WIDTH):
        cov.watch(f"u{i}")
        (opened,) = cov.cover("cover")
        assert isinstance(opened, OpenListen)
        cov.send(opened.id)
        cov.ack(opened.id, None)
    (merged,) = cov.compact()
    assert merged == OpenListen(MERGE_WIDTH + 1, frozenset(f"u{i}" for i in range(MERGE_WIDTH)))
    cov.send(merged.id)
    ack = cov.ack(merged.id, None)
    assert ack.closes == [CloseListen(i) for i in range(1, MERGE_WIDTH + 1)]
    assert ack.newly == []  # they were covered all along
    assert cov.count == 1


def test_a_refused_listen_of_several_uris_is_split_in_halves() -> None:
    cov = Coverage(mode="listen", max_listen=100)
    for uri in "abcd":
        cov.watch(uri)
    cov.cover("cover")
    cov.send(1)
    end = cov.end(1, refused=True)
    assert end.kind == "split"
    assert end.opens == [OpenListen(2, frozenset("ab")), OpenListen(3, frozenset("cd"))]
    cov.send(2)
    assert cov.end(2, refused=True).opens == [OpenListen(4, frozenset("a")), OpenListen(5, frozenset("b"))]
    cov.send(4)
    end = cov.end(4, refused=True)
    assert (end.kind, end.uris) == ("refused", frozenset("a"))


def test_subscribe_mode_keeps_one_listen_per_uri_and_closes_it_when_unwatched() -> None:
    cov = Coverage(mode="subscribe", max_listen=100)
    for uri in "ab":
        cov.watch(uri)
    assert cov.cover("cover") == [OpenListen(1, frozenset("a")), OpenListen(2, frozenset("b"))]
    for i in (1, 2):
        cov.send(i)
        cov.ack(i, None)
    cov.unwatch("a")
    assert cov.compact() == [CloseListen(1)]


def test_speaking_another_mode_changes_how_new_listens_are_grouped() -> None:
    cov = Coverage(mode="listen", max_listen=100)
    cov.speaks("subscribe")
    for uri in "ab":
        cov.watch(uri)
    assert len(cov.cover("cover")) == 2
    with pytest.raises(ValueError, match="mode must be 'listen' or 'subscribe', got 'http'"):
        cov.speaks("http")  # type: ignore[arg-type]


def test_an_input_that_makes_no_sense_raises() -> None:
    cov = Coverage(mode="listen", max_listen=100)
    cov.watch("a")
    cov.cover("cover")
    with pytest.raises(FeedStateError, match="never sent"):
        cov.ack(1, None)
    cov.send(1)
    with pytest.raises(FeedStateError, match="already sent"):
        cov.send(1)
    cov.ack(1, None)
    with pytest.raises(FeedStateError, match="already acknowledged"):
        cov.ack(1, None)
    with pytest.raises(FeedStateError, match="no listen 9 is open"):
        cov.end(9, refused=False)
    with pytest.raises(FeedStateError, match="already watched"):
        cov.watch("a")
    with pytest.raises(FeedStateError, match="'b' is not watched"):
        cov.unwatch("b")


def test_the_table_lists_every_legal_move() -> None:
    assert MOVES == {
        (ListenState.OPENING, "send"): ListenState.SENT,
        (ListenState.SENT, "ack"): ListenState.ACKED,
    }


# --- any interleaving -----------------------------------------------------------------------------

URIS = ["a", "b", "c", "d", "e"]


class CoverageMachine(RuleBasedStateMachine):
    """:class:`Coverage` against the listens as a runner and server see them."""

    @initialize(mode=st.sampled_from(["listen", "subscribe"]))
    def setup(self, mode: str) -> None:
        self.cov = Coverage(mode=mode, max_listen=100)  # type: ignore[arg-type]
        self.mode = mode
        self.watched: set[str] = set()
        self.opening: dict[int, frozenset[str]] = {}  # opened, not sent (the ids)
        self.sent: dict[int, frozenset[str]] = {}
        self.acked: dict[int, frozenset[str]] = {}

    def run(self, actions: list[OpenListen | CloseListen]) -> None:
        for action in actions:
            if isinstance(action, OpenListen):
                assert action.id not in self.opening
                assert action.id not in self.sent
                assert action.id not in self.acked
                if self.mode == "subscribe":
                    assert len(action.uris) == 1
                self.opening[action.id] = action.uris
            else:
                assert action.id in self.acked, "only an acknowledged listen is closed"
                del self.acked[action.id]

    def held(self, uri: str) -> bool:
        return any(uri in uris for uris in (*self.sent.values(), *self.acked.values())) or any(
            uri in self.cov.uris(i) for i in self.opening
        )

    @rule(uri=st.sampled_from(URIS))
    def watch(self, uri: str) -> None:
        assume(uri not in self.watched)
        self.cov.watch(uri)
        self.watched.add(uri)
        self.run(self.cov.cover("cover"))

    @rule(uri=st.sampled_from(URIS))
    def unwatch(self, uri: str) -> None:
        if uri not in self.watched:
            with pytest.raises(FeedStateError):
                self.cov.unwatch(uri)
            return
        self.cov.unwatch(uri)
        self.watched.discard(uri)
        self.run(self.cov.compact())

    @precondition(lambda self: bool(self.opening))
    @rule(data=st.data())
    def send(self, data: st.DataObject) -> None:
        listen = data.draw(st.sampled_from(sorted(self.opening)))
        del self.opening[listen]
        uris = self.cov.send(listen)
        if self.mode == "subscribe":
            assert len(uris) == 1
        self.sent[listen] = uris
        with pytest.raises(FeedStateError, match="already sent"):
            self.cov.send(listen)

    @precondition(lambda self: bool(self.sent))
    @rule(data=st.data(), honor_all=st.booleans())
    def ack(self, data: st.DataObject, honor_all: bool) -> None:
        listen = data.draw(st.sampled_from(sorted(self.sent)))
        uris = self.sent.pop(listen)
        honored = None if honor_all else sorted(uris)[1:]
        kept = uris if honored is None else frozenset(honored)
        before = {u for u in self.watched if self.cov.covered(u)}
        result = self.cov.ack(listen, honored)
        self.acked[listen] = kept
        assert set(result.newly) == {u for u in kept & self.watched if u not in before}
        assert result.refused == uris - kept
        self.run(result.closes)
        self.run(self.cov.cover("cover"))
        self.run(self.cov.compact())

    @precondition(lambda self: bool(self.opening))
    @rule(data=st.data())
    def ack_before_send(self, data: st.DataObject) -> None:
        listen = data.draw(st.sampled_from(sorted(self.opening)))
        with pytest.raises(FeedStateError, match="never sent"):
            self.cov.ack(listen, None)

    @precondition(lambda self: bool(self.sent or self.acked))
    @rule(data=st.data(), refused=st.booleans())
    def end(self, data: st.DataObject, refused: bool) -> None:
        listen = data.draw(st.sampled_from(sorted({*self.sent, *self.acked})))
        was_acked = listen in self.acked
        uris = self.sent.pop(listen, None) or self.acked.pop(listen)
        result = self.cov.end(listen, refused=refused and not was_acked)
        assert result.uris <= uris
        if result.kind == "split":
            assert len(uris) > 1
            halves = [a.uris for a in result.opens if isinstance(a, OpenListen)]
            assert len(halves) == 2
            assert halves[0] | halves[1] == uris
            assert not halves[0] & halves[1]
            self.run(result.opens)
            return
        self.run(self.cov.cover("retry"))
        self.run(self.cov.compact())

    @invariant()
    def coverage_matches_the_listens(self) -> None:
        if not hasattr(self, "cov"):
            return
        assert self.cov.count == len(self.opening) + len(self.sent) + len(self.acked)
        for uri in URIS:
            assert self.cov.covered(uri) == any(uri in uris for uris in self.acked.values())
            assert self.cov.held(uri) == self.held(uri)
        if self.mode == "listen":
            classes = math.floor(math.log(len(URIS), MERGE_WIDTH)) + 1
            # Up to MERGE_WIDTH - 1 per size class, plus new listens and a replacement in flight.
            assert len(self.acked) <= (MERGE_WIDTH - 1) * classes + len(self.sent) + len(self.opening) + 2

    def teardown(self) -> None:
        """Send and acknowledge everything: then every watched URI is covered."""
        if not hasattr(self, "cov"):
            return
        for _ in range(100):
            if self.opening:
                listen = min(self.opening)
                self.sent[listen] = self.cov.send(listen)
                del self.opening[listen]
            elif self.sent:
                listen = min(self.sent)
                uris = self.sent.pop(listen)
                result = self.cov.ack(listen, None)
                self.acked[listen] = uris
                self.run(result.closes)
                self.run(self.cov.cover("cover"))
                self.run(self.cov.compact())
            else:
                break
        assert not self.opening
        assert not self.sent
        for uri in self.watched:
            assert self.cov.covered(uri), f"{uri} is watched and no acknowledged listen holds it"


TestCoverageMachine = CoverageMachine.TestCase
TestCoverageMachine.settings = settings(max_examples=100, stateful_step_count=40, deadline=None)
