"""Kills and restarts against a model: nothing in an event log within retention is missed.

One event-log server (a ring of the last ``RETENTION`` events; it may restart with a new
``log_id``) and one watching agent built from the real parts that decide what survives a crash:
the :class:`Sequencer`, the batched :class:`Checkpoints`, the SQLite :class:`ResumeStore` and the
catch-up rules. A kill drops everything in memory (staged checkpoints, the debounce, a turn in
progress); a restart loads the store, hands over again what was not taken (flagged), and reads
from the saved position. For any interleaving, every event appended while the watch existed
reaches the agent in a completed turn, or is covered by a GAP that did (its log restarted, or it
fell out of retention; a restart's GAP also covers the new log's seqs before the first one it
shows, gone from the ring before the reader saw that log); an event the agent finished a turn
on twice was flagged the second time.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncai_watch.core.eventlog import Sequencer
from asyncai_watch.core.events import GAP, Event
from asyncai_watch.core.notice import SOURCE_WATCH, Notice
from asyncai_watch.core.resume import REDELIVERED_META_KEY, Checkpoint, catch_up_log, redelivered
from asyncai_watch.resume_store import ResumeStore

RETENTION = 6
NAME, URI = "log", "kcp://log"
# Weighted by repetition: reads and ticks often (a checkpoint written while lines wait is the
# interesting crash), restarts of either side rarely.
OPS = ("change",) * 3 + ("read",) * 3 + ("tick",) * 2 + ("emit", "take", "kill", "restart", "server_restart")


@attrs.define
class Server:
    log_no: int = 1
    next_seq: int = 1
    ring: list[int] = attrs.field(factory=list)
    appended: list[tuple[str, int]] = attrs.field(factory=list)

    @property
    def log_id(self) -> str:
        return f"L{self.log_no}"

    def change(self) -> None:
        self.ring = [*self.ring, self.next_seq][-RETENTION:]
        self.appended.append((self.log_id, self.next_seq))
        self.next_seq += 1

    def restart(self) -> None:
        self.log_no += 1
        self.next_seq, self.ring = 1, []

    def body(self) -> dict[str, Any]:
        return {
            "log_id": self.log_id,
            "last_seq": self.next_seq - 1,
            "events": [
                {"seq": s, "type": "ADDED", "object": {"id": f"{self.log_id}-{s}"}} for s in self.ring
            ],
        }


def encode(events: list[tuple[str, Event]]) -> str:
    """A notice's text in the model: one token per event, ``L1:4`` or a GAP's range (a reset's:
    the new log's first seq it shows), each with the log it was read from."""
    out = []
    for log_id, ev in events:
        if ev.type == GAP:
            f = ev.fields
            if f["reason"] == "reset":
                out.append(f"GAP:{log_id}:reset:None:{f.get('first_seq')}")
            else:
                out.append(f"GAP:{log_id}:{f['reason']}:{f.get('from_seq')}:{f.get('to_seq')}")
        else:
            out.append(f"{log_id}:{ev.seq}")
    return " ".join(out)


@attrs.define
class Agent:
    """One process of the agent: the watch's memory and the turn it is in, if any."""

    store: ResumeStore
    sequencer: Sequencer
    pending: list[tuple[str, Event]] = attrs.field(factory=list)  # (the log read from, event)
    inbox: list[tuple[int, Notice]] = attrs.field(factory=list)  # handed, turn not completed


def kill(agent: Agent) -> None:
    conn = agent.store._conn  # a SIGKILL: nothing staged is written, the connection just ends
    assert conn is not None
    conn.close()
    agent.store._conn = None


def run(ops: list[str], directory: Path) -> list[Notice]:
    server = Server()
    for _ in range(3):
        server.change()
    now = 0.0
    path = directory / "s.sqlite"
    completed: list[Notice] = []
    # Start the watch: the baseline, its checkpoint written at once (as watch_start does).
    store = ResumeStore(path, window=1.0)
    sequencer = Sequencer()
    sequencer.prime(server.body())
    watched_from = len(server.appended)
    assert sequencer.log_id is not None
    assert sequencer.last_seq is not None
    store.staged.quiet(NAME, Checkpoint(URI, (sequencer.log_id, sequencer.last_seq)), now)
    store.write()
    agent: Agent | None = Agent(store, sequencer)

    def position(a: Agent) -> Checkpoint:
        assert a.sequencer.log_id is not None
        assert a.sequencer.last_seq is not None
        return Checkpoint(URI, (a.sequencer.log_id, a.sequencer.last_seq))

    def read(a: Agent) -> None:
        events = a.sequencer.feed(server.body()).events
        for ev in events:
            if ev.type == GAP and ev.fields["reason"] == "truncated":
                # No GAP within retention: every seq it names is gone from the ring.
                assert not set(range(ev.fields["from_seq"], ev.fields["to_seq"] + 1)) & set(server.ring)
        if events:
            a.pending += [(server.log_id, ev) for ev in events]
            a.store.staged.hold(NAME)
        else:  # nothing new: the checkpoint may move, unless lines wait in the debounce (hold)
            a.store.staged.quiet(NAME, position(a), now)

    def emit(a: Agent) -> None:
        if not a.pending:
            return
        notice = Notice(SOURCE_WATCH, encode(a.pending), meta={"name": NAME})
        a.pending = []
        a.store.staged.handed(NAME, position(a), now)
        a.inbox.append((a.store.hand(notice), notice))

    for op in [*ops, "restart", "read", "emit", "take", "take", "take"]:
        now += 1.0 if op == "tick" else 0.1  # a tick passes the save window
        if op == "change":
            server.change()
        elif op == "server_restart":
            server.restart()
        elif op == "kill" and agent is not None:
            kill(agent)
            agent = None
        elif op == "restart":
            if agent is not None:
                kill(agent)
            store = ResumeStore(path, window=1.0)
            saved = store.load()[NAME]
            agent = Agent(store, Sequencer())
            agent.inbox = [(i, redelivered(n)) for i, n in store.pending()]
            got, agent.sequencer = catch_up_log(saved.position, server.body())
            assert got.outcome.kind != "fresh"
            if got.events:
                agent.pending = [(server.log_id, ev) for ev in got.events]
                store.staged.hold(NAME)
                emit(agent)  # the one "while you were away" notice
        elif agent is None:
            continue
        elif op == "read":
            read(agent)
        elif op == "emit":
            emit(agent)
        elif op == "take" and agent.inbox:
            notice_id, notice = agent.inbox.pop(0)
            agent.store.taken(notice_id)
            completed.append(notice)
        elif op == "tick" and agent.store.staged.due(now):
            agent.store.write()
    assert agent is not None
    while agent.inbox:  # the last process finishes its turns
        notice_id, notice = agent.inbox.pop(0)
        agent.store.taken(notice_id)
        completed.append(notice)
    agent.store.close()
    check(server, watched_from, completed)
    return completed


def check(server: Server, watched_from: int, completed: list[Notice]) -> None:
    seen: dict[tuple[str, int], list[bool]] = {}
    gaps: list[tuple[str, str, int | None, int | None]] = []
    for notice in completed:
        flagged = notice.meta.get(REDELIVERED_META_KEY) == "1"
        for token in notice.text.splitlines()[-1].split():
            if token.startswith("GAP:"):
                _, log_id, reason, lo, hi = token.split(":")
                gaps.append(
                    (log_id, reason, None if lo == "None" else int(lo), None if hi == "None" else int(hi))
                )
            else:
                log_id, seq = token.split(":")
                seen.setdefault((log_id, int(seq)), []).append(flagged)
    reset_logs = {log_id for log_id, reason, _, _ in gaps if reason == "reset"}
    for log_id, seq in server.appended[watched_from:]:
        if (log_id, seq) in seen:
            continue
        truncated = any(g[0] == log_id and g[1] == "truncated" and g[2] <= seq <= g[3] for g in gaps)  # type: ignore[operator]
        # A reset GAP read from this log: its seqs before the first one shown went before the reader saw it.
        before_first = any(
            g[0] == log_id and g[1] == "reset" and g[3] is not None and seq < g[3] for g in gaps
        )
        # A reset GAP, delivered in a later log, covers what an earlier log held unread.
        later_reset = any(int(r[1:]) > int(log_id[1:]) for r in reset_logs)
        assert truncated or later_reset or before_first, f"{log_id}:{seq} was missed: {completed}"
    for event, flags in seen.items():
        assert flags.count(False) <= 1, f"{event} reached the agent twice unflagged: {completed}"


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(OPS), max_size=40))
def test_no_event_within_retention_is_missed_across_kills_and_restarts(ops: list[str]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        run(ops, Path(directory))


def test_a_notice_handed_but_not_taken_is_redelivered_once_flagged() -> None:
    with tempfile.TemporaryDirectory() as directory:
        # change, read, hand it to the agent, die mid-turn, restart: the agent finishes it flagged.
        completed = run(["change", "read", "emit", "kill"], Path(directory))
    assert len(completed) == 1
    assert completed[0].meta[REDELIVERED_META_KEY] == "1"
    assert completed[0].text.splitlines()[-1] == "L1:4"


def test_a_checkpoint_written_while_lines_wait_in_the_debounce_does_not_skip_them() -> None:
    with tempfile.TemporaryDirectory() as directory:
        # An event waits in the debounce; a later empty read and a save window pass; then a kill.
        completed = run(["change", "read", "read", "tick", "kill"], Path(directory))
    assert [n.text.splitlines()[-1] for n in completed] == ["L1:4"]
