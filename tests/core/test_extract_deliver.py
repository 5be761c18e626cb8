"""A watch's two pure halves, driven directly: the shared extraction (reads -> events) and the
watch's own delivery (events -> lines -> dedupe -> debounce -> notice), and the resubscribe policy.

No tasks, no clock: every call gets ``now``. Hypothesis drives arbitrary interleavings and
checks the invariants the shell relies on.
"""

from __future__ import annotations

import json
import pickle
import re
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncai_watch import Limits, WatchError
from asyncai_watch.core.deliver import Delivery, EventRecord, Line
from asyncai_watch.core.events import EVENTS_MIME_TYPE, GAP, Event
from asyncai_watch.core.extract import Body, Extraction, ExtractionStateError, Pending
from asyncai_watch.core.feed import GiveUp, Resubscribe, Retry
from asyncai_watch.errors import BaselineError

JSON = "application/json"
LIMITS = Limits(debounce_quiet=3.0, debounce_max_wait=15.0, lines_per_notice=5)


@attrs.define
class Pipe:
    """One watch's two halves, as the runner joins them: extraction, then delivery."""

    x: Extraction
    d: Delivery

    def baseline(self, body: Body) -> str:
        return self.x.baseline(body)

    def read(self, body: Body) -> Pending:
        return self.x.read(body)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.d, name)


def watch(limits: Limits = LIMITS) -> Pipe:
    return Pipe(Extraction("memo://notes", limits), Delivery("w", "memo://notes", limits))


def policy_for(limits: Limits) -> Resubscribe:
    return Resubscribe(backoff=limits.backoff, healthy_after=limits.resubscribe_max)


def body(value: Any, mime_type: str = JSON) -> Body:
    return Body.parse(json.dumps(value), mime_type)


# --- examples -------------------------------------------------------------------------------------


def test_a_state_read_becomes_lines_then_one_notice_after_the_quiet_time() -> None:
    w = watch()
    assert w.baseline(body({"todo": "milk"})) == "state"
    lines, records = w.lines(w.read(body({"todo": "eggs", "owner": "ann"})))
    assert [line.text for line in lines] == ["MODIFIED todo (milk→eggs)", "ADDED owner"]
    assert records == []  # kept lines are recorded by add(), once dedupe had its say
    kept = w.add(lines, now=10.0)
    assert [r.outcome for r in kept] == ["kept", "kept"]
    assert w.deadline == 13.0
    assert w.due(12.9) is None
    notice = w.due(13.0)
    assert notice is not None
    assert notice.text == "MODIFIED todo (milk→eggs)\nADDED owner"
    assert dict(notice.meta) == {"name": "w", "uri": "memo://notes"}
    assert (w.events, w.notices, w.deadline) == (2, 1, None)


def test_each_line_moves_the_deadline_but_never_past_max_wait() -> None:
    w = watch()
    w.baseline(body({}))
    for t in range(0, 20, 2):  # a line every 2 s: the quiet time (3 s) never passes
        w.add([Line(f"line {t}")], now=float(t))
        assert w.deadline == min(t + 3.0, 15.0)
        if t >= 14:
            break
    notice = w.due(15.0)
    assert notice is not None
    assert notice.text.splitlines()[-1] == "+3 more"


def test_dedupe_drops_a_repeated_line_for_the_same_key() -> None:
    w = watch()
    w.baseline(body([]))
    records = w.add([Line("MODIFIED a (x)", "a"), Line("MODIFIED a (x)", "a"), Line("GAP", None)], 0.0)
    assert records == []  # lines without events record nothing
    notice = w.flush()
    assert notice is not None
    assert notice.text == "MODIFIED a (x)\nGAP"


