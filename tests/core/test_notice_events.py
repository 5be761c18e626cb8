"""A watch's notice carries its events typed, and a debounce window reads as its net change."""

from __future__ import annotations

import json
from typing import Any

from asyncai_watch import Limits
from asyncai_watch.core.deliver import Delivery, Line
from asyncai_watch.core.events import EVENTS_MIME_TYPE
from asyncai_watch.core.extract import Body, Extraction
from asyncai_watch.core.notice import Notice, NoticeEvent
from tests.support.notice_events import LIMITS, watch


def summary(notice: Notice) -> list[tuple[str, str | None, Any, Any]]:
    return [(ev.type, ev.key, ev.old, ev.new) for ev in notice.events]


def test_a_torn_write_in_one_window_reads_as_one_modified() -> None:
    w = watch({"port": 8080})
    w.read({"error": "unexpected end of data"}, 0.0)  # the half-written file, read once
    w.read({"port": 8081}, 0.5)
    notice = w.delivery.due(2.0)
    assert notice is not None
    assert notice.text == "MODIFIED port (8080→8081)"
    assert summary(notice) == [("MODIFIED", "port", 8080, 8081)]
    assert notice.events[0].line == "MODIFIED port (8080→8081)"


def test_a_window_whose_changes_cancel_out_sends_no_notice() -> None:
    w = watch({"a": 1})
    w.read({"a": 1, "b": 2}, 0.0)
    w.read({"a": 1}, 0.5)
    assert w.delivery.deadline is not None
    assert w.delivery.due(2.0) is None
    assert w.delivery.deadline is None


def test_separate_windows_are_not_reduced_together() -> None:
    w = watch({"a": 1})
    w.read({"a": 2}, 0.0)
    first = w.delivery.due(1.0)
    w.read({"a": 1}, 5.0)
    second = w.delivery.due(6.0)
    assert first is not None
    assert second is not None
    assert (first.text, second.text) == ("MODIFIED a (1→2)", "MODIFIED a (2→1)")


def test_each_event_is_typed_with_its_watch_uri_key_paths_and_values() -> None:
    w = watch({"svc": {"mode": "off", "n": 1}, "gone": 1})
    w.read({"svc": {"mode": "on", "n": 1}, "new": [1]}, 0.0)
    notice = w.delivery.due(1.0)
    assert notice is not None
    assert notice.events == (
        NoticeEvent(
            type="MODIFIED",
            watch="cfg",
            uri="file:///config.json",
            key="svc",
            paths=("mode",),
            old={"mode": "off", "n": 1},
            new={"mode": "on", "n": 1},
            line="MODIFIED svc (mode: off→on)",
        ),
        NoticeEvent(
            type="ADDED", watch="cfg", uri="file:///config.json", key="new", new=[1], line="ADDED new"
        ),
        NoticeEvent(
            type="DELETED", watch="cfg", uri="file:///config.json", key="gone", old=1, line="DELETED gone"
        ),
    )
    assert notice.text.splitlines() == [ev.line for ev in notice.events]


def test_event_log_events_are_each_a_fact_and_never_reduced() -> None:
    log = {"log_id": "L", "events": []}
    w = watch(log, EVENTS_MIME_TYPE)
    pod = {"id": "pod-1", "phase": "Pending"}
    events = [
        {"seq": 1, "type": "ADDED", "object": pod, "time": "2026-12-05T01:00:00Z"},
        {"seq": 2, "type": "DELETED", "object": pod, "time": "2026-12-05T01:00:01Z"},
    ]
    w.read({"log_id": "L", "events": events}, 0.0, EVENTS_MIME_TYPE)
    notice = w.delivery.due(1.0)
    assert notice is not None
    assert [(ev.type, ev.key, ev.seq, ev.time) for ev in notice.events] == [
        ("ADDED", "pod-1", 1, "2026-12-05T01:00:00Z"),
        ("DELETED", "pod-1", 2, "2026-12-05T01:00:01Z"),
    ]


def test_a_gap_is_typed_with_its_seqs() -> None:
    w = watch(
        {"log_id": "L", "events": [{"seq": 1, "type": "ADDED", "object": {"id": "a"}}]}, EVENTS_MIME_TYPE
    )
    w.read(
        {"log_id": "L", "events": [{"seq": 5, "type": "ADDED", "object": {"id": "b"}}]}, 0.0, EVENTS_MIME_TYPE
    )
    notice = w.delivery.due(1.0)
    assert notice is not None
    gap, added = notice.events
    assert (gap.type, gap.message) == ("GAP", "GAP: missed 3 events (seq 2-4)")
    assert (gap.fields["missed"], gap.fields["from_seq"], gap.fields["to_seq"]) == (3, 2, 4)
    assert (added.type, added.key, added.seq) == ("ADDED", "b", 5)


def test_a_bad_read_is_an_error_event() -> None:
    w = watch({"a": 1})
    w.read("{not json", 0.0)
    notice = w.delivery.due(1.0)
    assert notice is not None
    [ev] = notice.events
    assert ev.type == "ERROR"
    assert ev.message is not None
    assert "not JSON" in ev.message


def test_a_failure_notice_is_typed() -> None:
    d = Delivery("cfg", "memo://x", LIMITS)
    [notice] = d.failed("connection refused", 5)
    [ev] = notice.events
    assert (ev.type, ev.message, ev.fields) == ("FAILED", "connection refused", {"attempts": 5})
    assert notice.meta["failed"] == "true"


def test_a_filtered_watch_keeps_the_filters_last_line_for_a_reduced_object() -> None:
    x = Extraction("memo://x", LIMITS)
    x.baseline(Body.of('{"a": 1}', "application/json"))
    d = Delivery("f", "memo://x", LIMITS)
    for now, value in ((0.0, '{"a": 2}'), (0.5, '{"a": 3}')):
        (ev,) = x.read(Body.of(value, "application/json")).events
        d.add([Line(f"a is now {ev.new}", ev.key, ev)], now)
    notice = d.due(2.0)
    assert notice is not None
    assert notice.text == "a is now 3"
    assert [(ev.type, ev.old, ev.new) for ev in notice.events] == [("MODIFIED", 1, 3)]


def test_a_long_burst_carries_at_most_events_per_update_events_and_counts_the_rest() -> None:
    limits = Limits(debounce_quiet=1.0, debounce_max_wait=10.0, events_per_update=10)
    x = Extraction("memo://x", limits)
    x.baseline(Body.of("{}", "application/json"))
    d = Delivery("w", "memo://x", limits)
    for i in range(3):  # three reads of 5 new keys each: 15 events in one window
        state = {f"k{j}": 1 for j in range(5 * (i + 1))}
        lines, _ = d.lines(x.read(Body.of(json.dumps(state), "application/json")))
        d.add(lines, i * 0.1)
    notice = d.due(5.0)
    assert notice is not None
    assert len(notice.text.splitlines()) == 15  # the text shows every line, as before (under the line cap)
    *events, note = notice.events
    assert len(events) == 10
    assert (note.type, note.message) == ("NOTE", "+5 more events not carried (Limits.events_per_update=10)")
