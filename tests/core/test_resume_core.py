"""Resuming after a restart, the pure rules: what a saved checkpoint and the current read make."""

from __future__ import annotations

import json
from typing import Any

from asyncai_watch.core.events import EVENTS_MIME_TYPE
from asyncai_watch.core.extract import Body
from asyncai_watch.core.notice import SOURCE_WATCH, Notice
from asyncai_watch.core.resume import (
    MAX_CATCH_UP_LINES,
    REDELIVERED_META_KEY,
    Checkpoint,
    Checkpoints,
    Outcome,
    away_notice,
    catch_up,
    catch_up_log,
    catch_up_state,
    redelivered,
)


def log(log_id: str, seqs: range, *, last_seq: int | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "log_id": log_id,
        "events": [{"seq": s, "type": "ADDED", "object": {"id": f"o{s}"}} for s in seqs],
    }
    if last_seq is not None:
        body["last_seq"] = last_seq
    return body


def test_an_event_log_read_from_its_saved_position_catches_up_every_missed_event_in_order() -> None:
    got, sequencer = catch_up_log(("L1", 5), log("L1", range(3, 11)))
    assert got.outcome == Outcome("caught_up", 5)
    assert [ev.seq for ev in got.events] == [6, 7, 8, 9, 10]
    assert sequencer.last_seq == 10
    assert sequencer.log_id == "L1"


def test_an_event_log_with_nothing_new_is_resumed() -> None:
    got, _ = catch_up_log(("L1", 10), log("L1", range(1, 11)))
    assert got.outcome.kind == "resumed"
    assert "resumed" in got.outcome.line("k", "kcp://x")


def test_a_position_past_retention_is_a_gap_then_the_events_still_held() -> None:
    got, _ = catch_up_log(("L1", 5), log("L1", range(20, 23)))
    assert [ev.type for ev in got.events] == ["GAP", "ADDED", "ADDED", "ADDED"]
    assert got.outcome.kind == "caught_up"
    assert got.outcome.changes == 3
    assert got.outcome.gaps == 1
    assert "6..19 fell out of the server's retention" in got.outcome.line("k", "kcp://x")


def test_a_restarted_log_is_a_reset_gap_even_when_its_seqs_run_past_ours() -> None:
    got, _ = catch_up_log(("L1", 5), log("L2", range(1, 9)))
    assert got.events[0].type == "GAP"
    assert got.events[0].fields["reason"] == "reset"
    assert got.outcome.changes == 8
    assert "log restarted" in got.outcome.reason


def test_no_saved_position_is_a_fresh_baseline_saying_why() -> None:
    got, sequencer = catch_up_log(None, log("L1", range(1, 4)))
    assert got.outcome == Outcome("fresh", reason="no position was saved for it")
    assert sequencer.last_seq == 3
    assert "fresh baseline (no position was saved for it)" in got.outcome.line("k", "u")


def test_a_state_watch_reports_the_net_change_between_its_saved_body_and_the_current_one() -> None:
    old = json.dumps({"a": 1, "b": 2, "c": 3})
    new = json.dumps({"a": 1, "b": 20, "d": 4})
    got = catch_up_state(
        Checkpoint.of_state("memo://n", old, "application/json"), Body.of(new, "application/json")
    )
    assert got.outcome == Outcome("caught_up", 3)
    assert sorted((ev.type, ev.key) for ev in got.events) == [
        ("ADDED", "d"),
        ("DELETED", "c"),
        ("MODIFIED", "b"),
    ]


def test_a_state_changed_and_changed_back_is_resumed_with_nothing_to_report() -> None:
    body = json.dumps([{"id": "x", "v": 1}])
    got = catch_up_state(
        Checkpoint.of_state("memo://n", body, "application/json"), Body.of(body, "application/json")
    )
    assert got.outcome.kind == "resumed"
    assert got.events == ()


def test_a_body_over_the_cap_is_not_kept_and_the_restart_says_why() -> None:
    cp = Checkpoint.of_state("memo://n", "x" * 101, "text/plain", cap=100)
    assert cp.body is None
    got = catch_up_state(cp, Body.of("y", "text/plain"))
    assert got.outcome.kind == "fresh"
    assert "101 bytes, over the 100 kept for resuming (MAX_SAVED_BODY)" in got.outcome.reason


def test_a_text_state_is_diffed_whole() -> None:
    got = catch_up_state(Checkpoint.of_state("memo://n", "hello", "text/plain"), Body.of("bye", "text/plain"))
    assert got.outcome == Outcome("caught_up", 1)
    assert got.events[0].type == "CHANGED"


def test_catch_up_picks_the_rule_by_the_current_reads_shape() -> None:
    cp = Checkpoint("kcp://x", ("L1", 1))
    got = catch_up(cp, Body.of(json.dumps(log("L1", range(1, 4))), EVENTS_MIME_TYPE))
    assert got.outcome == Outcome("caught_up", 2)


def test_the_away_notice_lists_every_missed_change_up_to_its_cap() -> None:
    got, _ = catch_up_log(("L1", 0), log("L1", range(1, MAX_CATCH_UP_LINES + 6)))
    notice = away_notice("k", "kcp://x", got.events)
    lines = notice.text.splitlines()
    assert lines[0].startswith(f"While you were away ({MAX_CATCH_UP_LINES + 5} changes")
    assert len(lines) == MAX_CATCH_UP_LINES + 2
    assert lines[-1] == "+5 more changes not shown (MAX_CATCH_UP_LINES)"
    assert notice.meta["name"] == "k"
    assert notice.source == SOURCE_WATCH


def test_a_redelivered_notice_is_flagged_in_text_and_meta() -> None:
    again = redelivered(Notice(SOURCE_WATCH, "ADDED x", meta={"name": "n"}))
    assert again.meta == {"name": "n", REDELIVERED_META_KEY: "1"}
    assert again.text.startswith("(Redelivered:")
    assert again.text.endswith("ADDED x")


def test_checkpoints_are_batched_into_one_write_per_window() -> None:
    cps = Checkpoints(window=1.0)
    assert cps.quiet("a", Checkpoint("u", ("L", 1)), now=10.0) == 11.0
    for i in range(2, 500):  # a busy watch: the deadline does not move and one row is kept
        assert cps.quiet("a", Checkpoint("u", ("L", i)), now=10.0 + i / 1000) == 11.0
    assert not cps.due(10.9)
    assert cps.due(11.0)
    assert cps.take() == {"a": Checkpoint("u", ("L", 499))}
    assert cps.deadline is None
    assert not cps.due(100.0)


def test_a_watch_holding_undelivered_lines_keeps_its_checkpoint_until_they_are_handed() -> None:
    cps = Checkpoints(window=1.0)
    cps.hold("a")
    assert cps.quiet("a", Checkpoint("u", ("L", 7)), now=0.0) is None
    assert cps.take() == {}
    cps.handed("a", Checkpoint("u", ("L", 9)), now=1.0)
    cps.quiet("a", Checkpoint("u", ("L", 12)), now=1.5)
    assert cps.take() == {"a": Checkpoint("u", ("L", 12))}


def test_a_stopped_watch_has_its_checkpoint_deleted() -> None:
    cps = Checkpoints()
    cps.quiet("a", Checkpoint("u", ("L", 1)), now=0.0)
    cps.forget("a", now=0.1)
    assert cps.take() == {"a": None}