def test_a_json_state_that_stops_being_json_is_an_error_line_and_the_baseline_stays() -> None:
    w = watch()
    w.baseline(body({"a": 1}))
    lines, _ = w.lines(w.read(Body.parse("this is {not json", JSON)))
    assert len(lines) == 1
    assert lines[0].text.startswith("ERROR memo://notes is served as application/json")
    assert "not JSON" in lines[0].text
    # The next good read diffs against the last good one, not against the broken text.
    lines, _ = w.lines(w.read(body({"a": 2})))
    assert [line.text for line in lines] == ["MODIFIED a (1→2)"]


def test_a_json_state_nested_past_the_parser_limit_is_an_error_line() -> None:
    w = watch()
    w.baseline(body({"a": 1}))
    lines, _ = w.lines(w.read(Body.parse("[" * 100_000 + "]" * 100_000, JSON)))
    assert next(line.text for line in lines).startswith("ERROR")
    assert "nested deeper than" in lines[0].text


def test_a_json_baseline_that_is_not_json_fails_the_start() -> None:
    with pytest.raises(WatchError, match=r"served as application/json but its body is not JSON"):
        watch().baseline(Body.parse("{oops", JSON))


def test_a_baseline_error_is_told_apart_by_its_type_and_pickles_whole() -> None:
    """The start tells a bad baseline from a failed read by its type; it crosses from the
    large-body worker as it was raised (its message, and its reason without ``watch_start: ``)."""
    with pytest.raises(BaselineError) as raised:
        watch().baseline(Body.parse("{oops", JSON))
    error = raised.value
    assert isinstance(error, WatchError)  # code that catches WatchError still catches it
    assert str(error).startswith("watch_start: memo://notes is served as application/json")
    assert error.reason == str(error).removeprefix("watch_start: ")
    back = pickle.loads(pickle.dumps(error))
    assert (type(back), str(back), back.reason) == (BaselineError, str(error), error.reason)


def test_text_state_still_diffs_as_a_whole() -> None:
    w = watch()
    w.baseline(Body.parse("line one", "text/plain"))
    lines, _ = w.lines(w.read(Body.parse("line two", "text/plain")))
    assert [line.text for line in lines] == ["CHANGED (line one→line two)"]


def test_event_log_objects_with_an_id_read_as_state_items_do() -> None:
    # One identity rule: an event-log object keyed by id reads "ADDED b", as in a state diff.
    w = watch()
    w.baseline(body({"events": []}, EVENTS_MIME_TYPE))
    pending = w.read(
        body({"events": [{"seq": 1, "type": "ADDED", "object": {"id": "b", "v": 1}}]}, EVENTS_MIME_TYPE)
    )
    assert [line.text for line in w.lines(pending)[0]] == ["ADDED b"]
    s = watch()
    s.baseline(body([]))
    assert [line.text for line in s.lines(s.read(body([{"id": "b", "v": 1}])))[0]] == ["ADDED b"]


def test_filter_results_become_lines_drops_and_errors() -> None:
    class Result:
        def __init__(self, line: str | None, error: str | None = None) -> None:
            self.line, self.error = line, error

    w = watch()
    w.baseline(body({}))
    pending = w.read(body({"a": 1, "b": 2, "c": 3}))
    lines, records = w.lines(pending, [Result("a!"), Result(None), Result(None, "KeyError: 'x'")])
    assert [line.text for line in lines] == ["a!", "filter error: KeyError: 'x'"]
    assert [(r.event.key, r.outcome) for r in records] == [("b", "dropped"), ("c", "error")]


def test_giving_up_flushes_what_was_pending_then_says_so() -> None:
    w = watch()
    w.baseline(body({}))
    w.add([Line("ADDED a", "a")], 0.0)
    pending, failure = w.failed("server went away", attempts=5)
    assert pending.text == "ADDED a"
    assert failure.meta["failed"] == "true"
    assert "5 resubscribe attempts failed (last: server went away)" in failure.text
    assert w.deadline is None


# --- resubscribe policy ---------------------------------------------------------------------------


