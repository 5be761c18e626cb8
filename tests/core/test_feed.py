"""The per-connection subscription machine, driven directly: no tasks, no clock, no server.

Scenario tests first (each names one behaviour), then a hypothesis state machine that drives a
:class:`Feed` through arbitrary interleavings of joins, leaves, acks, listen ends, server changes,
finished reads and time, against a model server, and checks the properties the runner relies on.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pytest
from hypothesis import assume, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from asyncai_watch.core.backoff import Backoff
from asyncai_watch.core.feed import (
    MERGE_WIDTH,
    Begin,
    CloseListen,
    Deliver,
    Down,
    Feed,
    FeedStateError,
    Forget,
    GaveUp,
    OpenListen,
    Read,
    ReadFailed,
    Retry,
    StartFailed,
    Up,
    covering_uris,
)


def kinds(actions: list[Any]) -> list[str]:
    return [type(a).__name__ for a in actions]


def opened(actions: list[Any]) -> list[OpenListen]:
    return [a for a in actions if isinstance(a, OpenListen)]


def acked(feed: Feed[str], listen: int, honored: Any = None, now: float = 0.0) -> list[Any]:
    """The runner sends listen ``listen``, and the server acknowledges it."""
    feed.send(listen)
    return feed.acked(listen, honored, now)


def started(feed: Feed[str], uri: str, watcher: str, now: float = 0.0) -> None:
    """``watcher`` joins ``uri`` and begins on its first read, its listen acknowledged."""
    actions = feed.watch(uri, watcher, now)
    for listen in opened(actions):
        actions += acked(feed, listen.id, None, now)
    assert Read(uri) in actions
    assert Begin(uri, (watcher,), fresh=True) in feed.read_done(uri, now)


# --- scenarios ------------------------------------------------------------------------------------


def test_a_first_watch_opens_a_listen_and_reads_only_once_it_is_acknowledged() -> None:
    feed: Feed[str] = Feed()
    actions = feed.watch("memo://a", "w1", 0.0)
    assert actions == [OpenListen(1, frozenset({"memo://a"}))]
    assert acked(feed, 1, None, 0.0) == [Read("memo://a")]
    assert feed.read_done("memo://a", 0.0) == [Begin("memo://a", ("w1",), fresh=True)]


def test_a_burst_of_watches_shares_the_listen_not_sent_yet() -> None:
    feed: Feed[str] = Feed()
    assert opened(feed.watch("u0", "w0", 0.0)) == [OpenListen(1, frozenset({"u0"}))]
    for i in range(1, 50):
        assert feed.watch(f"u{i}", f"w{i}", 0.0) == []  # into listen 1, not sent yet
    assert feed.send(1) == frozenset(f"u{i}" for i in range(50))
    assert feed.listens == 1


def test_watches_during_an_acknowledgment_wait_and_share_the_next_listen() -> None:
    feed: Feed[str] = Feed()
    feed.watch("u0", "w0", 0.0)
    assert feed.send(1) == {"u0"}
    for i in range(1, 50):
        assert feed.watch(f"u{i}", f"w{i}", 0.0) == []  # coalesced: listen 1 is on its way
    actions = feed.acked(1, None, 0.0)
    [second] = opened(actions)
    assert feed.send(second.id) == frozenset(f"u{i}" for i in range(1, 50))
    assert feed.listens == 2


def test_a_listen_is_sent_once_and_acknowledged_only_after_it_was_sent() -> None:
    feed: Feed[str] = Feed()
    feed.watch("u0", "w0", 0.0)
    with pytest.raises(FeedStateError, match="never sent"):
        feed.acked(1, None, 0.0)
    feed.send(1)
    with pytest.raises(FeedStateError, match="already sent"):
        feed.send(1)


def settle(feed: Feed[str], pending: list[Any]) -> int:
    """Acknowledge every listen and finish every read the actions ask for; returns the URIs sent."""
    sent = 0
    while pending:
        action = pending.pop(0)
        if isinstance(action, OpenListen):
            sent += len(action.uris)
            pending += acked(feed, action.id, None, 0.0)
        elif isinstance(action, Read):
            pending += feed.read_done(action.uri, 0.0)
    return sent


def test_sequential_watches_are_merged_a_few_at_a_time_so_listens_stay_few() -> None:
    feed: Feed[str] = Feed()
    sent = 0
    for i in range(1000):
        sent += settle(feed, feed.watch(f"u{i}", f"w{i}", 0.0))
    classes = math.log(1000, MERGE_WIDTH) + 1
    assert feed.listens <= (MERGE_WIDTH - 1) * classes  # 15 at 1,000 URIs
    assert all(feed.covered(f"u{i}") for i in range(1000))
    assert sent <= 1000 * (classes + 1)  # each URI re-sent about log(N) times, not N


def test_a_replacement_listen_is_acknowledged_before_the_listens_it_replaces_close() -> None:
    feed: Feed[str] = Feed()
    uris = [f"u{i}" for i in range(MERGE_WIDTH)]
    for i, uri in enumerate(uris[:-1]):  # one listen each: too few of a size to merge
        started(feed, uri, f"w{i}")
    assert feed.listens == MERGE_WIDTH - 1
    actions = feed.watch(uris[-1], "last", 0.0)
    [last] = opened(actions)
    actions = acked(feed, last.id, None, 0.0)
    [merged] = opened(actions)  # MERGE_WIDTH listens of one size: one replaces them all
    assert merged.uris == set(uris)
    assert not any(isinstance(a, CloseListen) for a in actions)  # nothing closes before the ack
    closed = acked(feed, merged.id, None, 0.0)[:MERGE_WIDTH]
    assert sorted(a.id for a in closed if isinstance(a, CloseListen)) == [*range(1, MERGE_WIDTH), last.id]
    assert all(feed.covered(uri) for uri in uris)
    assert feed.listens == 1


def test_a_second_watcher_of_a_read_uri_begins_at_once_on_its_current_state() -> None:
    feed: Feed[str] = Feed()
    started(feed, "a", "w1")
    assert feed.watch("a", "w2", 0.0) == [Begin("a", ("w2",), fresh=False)]
    assert feed.updated("a", 0.0) == [Read("a")]
    assert feed.read_done("a", 0.0) == [Deliver("a", ("w1", "w2"))] or feed.watchers("a")


def test_a_watcher_joining_during_a_read_begins_on_that_read() -> None:
    feed: Feed[str] = Feed()
    started(feed, "a", "w1")
    assert feed.updated("a", 0.0) == [Read("a")]
    assert feed.watch("a", "w2", 0.0) == []
    assert feed.read_done("a", 0.0) == [Deliver("a", ("w1",)), Begin("a", ("w2",), fresh=False)]


def test_signals_during_a_read_give_exactly_one_more_read() -> None:
    feed: Feed[str] = Feed()
    started(feed, "a", "w1")
    assert feed.updated("a", 0.0) == [Read("a")]
    assert feed.updated("a", 0.0) == []
    assert feed.updated("a", 0.0) == []
    assert feed.read_done("a", 0.0) == [Deliver("a", ("w1",)), Read("a")]
    assert feed.read_done("a", 0.0) == [Deliver("a", ("w1",))]


def test_an_update_of_a_sub_resource_reads_the_watched_parent() -> None:
    feed: Feed[str] = Feed()
    started(feed, "files://root/dir", "w1")
    assert feed.updated("files://root/dir/a.txt", 0.0) == [Read("files://root/dir")]
    assert covering_uris("x://a/b/c", {"x://a", "x://a/b/", "x://a/b/c", "x://z"}) == [
        "x://a/b/c",
        "x://a/b/",
        "x://a",
    ]


def test_reads_beyond_the_limit_wait_their_turn() -> None:
    feed: Feed[str] = Feed(max_reads=2)
    for uri in "abc":
        feed.watch(uri, f"w-{uri}", 0.0)  # all three in one listen
    actions = acked(feed, 1, None, 0.0)
    assert [a for a in actions if isinstance(a, Read)] == [Read("a"), Read("b")]  # "c" waits for a slot
    assert Read("c") in feed.read_done("a", 0.0)


def test_the_last_watcher_leaving_forgets_the_uri_and_closes_its_emptied_listen() -> None:
    feed: Feed[str] = Feed()
    started(feed, "a", "w1")
    assert feed.unwatch("a", "w1", 0.0) == [Forget("a"), CloseListen(1)]
    assert feed.listens == 0


def test_a_listen_mostly_unwatched_is_replaced_by_one_of_the_rest() -> None:
    feed: Feed[str] = Feed()
    n = MERGE_WIDTH**2
    for i in range(n):
        settle(feed, feed.watch(f"u{i}", f"w{i}", 0.0))
    assert feed.listens == 1  # four of 1 -> one of 4, four of 4 -> one of 16
    gone = n // 2 + 1
    for i in range(gone):
        actions = feed.unwatch(f"u{i}", f"w{i}", 0.0)
    [shrunk] = opened(actions)
    assert shrunk.uris == {f"u{i}" for i in range(gone, n)}


def test_a_lost_listen_resubscribes_after_1_2_4_8_16_s_then_gives_up() -> None:
    feed: Feed[str] = Feed()
    started(feed, "a", "w1")
    now = 0.0
    delays = []
    listen = 1
    for _ in range(5):
        actions = feed.ended(listen, "connection lost", now)
        [down] = [a for a in actions if isinstance(a, Down)]
        assert down.watchers == ("w1",)
        delays.append(down.retry.delay)
        now = feed.deadline or 0.0
        [reopen] = opened(feed.tick(now))
        listen = reopen.id
        actions = acked(feed, listen, None, now)
        assert Up(("w1",), len(delays)) in actions
        assert Read("a") in actions  # changes made while nobody was subscribed
        assert Deliver("a", ("w1",)) in feed.read_done("a", now)
    assert delays == [1, 2, 4, 8, 16]
    assert feed.ended(listen, "connection lost", now) == [GaveUp(("w1",), 5, "connection lost"), Forget("a")]
    assert feed.uris() == []


def test_a_healthy_subscription_resets_the_backoff() -> None:
    feed: Feed[str] = Feed()
    started(feed, "a", "w1")
    feed.ended(1, "lost", 0.0)
    [reopen] = opened(feed.tick(1.0))
    acked(feed, reopen.id, None, 1.0)
    feed.read_done("a", 1.0)
    feed.updated("a", 2.0)  # an update: the subscription works
    feed.read_done("a", 2.0)
    [down] = [a for a in feed.ended(reopen.id, "lost", 3.0) if isinstance(a, Down)]
    assert down.retry == Retry(1.0, 1)


def test_a_watch_that_starts_during_a_backoff_tries_at_once_for_everyone() -> None:
    feed: Feed[str] = Feed()
    started(feed, "a", "w1")
    feed.ended(1, "lost", 0.0)
    assert feed.deadline == 1.0
    [attempt] = opened(feed.watch("b", "w2", 0.5))
    assert attempt.uris == {"a", "b"}
    assert feed.deadline is None


def test_a_first_subscription_that_fails_fails_its_watch_at_once() -> None:
    feed: Feed[str] = Feed()
    feed.watch("a", "w1", 0.0)
    assert feed.ended(1, "no answer within 30 s", 0.0) == [StartFailed("a", "no answer within 30 s", ("w1",))]
    assert feed.uris() == []
    assert feed.deadline is None


def test_a_refused_listen_is_split_until_the_refused_uri_is_alone() -> None:
    feed: Feed[str] = Feed()
    for uri in ("good0", "good1", "bad", "good2"):
        feed.watch(uri, f"w-{uri}", 0.0)  # one listen of four
    pending = [1]
    failed: list[StartFailed[str]] = []
    while pending:
        listen = pending.pop()
        if "bad" in feed.send(listen):
            actions = feed.ended(listen, "unknown resource", 0.0, refused=True)
            failed += [a for a in actions if isinstance(a, StartFailed)]
            pending += [a.id for a in opened(actions)]
        else:
            feed.acked(listen, None, 0.0)
    assert failed == [StartFailed("bad", "unknown resource", ("w-bad",))]
    assert feed.covered("good1")
    assert feed.covered("good2")


def test_a_uri_the_server_does_not_honor_fails_only_its_own_watch() -> None:
    feed: Feed[str] = Feed()
    feed.watch("a", "w1", 0.0)
    actions = acked(feed, 1, [], 0.0)
    assert actions == [StartFailed("a", "the server did not honor the subscription", ("w1",)), CloseListen(1)]


def test_a_read_that_fails_after_an_update_is_an_error_for_the_watchers_who_keep_their_state() -> None:
    feed: Feed[str] = Feed()
    started(feed, "a", "w1")
    feed.updated("a", 0.0)
    assert feed.read_failed("a", "boom", 0.0) == [ReadFailed("a", "boom", ("w1",))]


def test_a_first_read_that_fails_fails_the_start() -> None:
    feed: Feed[str] = Feed()
    feed.watch("a", "w1", 0.0)
    acked(feed, 1, None, 0.0)
    assert feed.read_failed("a", "boom", 0.0)[0] == StartFailed("a", "boom", ("w1",))


def test_subscribe_mode_keeps_one_subscription_per_uri_and_unsubscribes_the_last() -> None:
    feed: Feed[str] = Feed(mode="subscribe")
    actions = feed.watch("a", "w1", 0.0) + feed.watch("b", "w2", 0.0)
    assert opened(actions) == [OpenListen(1, frozenset({"a"})), OpenListen(2, frozenset({"b"}))]
    acked(feed, 1, None, 0.0)
    acked(feed, 2, None, 0.0)
    feed.read_done("a", 0.0)
    feed.read_done("b", 0.0)
    assert feed.listens == 2  # never merged: a legacy subscription is per URI
    assert feed.unwatch("a", "w1", 0.0) == [Forget("a"), CloseListen(1)]


def test_inputs_that_make_no_sense_raise() -> None:
    feed: Feed[str] = Feed()
    with pytest.raises(FeedStateError, match="no listen 7"):
        acked(feed, 7, None, 0.0)
    with pytest.raises(FeedStateError, match="no read"):
        feed.read_done("a", 0.0)
    with pytest.raises(FeedStateError, match="nobody watches"):
        feed.unwatch("a", "w1", 0.0)
    feed.watch("a", "w1", 0.0)
    with pytest.raises(FeedStateError, match="already watches"):
        feed.watch("a", "w1", 0.0)
    acked(feed, 1, None, 0.0)
    with pytest.raises(FeedStateError, match="already acknowledged"):
        feed.acked(1, None, 0.0)


# --- any interleaving -----------------------------------------------------------------------------

URIS = ["m://a", "m://b", "m://c", "m://c/x", "m://d"]
WATCHERS = [f"w{i}" for i in range(6)]


class FeedMachine(RuleBasedStateMachine):
    """A :class:`Feed` against a model server and runner.

    The server holds a version per URI and sends an update to each acknowledged listen that
    holds the URI (or a parent of it). The runner executes actions: it keeps the version of the
    last finished read per URI and the version each watcher has seen.
    """

    @initialize(mode=st.sampled_from(["listen", "subscribe"]), max_reads=st.integers(1, 3))
    def setup(self, mode: str, max_reads: int) -> None:
        self.feed: Feed[str] = Feed(mode=mode, max_reads=max_reads)  # type: ignore[arg-type]
        self.now = 0.0
        self.version: Counter[str] = Counter()
        self.listens: dict[int, frozenset[str]] = {}  # sent, open or opening, as the runner knows them
        self.unsent: set[int] = set()  # opened, not sent yet (watches may still join them)
        self.acked: set[int] = set()
        self.reads: dict[str, bool] = {}  # in flight -> did it start while a listen held it acked
        self.current: dict[str, int] = {}  # version of the last finished read (the URI's state)
        self.seen: dict[str, int] = {}  # watcher -> version it has seen
        self.where: dict[str, str] = {}  # watcher -> uri (joined, begun or not)
        self.begun: set[str] = set()
        self.signalled: Counter[str] = Counter()  # updates a read in flight missed
        self.expect_read: set[str] = set()  # URIs that owe one more read after their current one
        self.down: set[str] = set()
        self.delays: list[float] = []

    # -- running actions ----------------------------------------------------------------------------

    def run(self, actions: list[Any], just_read: tuple[str, int] | None = None) -> None:
        for action in actions:
            if isinstance(action, OpenListen):
                assert action.id not in self.listens
                assert action.id not in self.unsent
                if self.feed.mode == "subscribe":
                    assert len(action.uris) == 1
                self.unsent.add(action.id)
            elif isinstance(action, CloseListen):
                assert action.id in self.acked, "only an acknowledged listen is closed"
                del self.listens[action.id]
                self.acked.discard(action.id)
            elif isinstance(action, Read):
                assert action.uri not in self.reads, "two reads of one URI in flight"
                assert len(self.reads) < self.feed.max_reads
                self.reads[action.uri] = self.covered(action.uri)
                self.expect_read.discard(action.uri)
            elif isinstance(action, Begin):
                if just_read is not None and just_read[0] == action.uri:
                    version = just_read[1]  # the read just done
                else:
                    assert not action.fresh, "a fresh baseline comes only from a read just done"
                    assert action.uri not in self.reads, "a joiner begins on a state being read"
                    version = self.current[action.uri]
                for w in action.watchers:
                    assert self.where.get(w) == action.uri
                    assert w not in self.begun
                    self.begun.add(w)
                    self.seen[w] = version
            elif isinstance(action, Deliver):
                assert just_read is not None
                assert just_read[0] == action.uri
                for w in action.watchers:
                    assert w in self.begun
                    assert self.where[w] == action.uri
                    self.seen[w] = just_read[1]
            elif isinstance(action, StartFailed | GaveUp):
                for w in action.watchers:
                    assert w in self.where
                    self.where.pop(w)
                    self.begun.discard(w)
                    self.seen.pop(w, None)
            elif isinstance(action, Down):
                self.delays.append(action.retry.delay)
                self.down.update(action.watchers)
            elif isinstance(action, Up):
                self.down.difference_update(action.watchers)

    def covered(self, uri: str) -> bool:
        return any(uri in self.listens[i] for i in self.acked)

    # -- rules --------------------------------------------------------------------------------------

    @rule(w=st.sampled_from(WATCHERS), uri=st.sampled_from(URIS))
    def join(self, w: str, uri: str) -> None:
        assume(w not in self.where)
        self.where[w] = uri
        self.run(self.feed.watch(uri, w, self.now))

    @rule(w=st.sampled_from(WATCHERS))
    def leave(self, w: str) -> None:
        assume(w in self.where)
        uri = self.where.pop(w)
        self.begun.discard(w)
        self.seen.pop(w, None)
        self.down.discard(w)
        self.run(self.feed.unwatch(uri, w, self.now))

    @precondition(lambda self: bool(self.unsent))
    @rule(data=st.data())
    def send(self, data: st.DataObject) -> None:
        listen = data.draw(st.sampled_from(sorted(self.unsent)))
        self.unsent.discard(listen)
        uris = self.feed.send(listen)
        if self.feed.mode == "subscribe":
            assert len(uris) == 1
        self.listens[listen] = uris

    @precondition(lambda self: any(i not in self.acked for i in self.listens))
    @rule(data=st.data(), honor_all=st.booleans())
    def ack(self, data: st.DataObject, honor_all: bool) -> None:
        listen = data.draw(st.sampled_from(sorted(i for i in self.listens if i not in self.acked)))
        uris = self.listens[listen]
        honored = None if honor_all else sorted(uris)[1:]
        self.acked.add(listen)
        if honored is not None:
            self.listens[listen] = frozenset(honored)
        self.run(self.feed.acked(listen, honored, self.now))

    @precondition(lambda self: bool(self.listens))
    @rule(data=st.data(), refused=st.booleans())
    def end(self, data: st.DataObject, refused: bool) -> None:
        listen = data.draw(st.sampled_from(sorted(self.listens)))
        was_acked = listen in self.acked
        del self.listens[listen]
        self.acked.discard(listen)
        self.run(self.feed.ended(listen, "lost", self.now, refused=refused and not was_acked))

    @rule(uri=st.sampled_from(URIS))
    def change(self, uri: str) -> None:
        self.version[uri] += 1
        for listen in sorted(self.acked):
            if any(u == uri or uri.startswith(u + "/") for u in self.listens[listen]):
                for watched in covering_uris(uri, set(self.feed.uris())):
                    if watched in self.reads:
                        self.expect_read.add(watched)
                self.run(self.feed.updated(uri, self.now))
                break  # one update per change is enough (the SDK coalesces them too)

    @precondition(lambda self: bool(self.reads))
    @rule(data=st.data(), ok=st.booleans())
    def finish_read(self, data: st.DataObject, ok: bool) -> None:
        uri = data.draw(st.sampled_from(sorted(self.reads)))
        del self.reads[uri]
        owed = uri in self.expect_read
        if ok:
            self.current[uri] = self.version[uri]
            actions = self.feed.read_done(uri, self.now)
            self.run(actions, just_read=(uri, self.version[uri]))
        else:
            actions = self.feed.read_failed(uri, "boom", self.now)
            self.run(actions)
        # An update during the read gives exactly one more read (while anyone is left to read for).
        wanted = any(self.where.get(w) == uri for w in self.where)
        reread = [a for a in actions if isinstance(a, Read) and a.uri == uri]
        assert len(reread) <= 1
        if owed and wanted and ok and self.covered(uri):
            assert reread or uri in self.reads or self.feed.max_reads <= len(self.reads)

    @precondition(lambda self: bool(self.reads))
    @rule(data=st.data())
    def connection_dies_during_a_read(self, data: st.DataObject) -> None:
        """The read fails because the connection died: every listen ends too, and the read is not
        tried again on its own (resubscribing reads everything)."""
        uri = data.draw(st.sampled_from(sorted(self.reads)))
        del self.reads[uri]
        self.run(self.feed.read_failed(uri, "connection closed", self.now, again=False))
        for listen in sorted(self.listens):
            if listen not in self.listens:
                continue  # closed by what an earlier end answered
            del self.listens[listen]
            self.acked.discard(listen)
            self.run(self.feed.ended(listen, "connection closed", self.now))

    @precondition(lambda self: self.feed.deadline is not None)
    @rule()
    def wait_for_the_deadline(self) -> None:
        assert self.feed.deadline is not None
        self.now = self.feed.deadline
        self.run(self.feed.tick(self.now))

    # -- invariants ---------------------------------------------------------------------------------

    @invariant()
    def every_begun_watch_is_covered_or_being_resubscribed(self) -> None:
        if not hasattr(self, "feed"):
            return
        opening = bool(self.unsent) or any(i not in self.acked for i in self.listens)
        for w in self.begun:
            uri = self.where[w]
            if self.covered(uri):
                continue
            # Not covered: it is read again once it is, and a listen for it is on its way.
            assert self.feed._uris[uri].stale
            assert opening or self.feed.deadline is not None

    @invariant()
    def delays_follow_the_backoff(self) -> None:
        if not hasattr(self, "feed"):
            return
        assert set(self.delays) <= set(Backoff().delays())

    def teardown(self) -> None:
        """Quiescence: every listen acknowledged, every read done, no change pending. Then each
        begun watcher has seen its URI's current version: no change was lost."""
        if not hasattr(self, "feed"):
            return
        for _ in range(200):
            for listen in sorted(self.unsent):
                self.unsent.discard(listen)
                self.listens[listen] = self.feed.send(listen)
            if self.feed.deadline is not None and not self.reads:
                self.now = self.feed.deadline
                self.run(self.feed.tick(self.now))
            opening = sorted(i for i in self.listens if i not in self.acked)
            if self.unsent:
                continue
            if opening:
                self.acked.add(opening[0])
                self.run(self.feed.acked(opening[0], None, self.now))
                continue
            if self.reads:
                uri = sorted(self.reads)[0]
                del self.reads[uri]
                self.current[uri] = self.version[uri]
                self.run(self.feed.read_done(uri, self.now), just_read=(uri, self.version[uri]))
                continue
            if self.feed.deadline is None:
                break
        assert not self.reads
        assert all(i in self.acked for i in self.listens)
        assert not self.unsent
        for w in self.begun:
            uri = self.where[w]
            assert self.covered(uri)
            assert self.seen[w] == self.version[uri], f"{w} on {uri} missed a change"
        # Joiners either began or failed; nobody waits forever.
        assert set(self.where) == self.begun
        if self.feed.mode == "listen":
            # Up to MERGE_WIDTH - 1 per size class, plus a new listen and a replacement in flight.
            classes = math.floor(math.log(len(URIS), MERGE_WIDTH)) + 1
            assert len(self.listens) <= (MERGE_WIDTH - 1) * classes + 2


TestFeedMachine = FeedMachine.TestCase
TestFeedMachine.settings = settings(
    max_examples=int(__import__("os").environ.get("FEED_EXAMPLES", "100")),
    stateful_step_count=30,
    deadline=None,
)
