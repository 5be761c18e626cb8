"""The filtered durable log's paging (the server's pure body, ``log_body_where``) read by the
client's ``Sequencer``: sparse seqs, pages, trimming and positionless reads never lose an event
of the view silently. The server side is modelled on ``asyncai_watch.read_log`` (capture.py):
the newest ``scan`` events for a reader without a position, else up to ``scan`` after it."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from asyncai_servers.postgres.capture import log_body_where
from asyncai_servers.postgres.config import TableName
from asyncai_watch.core.eventlog import Sequencer
from asyncai_watch.core.events import GAP

TABLE = TableName("public", "t")
LOG_ID = "log-1"
AT = json.dumps("2026-12-05T00:00:00+00:00")

Change = tuple[str, int | None, int | None]
"""(op, k of the row before, k of the row after); the view is ``?k=1``."""


class Log:
    """A table's durable change log: seqs 1..N, the oldest trimmed away up to ``first``."""

    def __init__(self) -> None:
        self.changes: list[Change] = []
        self.first = 1

    def append(self, change: Change) -> None:
        self.changes.append(change)

    def trim(self, upto: int) -> None:
        # asyncai_watch.trim and expire: the newest transaction always stays.
        self.first = max(self.first, min(upto, max(len(self.changes), 1)))

    def in_view(self, seq: int) -> bool:
        _op, old, new = self.changes[seq - 1]
        return old == 1 or new == 1

    def rows(self, after: tuple[str, int] | None, scan: int) -> list[tuple[Any, ...]]:
        """What ``read_log_where`` answers: the header row and the view's events among the scan."""
        kept = range(self.first, len(self.changes) + 1)
        hi = kept[-1] if kept else 0
        lo = kept[0] if kept else hi + 1
        start = after[1] if after is not None and after[0] == LOG_ID else hi - scan
        scanned = [s for s in kept if s > start][:scan]
        head = (LOG_ID, lo, hi, 3600.0, 1 << 20, max(scanned, default=None), *[None] * 7)
        out: list[tuple[Any, ...]] = [head]
        for seq in scanned:
            op, old, new = self.changes[seq - 1]
            om, nm = old == 1, new == 1
            if om or nm or op == "T":
                row = (
                    None if old is None else json.dumps({"id": seq, "k": old}),
                    None if new is None else json.dumps({"id": seq, "k": new}),
                )
                out.append((None, None, None, None, None, seq, str(seq), op, *row, AT, om, nm))
        return out


def read(log: Log, after: tuple[str, int] | None, page: int, scan: int) -> tuple[str, bool]:
    body = log_body_where(log.rows(after, scan), after, page, scan, TABLE, ("id",), None)
    return body.text, body.more


def k() -> st.SearchStrategy[int]:
    return st.sampled_from([1, 2])


changes = st.one_of(
    st.tuples(st.just("I"), st.none(), k()),
    st.tuples(st.just("U"), k(), k()),
    st.tuples(st.just("D"), k(), st.none()),
)
actions = st.one_of(
    st.tuples(st.just("write"), st.lists(changes, min_size=1, max_size=40)),
    st.tuples(st.just("trim"), st.integers(0, 60)),
    st.tuples(st.just("read"), st.just(0)),
    st.tuples(st.just("read without a position"), st.just(0)),  # a body the worker parsed
)


@settings(max_examples=300, deadline=None)
@given(
    before=st.lists(changes, max_size=60),
    steps=st.lists(actions, max_size=25),
    page=st.integers(1, 8),
    scan=st.integers(1, 30),
    limit=st.one_of(st.none(), st.integers(1, 10)),
)
def test_the_filtered_view_never_loses_an_event_silently(
    before: list[Change], steps: list[tuple[str, Any]], page: int, scan: int, limit: int | None
) -> None:
    log = Log()
    for change in before:
        log.append(change)
    seq = Sequencer()
    text, _more = read(log, None, page, scan)
    assert seq.prime(text) is None
    started = len(log.changes)  # the watch started here: nothing older is news
    delivered: list[int] = []
    gapped: set[int] = set()

    def take(after: tuple[str, int] | None) -> bool:
        text, more = read(log, after, page, scan)
        result = seq.feed(text, limit=limit)
        assert result.error is None
        for event in result.events:
            if event.type == GAP:
                a, b = event.fields["from_seq"], event.fields["to_seq"]
                # A reset GAP (no range) says anything up to now may be missed.
                gapped.update(range(1, len(log.changes) + 1) if a is None else range(a, b + 1))
            else:
                assert event.seq is not None
                delivered.append(event.seq)
        return more

    def position() -> tuple[str, int]:
        assert seq.log_id is not None
        assert seq.last_seq is not None
        return seq.log_id, seq.last_seq

    for action, arg in steps:
        if action == "write":
            for change in arg:
                log.append(change)
        elif action == "trim":
            log.trim(arg)
        elif action == "read":
            take(position())
        else:
            take(None)
    # The reader catches up: page after page while the server says more follows.
    for _ in range(len(log.changes) + 2):
        if not take(position()):
            break
    else:
        raise AssertionError("the reader never caught up")

    assert delivered == sorted(set(delivered)), "a seq delivered twice or out of order"
    assert all(log.in_view(s) for s in delivered), "an event of another row delivered"
    assert all(s > started for s in delivered), "an event from before the watch started delivered"
    wanted = {s for s in range(started + 1, len(log.changes) + 1) if log.in_view(s)}
    missing = wanted - set(delivered) - gapped
    assert not missing, f"view events neither delivered nor in a GAP: {sorted(missing)}"