def test_backoff_is_1_2_4_8_16_then_give_up() -> None:
    policy = policy_for(Limits())
    assert policy.subscribed(0.0) == 0
    decisions = [policy.ended(1.0)]
    for t in range(2, 8):
        decisions.append(policy.ended(float(t)))  # each attempt fails before it is up
    assert decisions[:5] == [Retry(1.0, 1), Retry(2.0, 2), Retry(4.0, 3), Retry(8.0, 4), Retry(16.0, 5)]
    assert decisions[5] == GiveUp(5)


def test_a_healthy_subscription_resets_the_backoff() -> None:
    policy = policy_for(Limits())
    policy.subscribed(0.0)
    assert policy.ended(0.5) == Retry(1.0, 1)
    assert policy.ended(1.0) == Retry(2.0, 2)  # the attempt failed
    assert policy.subscribed(3.0) == 2
    policy.updated()  # an update arrived: it works
    assert policy.ended(4.0) == Retry(1.0, 1)
    policy.subscribed(5.0)
    assert policy.ended(5.0 + 16.0) == Retry(1.0, 1)  # stayed up 16 s: healthy without an update


# --- properties -----------------------------------------------------------------------------------

texts = st.sampled_from(["ADDED a", "MODIFIED a", "ADDED b", "DELETED b", "GAP", "ERROR x"])
op = st.one_of(
    st.tuples(st.just("lines"), st.lists(st.tuples(texts, st.sampled_from(["a", "b", None])), max_size=6)),
    st.tuples(st.just("wait"), st.floats(0, 20, allow_nan=False)),
    st.tuples(st.just("give_up"), st.just(0)),
)


def shown(text: str) -> int:
    """How many lines a notice text stands for (``×N`` repeats and ``+N more`` counted)."""
    n = 0
    for line in text.splitlines():
        more = re.fullmatch(r"\+(\d+) more", line)
        if more:
            n += int(more.group(1))
            continue
        times = re.search(r" ×(\d+)$", line)
        n += int(times.group(1)) if times else 1
    return n


@given(
    ops=st.lists(op, max_size=40),
    quiet=st.floats(0, 5, allow_nan=False),
    extra=st.floats(0, 10, allow_nan=False),
)
def test_every_kept_line_is_in_exactly_one_notice_and_none_waits_past_max_wait(
    ops: list[tuple[str, Any]], quiet: float, extra: float
) -> None:
    limits = Limits(debounce_quiet=quiet, debounce_max_wait=quiet + extra, lines_per_notice=3)
    w = watch(limits)
    w.baseline(body({}))
    now = 0.0
    admitted = 0
    burst_start: float | None = None
    delivered = 0

    def deliver_due(until: float) -> None:
        nonlocal now, delivered, burst_start
        while w.deadline is not None and w.deadline <= until:
            now = max(now, w.deadline)
            notice = w.due(now)
            assert notice is not None
            assert burst_start is not None
            assert now - burst_start <= limits.debounce_max_wait + 1e-9
            delivered += shown(notice.text)
            burst_start = None
        now = until

    for kind, arg in ops:
        if kind == "wait":
            deliver_due(now + arg)
        elif kind == "lines":
            before = w.deadline
            records = w.add([Line(text, key) for text, key in arg], now)
            assert records == []
            if w.deadline is not None and before is None:
                burst_start = now
            # Dedupe: a keyed line equal to its key's last line is not admitted; count the rest.
            admitted += sum(1 for _ in arg)
        else:
            for notice in w.failed("gone", attempts=5)[:-1]:
                delivered += shown(notice.text)
            burst_start = None
    final = w.flush()
    if final is not None:
        delivered += shown(final.text)
    deduped = admitted - delivered
    assert deduped >= 0  # nothing appears that was not added
    # Every line that dedupe let through is in exactly one notice: re-count with a fresh dedupe.
    check = watch(limits)
    check.baseline(body({}))
    expected = 0
    for kind, arg in ops:
        if kind == "lines":
            for text, key in arg:
                if key is None or check.d._deduper.admit(key, text):
                    expected += 1
    assert delivered == expected


