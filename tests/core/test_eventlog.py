"""Event-log sequencer: at-most-once per seq, GAP exactly when seqs were missed, bad bodies as values."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncai_watch.core.changes import annotate
from asyncai_watch.core.eventlog import (
    GAP_LIMIT,
    GAP_RESET,
    GAP_TRUNCATED,
    BodyError,
    Sequencer,
    _parse,
    _sorted_unique,
    position,
)
from asyncai_watch.core.events import ERROR, GAP, Event
from asyncai_watch.server.eventlog import EventRing


def body(*seqs: int, type_: str = "MODIFIED") -> str:
    return json.dumps({"events": [{"seq": s, "type": type_, "object": {"id": f"o{s}"}} for s in seqs]})


def seqs(events: list[Event]) -> list[int | None]:
    return [e.seq for e in events]


def test_delivers_only_seqs_above_last_seen() -> None:
    s = Sequencer()
    assert s.prime(body(1, 2, 3)) is None
    assert s.last_seq == 3
    r = s.feed(body(2, 3, 4, 5))
    assert r.error is None
    assert seqs(r.events) == [4, 5]
    assert s.feed(body(2, 3, 4, 5)).events == []  # the same read again: nothing twice
    assert seqs(s.feed(body(4, 5, 6)).events) == [6]


def test_event_fields() -> None:
    s = Sequencer(last_seq=0)
    raw = {
        "seq": 1,
        "type": "MODIFIED",
        "object": {"metadata": {"uid": "u1"}},
        "old": {"x": 1},
        "extra": "kept",
    }
    (ev,) = s.feed({"events": [raw]}).events
    assert (ev.type, ev.seq, ev.key, ev.new, ev.old) == ("MODIFIED", 1, "u1", raw["object"], {"x": 1})
    assert ev.fields == raw


def test_gap_when_the_ring_dropped_events() -> None:
    s = Sequencer()
    s.prime(body(1, 2, 3, 4))
    r = s.feed(body(17, 18))
    gap = r.events[0]
    assert gap.type == GAP
    assert dict(gap.fields) == {
        "type": GAP,
        "from_seq": 5,
        "to_seq": 16,
        "missed": 12,
        "reason": GAP_TRUNCATED,
    }
    assert seqs(r.events[1:]) == [17, 18]


def test_no_gap_for_contiguous_reads_and_no_baseline() -> None:
    s = Sequencer()
    assert [e.type for e in s.feed(body(40, 41)).events] == ["MODIFIED", "MODIFIED"]  # nothing seen yet
    assert all(e.type != GAP for e in s.feed(body(41, 42)).events)


def test_empty_baseline_reports_nothing_missed() -> None:
    s = Sequencer()
    assert s.prime('{"events": []}') is None
    assert s.last_seq is None
    assert seqs(s.feed(body(7, 8)).events) == [7, 8]


def test_error_events_pass_through() -> None:
    ring = EventRing()
    s = Sequencer()
    s.prime(ring.text())
    ring.append({"type": "ADDED", "object": {"id": "a"}})
    ring.error("kubectl: connection refused")
    r = s.feed(ring.text())
    assert [e.type for e in r.events] == ["ADDED", ERROR]
    assert r.events[1].fields["message"] == "kubectl: connection refused"
    assert r.events[1].seq == 2


def test_out_of_order_and_duplicate_seqs_in_one_read() -> None:
    s = Sequencer(last_seq=2)
    events = [
        {"seq": 5, "type": "A"},
        {"seq": 3, "type": "B"},
        {"seq": 4, "type": "C"},
        {"seq": 3, "type": "dup"},
        {"seq": 2, "type": "old"},
    ]
    r = s.feed({"events": events})
    assert [(e.seq, e.type) for e in r.events] == [(3, "B"), (4, "C"), (5, "A")]


def test_limit_keeps_the_newest_and_reports_the_rest_as_one_gap() -> None:
    s = Sequencer(last_seq=0)
    r = s.feed(body(*range(1, 11)), limit=3)
    gap, *rest = r.events
    assert seqs(rest) == [8, 9, 10]
    assert dict(gap.fields) == {
        "type": GAP,
        "from_seq": 1,
        "to_seq": 7,
        "missed": 7,
        "reason": GAP_LIMIT,
        "limit": 3,
    }
    # A ring hole before the dropped ones is the same GAP.
    r = s.feed(body(*range(15, 21)), limit=2)
    assert dict(r.events[0].fields)["from_seq"] == 11
    assert dict(r.events[0].fields)["to_seq"] == 18
    assert dict(r.events[0].fields)["missed"] == 8
    assert seqs(r.events[1:]) == [19, 20]
    assert s.feed(body(21), limit=5).events[0].seq == 21


def test_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="limit must be a positive int"):
        Sequencer().feed(body(1), limit=0)


def test_server_restart_is_a_reset_not_silence() -> None:
    s = Sequencer()
    s.prime(body(*range(120, 131)))
    r = s.feed(body(1, 2, 3, 4))
    gap, *rest = r.events
    assert gap.type == GAP
    assert gap.fields["reason"] == GAP_RESET
    assert (gap.fields["previous_seq"], gap.fields["first_seq"]) == (130, 1)
    assert seqs(rest) == [1, 2, 3, 4]
    assert s.last_seq == 4
    assert seqs(s.feed(body(3, 4, 5, 6)).events) == [5, 6]


def test_reset_with_more_than_limit_reports_both() -> None:
    s = Sequencer(last_seq=500)
    r = s.feed(body(*range(1, 8)), limit=3)
    reset, limited, *rest = r.events
    assert reset.fields["reason"] == GAP_RESET
    assert (limited.fields["reason"], limited.fields["from_seq"], limited.fields["to_seq"]) == (
        GAP_LIMIT,
        1,
        4,
    )
    assert seqs(rest) == [5, 6, 7]


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("not json", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        ("[1, 2]", "JSON array"),
        ('"text"', "JSON string"),
        ('{"items": []}', 'no "events" key (keys: items)'),
        ('{"events": {"seq": 1}}', '"events" is a JSON object, not an array'),
        ('{"events": [3]}', "events[0] is a JSON number, not an object"),
        ('{"events": [{"type": "ADDED"}]}', 'events[0] has no "seq"'),
        (
            '{"events": [{"seq": "7", "type": "ADDED"}]}',
            "events[0].seq is '7' (a JSON string), not an integer",
        ),
        (
            '{"events": [{"seq": true, "type": "ADDED"}]}',
            "events[0].seq is True (a JSON boolean), not an integer",
        ),
        ('{"events": [{"seq": 1.5, "type": "ADDED"}]}', "not an integer"),
        ('{"events": [{"seq": 1}]}', 'events[0] (seq 1) has no "type"'),
        ('{"events": [{"seq": 1, "type": 5}]}', "events[0].type is 5 (a JSON number), not a string"),
    ],
)
def test_malformed_body_is_an_error_value(bad: str | bytes, says: str) -> None:
    s = Sequencer(last_seq=0)
    r = s.feed(bad)
    assert r.events == []
    assert isinstance(r.error, BodyError)
    assert says in r.error.message
    assert '{"events"' in r.error.message  # says what is accepted
    assert s.last_seq == 0
    assert isinstance(Sequencer().prime(bad), BodyError)


def test_bad_events_are_skipped_and_the_good_ones_delivered() -> None:
    s = Sequencer(last_seq=0)
    raw = [{"seq": 1, "type": "A"}, {"seq": "x", "type": "B"}, {"seq": 2, "type": "C"}]
    raw += [{"seq": None, "type": "D"}] * 4
    r = s.feed({"events": raw})
    assert seqs(r.events) == [1, 2]
    assert r.error is not None
    assert "events[1].seq is 'x'" in r.error.message
    assert "and 2 more" in r.error.message


@given(
    st.text()
    | st.binary()
    | st.recursive(
        st.none() | st.integers() | st.text(), lambda k: st.lists(k) | st.dictionaries(st.text(), k)
    )
)
def test_never_raises_on_any_body(raw: Any) -> None:
    s = Sequencer(last_seq=3)
    payload = (
        raw if isinstance(raw, str | bytes) else json.dumps({"events": raw} if isinstance(raw, list) else raw)
    )
    r = s.feed(payload)
    assert r.error is None or r.error.message


# --- property: any split of a log into reads ---------------------------------------------------------


@given(
    baseline=st.integers(0, 20),
    steps=st.lists(st.integers(0, 14), max_size=10),
    capacity=st.integers(1, 10),
    limit=st.none() | st.integers(1, 8),
    data=st.data(),
)
def test_never_twice_and_gap_exactly_when_skipped(
    baseline: int, steps: list[int], capacity: int, limit: int | None, data: st.DataObject
) -> None:
    """A log read through a ring of ``capacity``; between reads the head moves by each step."""
    reads = [baseline + sum(steps[: i + 1]) for i in range(len(steps))]
    n = reads[-1] if reads else baseline

    def read_at(head: int) -> list[dict[str, Any]]:
        window = [
            {"seq": q, "type": "ADDED", "object": {"id": q}}
            for q in range(max(1, head - capacity + 1), head + 1)
        ]
        # Servers may repeat or reorder; the sequencer must not care.
        extra = data.draw(st.lists(st.sampled_from(window), max_size=3)) if window else []
        return data.draw(st.permutations(window + extra))

    s = Sequencer()
    s.prime({"events": read_at(baseline)})
    first_new = baseline + 1 if baseline >= 1 else None
    delivered: list[int] = []
    gapped: list[int] = []
    for head in reads:
        before = s.last_seq
        events = s.feed({"events": read_at(head)}, limit=limit).events
        gaps = [e for e in events if e.type == GAP]
        got = [e.seq for e in events if e.type != GAP]
        assert all(isinstance(q, int) for q in got)
        new_in_read = [
            q for q in range(max(1, head - capacity + 1), head + 1) if before is None or q > before
        ]
        if first_new is None and new_in_read:
            first_new = new_in_read[0]
        # GAP exactly when this read skipped seqs: a hole before the ring's oldest, or the limit.
        skipped = (before is not None and new_in_read and new_in_read[0] > before + 1) or (
            limit is not None and len(new_in_read) > limit
        )
        assert len(gaps) == (1 if skipped else 0)
        if limit is not None:
            assert len(got) <= limit
        for g in gaps:
            a, b = g.fields["from_seq"], g.fields["to_seq"]
            assert g.fields["missed"] == b - a + 1
            gapped.extend(range(a, b + 1))
        delivered.extend(q for q in got if isinstance(q, int))
    assert delivered == sorted(set(delivered))  # never a seq twice, always in order
    assert not set(delivered) & set(gapped)
    if first_new is not None and n >= first_new:
        assert sorted(delivered + gapped) == list(range(first_new, n + 1))  # nothing lost silently
    else:
        assert delivered == []
        assert gapped == []


def test_an_empty_baseline_with_last_seq_still_measures_a_gap() -> None:
    # A server's ring was empty at the baseline (last_seq 0); 300 events later the ring holds
    # only the newest 256: the first 44 were missed, and the reader must be told.
    sequencer = Sequencer()
    assert sequencer.prime({"last_seq": 0, "events": []}) is None
    assert sequencer.last_seq == 0
    ring = [{"seq": n, "type": "ADDED", "object": {"metadata": {"uid": str(n)}}} for n in range(45, 301)]
    fed = sequencer.feed({"last_seq": 300, "events": ring})
    assert fed.error is None
    gap, *delivered = fed.events
    assert gap.type == "GAP"
    assert (gap.fields["from_seq"], gap.fields["to_seq"], gap.fields["missed"]) == (1, 44, 44)
    assert [e.seq for e in delivered] == list(range(45, 301))


def test_last_seq_is_ignored_unless_it_is_a_non_negative_int() -> None:
    for bad in (True, -1, "7", 1.5, None):
        sequencer = Sequencer()
        assert sequencer.prime({"last_seq": bad, "events": []}) is None
        assert sequencer.last_seq is None
    sequencer = Sequencer()
    sequencer.prime('{"last_seq": 3, "events": [{"seq": 9, "type": "ADDED"}]}')
    assert sequencer.last_seq == 9  # the higher of the two marks wins


def test_a_new_log_id_is_a_restart_even_when_seqs_ran_past_ours() -> None:
    # The server restarted and its new log already counts past our last seq: seqs alone would
    # skip 1..3 of the new log silently. The new log_id makes it a reset GAP, and all is delivered.
    sequencer = Sequencer()
    sequencer.prime({"log_id": "a", "last_seq": 3, "events": [{"seq": 3, "type": "ADDED"}]})
    fed = sequencer.feed(
        {"log_id": "b", "last_seq": 5, "events": [{"seq": n, "type": "ADDED"} for n in range(1, 6)]}
    )
    gap, *delivered = fed.events
    assert (gap.type, gap.fields["reason"], gap.fields["previous_seq"]) == ("GAP", "reset", 3)
    assert [e.seq for e in delivered] == [1, 2, 3, 4, 5]
    assert sequencer.log_id == "b"
    # The same log again: plain seq rules.
    again = sequencer.feed(
        {"log_id": "b", "last_seq": 6, "events": [{"seq": n, "type": "ADDED"} for n in range(1, 7)]}
    )
    assert [e.seq for e in again.events] == [6]


def test_a_restarted_empty_log_is_reported_once_and_measured_from_its_last_seq() -> None:
    sequencer = Sequencer()
    sequencer.prime({"log_id": "a", "last_seq": 9, "events": []})
    fed = sequencer.feed({"log_id": "b", "last_seq": 0, "events": []})
    assert [(e.type, e.fields["reason"]) for e in fed.events] == [("GAP", "reset")]
    assert sequencer.last_seq == 0
    assert (
        sequencer.feed({"log_id": "b", "last_seq": 1, "events": [{"seq": 1, "type": "ADDED"}]}).events[0].seq
        == 1
    )


# --- the fast paths against the general ones --------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["a", "b", "x.y", "", "n\nl"]),
    lambda k: (
        st.lists(k, max_size=3) | st.dictionaries(st.sampled_from(["a", "b", "uid", "id"]), k, max_size=3)
    ),
    max_leaves=8,
)
kube_objects = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries(
            {"uid": st.sampled_from(["u1", "u2", "", 7]), "resourceVersion": st.sampled_from(["1", "2"])},
            optional={"name": st.sampled_from(["web", ""]), "generation": st.integers(1, 2)},
        ),
        "status": st.dictionaries(st.sampled_from(["phase", "ready"]), json_values, max_size=2),
    }
)
objects_ = kube_objects | json_values
good_events = st.builds(
    lambda seq, typ, obj, old, extra: {"seq": seq, "type": typ, "object": obj, **old, **extra},
    st.integers(0, 12),
    st.sampled_from(["MODIFIED", "MODIFIED", "ADDED", "DELETED", ERROR]),
    objects_,
    st.just({}) | st.builds(lambda v: {"old": v}, objects_ | st.none()),
    st.just({}) | st.builds(lambda v: {"message": v}, json_values),
)
bad_events = st.sampled_from(
    [None, 3, "x", [], {"seq": "1", "type": "A"}, {"seq": True, "type": "A"}, {"seq": 1}, {"type": "A"}]
)
bodies = st.fixed_dictionaries(
    {"events": st.lists(good_events | bad_events, max_size=8) | st.lists(good_events, max_size=8)},
    optional={"log_id": st.sampled_from(["L1", "L2", "", 3]), "last_seq": st.integers(-1, 14)},
)


@given(
    reads=st.lists(bodies, min_size=1, max_size=4),
    last=st.none() | st.integers(0, 6),
    limit=st.none() | st.integers(1, 4),
)
def test_feed_annotated_is_feed_then_annotate(
    reads: list[dict[str, Any]], last: int | None, limit: int | None
) -> None:
    """The watch's one-pass path gives what feed then annotate give, read after read."""
    fast, slow = Sequencer(last), Sequencer(last)
    for read in reads:
        fed, noops = fast.feed_annotated(read, limit=limit)
        expected = slow.feed(read, limit=limit)
        annotated = [(ev, annotate(ev)) for ev in expected.events]
        assert fed.events == [a for _, a in annotated if a is not None]
        assert noops == [ev for ev, a in annotated if a is None]
        assert fed.error == expected.error
        assert (fast.last_seq, fast.log_id) == (slow.last_seq, slow.log_id)