events_strategy = st.lists(st.integers(1, 30), max_size=12)


@given(reads=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 10)), max_size=15))
def test_event_log_delivers_each_seq_at_most_once(reads: list[tuple[int, int]]) -> None:
    """Reads of a growing ring (newest seq ``top``, ``window`` events kept) in any order."""
    w = watch(Limits(events_per_update=7))
    w.baseline(body({"events": []}, EVENTS_MIME_TYPE))
    seen: list[int] = []
    top_so_far = 0
    for top, window in reads:
        top = max(top, top_so_far)  # the log only grows
        top_so_far = top
        ring = [
            {"seq": s, "type": "ADDED", "object": {"id": str(s)}}
            for s in range(max(1, top - window + 1), top + 1)
        ]
        pending = w.read(body({"events": ring}, EVENTS_MIME_TYPE))
        for ev in pending.events:
            if ev.type != GAP:
                assert ev.seq is not None
                seen.append(ev.seq)
    assert len(seen) == len(set(seen))
    assert seen == sorted(seen)


@given(
    steps=st.lists(
        st.tuples(st.booleans(), st.booleans(), st.floats(0, 40, allow_nan=False)), min_size=1, max_size=30
    )
)
def test_resubscribe_delays_follow_the_backoff_and_give_up_after_five(
    steps: list[tuple[bool, bool, float]],
) -> None:
    """Each step: the attempt came up (or failed), got an update (or not), lasted some seconds.

    The first ending (of the watch's first subscription) always retries after 1 s. After that,
    each failed attempt doubles the delay (2, 4, 8, 16 s), a healthy subscription resets it,
    and the fifth failure in a row gives up.
    """
    policy = policy_for(Limits())
    now = 0.0
    policy.subscribed(now)
    failed = 0
    for i, (up, updated, lasted) in enumerate(steps):
        if up and i:
            policy.subscribed(now)
        if up and updated:
            policy.updated()
        start, now = now, now + lasted
        # Measured as the policy does, end minus start (float: not always exactly ``lasted``).
        healthy = up and (updated or now - start >= 16.0)
        decision = policy.ended(now)
        if i:
            failed = 0 if healthy else failed + 1
        if failed >= 5:
            assert decision == GiveUp(5)
            return
        assert decision == Retry([1.0, 2.0, 4.0, 8.0, 16.0][failed], failed + 1)
        now += decision.delay


def test_add_without_records_delivers_the_same() -> None:
    """records=False (nobody logs them) changes only the answer: dedupe and debounce as before."""
    ev = Event(type="MODIFIED", key="a", item={"id": "a"}, old={"id": "a", "x": 1}, changed=("x",))
    lines = [Line("MODIFIED a (x)", "a", ev), Line("MODIFIED a (x)", "a", ev), Line("GAP", None)]
    with_records, without = watch(), watch()
    records = with_records.add(lines, 1.0)
    assert [(r.outcome, r.line) for r in records] == [
        ("kept", "MODIFIED a (x)"),
        ("deduped", "MODIFIED a (x)"),
    ]
    assert records == [
        EventRecord(ev, "kept", "MODIFIED a (x)"),
        EventRecord(ev, "deduped", "MODIFIED a (x)"),
    ]
    assert without.add(lines, 1.0, records=False) == []
    assert without.deadline == with_records.deadline
    assert without.flush() == with_records.flush()
    assert without.add(lines[:1], 2.0, records=False) == []  # remembered: deduped
    assert without.flush() is None