@given(events=st.lists(good_events | bad_events, max_size=8))
def test_event_checks_in_c_passes_match_the_rules(events: list[Any]) -> None:
    """_parse's all-valid pass and position's seq pass keep exactly the well-formed events."""
    valid = [
        ev for ev in events if type(ev) is dict and type(ev.get("seq")) is int and type(ev.get("type")) is str
    ]
    items, error, _ = _parse({"events": events})
    assert items == [(ev["seq"], ev) for ev in valid]
    assert (error is None) == (len(valid) == len(events))
    seqs = [ev["seq"] for ev in events if type(ev) is dict and type(ev.get("seq")) is int]
    assert position({"log_id": "L", "events": events}) == (("L", max(seqs)) if seqs else None)


@given(st.lists(st.integers(0, 6), max_size=8))
def test_sorted_unique_keeps_the_first_of_each_seq(seqs_: list[int]) -> None:
    items = [(seq, {"n": n}) for n, seq in enumerate(seqs_)]
    first: dict[int, tuple[int, Any]] = {}
    for item in items:
        first.setdefault(item[0], item)
    assert _sorted_unique(items) == sorted(first.values(), key=lambda item: item[0])


def test_a_filtered_log_skips_other_rows_seqs_without_a_gap_and_reports_a_real_one() -> None:
    # A filtered view of a table's log: its events carry the table log's seqs, so they skip the
    # other rows'. The body's from_seq says it holds every event of the view after that seq.
    sequencer = Sequencer()
    sequencer.prime({"log_id": "a", "last_seq": 10, "from_seq": 0, "events": [{"seq": 4, "type": "ADDED"}]})
    fed = sequencer.feed(
        {
            "log_id": "a",
            "last_seq": 30,
            "from_seq": 10,
            "events": [{"seq": n, "type": "ADDED"} for n in (13, 29)],
        }
    )
    assert [(e.type, e.seq) for e in fed.events] == [("ADDED", 13), ("ADDED", 29)]
    # Nothing of the view in 31..40: no event, but the reader goes on from 40 (the server looked there).
    assert sequencer.feed({"log_id": "a", "last_seq": 40, "from_seq": 30, "events": []}).events == []
    assert sequencer.last_seq == 40
    # The log no longer holds 41..99 (retention): a GAP naming it, then the view's events.
    fed = sequencer.feed(
        {
            "log_id": "a",
            "last_seq": 120,
            "from_seq": 99,
            "retention": "changes of the last 7d",
            "events": [{"seq": 105, "type": "DELETED"}],
        }
    )
    gap, deleted = fed.events
    assert (gap.type, gap.fields["from_seq"], gap.fields["to_seq"]) == (GAP, 41, 99)
    assert gap.fields["retention"] == "changes of the last 7d"
    assert (deleted.type, deleted.seq) == ("DELETED", 105)
    # A page the reader already had (a repeated read): nothing twice.
    assert (
        sequencer.feed(
            {"log_id": "a", "last_seq": 120, "from_seq": 99, "events": [{"seq": 105, "type": "DELETED"}]}
        ).events
        == []
    )