def test_default_lines_are_plain_lines() -> None:
    """Delivery.lines builds its Lines without attrs' __init__: the same values all the same."""
    w = watch()
    w.baseline(body({"a": 1}))
    lines, _ = w.lines(w.read(body({"a": 2})))
    (line,) = lines
    assert line == Line("MODIFIED a (1→2)", "a", line.event, default=True)
    assert attrs.asdict(line, recurse=False) == attrs.asdict(
        Line(line.text, line.key, line.event, default=True), recurse=False
    )


# --- order, and what a slow filter is handed ------------------------------------------------------


def test_an_extraction_fed_out_of_order_raises() -> None:
    x = Extraction("memo://notes", LIMITS)
    with pytest.raises(ExtractionStateError, match="no baseline yet"):
        x.read(body({}))
    x.baseline(body({}))
    with pytest.raises(ExtractionStateError, match="already has a baseline"):
        x.baseline(body({}))


def test_watches_sharing_one_extraction_each_get_their_own_lines_and_dedupe() -> None:
    x = Extraction("memo://notes", LIMITS)
    x.baseline(body({"a": 1}))
    a, b = Delivery("a", "memo://notes", LIMITS), Delivery("b", "memo://notes", LIMITS)
    pending = x.read(body({"a": 2}))  # extracted once, for both
    a.add(a.lines(pending)[0], 0.0)
    b.add(b.lines(pending)[0], 0.0)
    b.add(b.lines(pending)[0], 1.0)  # b sees the same line twice: deduped for b only
    assert (a.flush(), b.flush()) != (None, None)
    assert (a.events, b.events) == (1, 2)


def test_events_a_busy_filter_has_not_taken_are_joined_never_dropped_silently() -> None:
    ev = [Event(type="ADDED", key=f"k{i}", item={"id": f"k{i}"}) for i in range(5)]
    first, second = Pending(tuple(ev[:3]), ("note 1",)), Pending(tuple(ev[3:]), ("note 2",))
    joined = first.then(second, max_events=10)
    assert joined.events == tuple(ev)
    assert joined.notes == ("note 1", "note 2")
    capped = first.then(second, max_events=2)
    assert capped.events == tuple(ev[3:])
    assert capped.notes[-1] == "+3 earlier changes not shown (a slow filter fell behind)"


def test_an_extraction_pickles_with_its_state_and_reads_on_where_it_left_off() -> None:
    import pickle

    x = Extraction("memo://notes", LIMITS)
    x.baseline(body({"a": 1}))
    moved = pickle.loads(pickle.dumps(x))  # what the large-body worker takes over
    assert [e.key for e in moved.read(body({"a": 2})).events] == ["a"]
    log = Extraction("memo://log", LIMITS)
    log.baseline(
        body(
            {"log_id": "L", "events": [{"seq": 4, "type": "ADDED", "object": {"id": "x"}}]}, EVENTS_MIME_TYPE
        )
    )
    assert log.position == ("L", 4)
    assert pickle.loads(pickle.dumps(log)).position == ("L", 4)


def test_a_read_with_more_changes_than_shown_says_how_many_first() -> None:
    """A 1,000-row insert under events_per_update=100 and 5 lines a notice: the notice's first
    line says how many rows changed, and of which kinds; it used to show ``ADDED 0 ... +N more``,
    hiding the size (the count was a note after the 100 events, past the notice's line cap)."""
    limits = attrs.evolve(LIMITS, events_per_update=100)
    w = watch(limits)
    w.baseline(body({"gone": 1}))
    lines, _records = w.lines(w.read(body({f"row-{i}": i for i in range(1000)})))
    w.add(lines, now=0.0)
    notice = w.due(100.0)
    assert notice is not None
    shown = notice.text.splitlines()
    assert shown[0] == (
        "1,001 changes in one update (ADDED 1,000, DELETED 1); the first 100 follow, the rest are not "
        "shown (Limits.events_per_update=100)"
    )
    assert shown[1:] == ["ADDED row-0", "ADDED row-1", "ADDED row-2", "ADDED row-3", "+96 more"]
