"""A watch's ``on_event`` filter runs on what it missed while the agent was down, as on live events."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest

from asyncai_watch import McpResourceSource
from asyncai_watch.core.deliver import Delivery
from asyncai_watch.core.events import EVENTS_MIME_TYPE
from asyncai_watch.core.extract import Pending
from asyncai_watch.core.notice import SOURCE_RESTORE, SOURCE_WATCH, Notice
from asyncai_watch.core.resume import Outcome, away_filtered, catch_up_log
from asyncai_watch.filters import FilterOutcome
from asyncai_watch.runtime.manager import WatchManager
from asyncai_watch.testing import FakeClock
from tests.support.cli import WAIT, cli, wait_until_watching
from tests.support.managers import IMMEDIATE, NOTES, memo_fake
from tests.support.memo import memo_http_server
from tests.support.resume_logs import LOG, log_body, log_fake

pytestmark = pytest.mark.anyio

# Drops "noise", upper-cases every other key: its lines are not the default lines.
KEEP_SIGNAL = 'None if event["key"] == "noise" else event["type"] + " " + event["key"].upper()'


def log(seqs: range) -> dict[str, Any]:
    return {"log_id": "L1", "events": [{"seq": s, "type": "ADDED", "object": {"id": f"o{s}"}} for s in seqs]}


# -- the pure rule ----------------------------------------------------------------------------


def test_events_the_filter_dropped_are_not_shown_and_the_outcome_counts_them() -> None:
    got, _ = catch_up_log(("L1", 0), log(range(1, 5)))
    results = [
        FilterOutcome(line="one"),
        FilterOutcome(),  # dropped
        FilterOutcome(error="KeyError: 'x'"),
        FilterOutcome(),  # dropped
    ]
    lines, records = Delivery("k", "kcp://x").lines(Pending(got.events), results)
    outcome, notice = away_filtered("k", "kcp://x", got, lines, records)
    assert outcome == Outcome("caught_up", 2, dropped=2)
    assert outcome.line("k", "kcp://x") == (
        "- k kcp://x: restored, caught up 2 changes made while the agent was down "
        "(2 more dropped by its filter)"
    )
    assert notice is not None
    assert notice.text.splitlines() == [
        "While you were away (2 changes to kcp://x while the agent was down):",
        "one",
        "filter error: KeyError: 'x'",
    ]
    assert [(e.type, e.seq, e.line) for e in notice.events] == [
        ("ADDED", 1, "one"),
        ("ERROR", None, "filter error: KeyError: 'x'"),
    ]


def test_every_missed_event_dropped_by_the_filter_is_resumed_with_no_notice() -> None:
    got, _ = catch_up_log(("L1", 0), log(range(1, 4)))
    lines, records = Delivery("k", "kcp://x").lines(Pending(got.events), [FilterOutcome()] * 3)
    outcome, notice = away_filtered("k", "kcp://x", got, lines, records)
    assert notice is None
    assert outcome == Outcome("resumed", dropped=3)
    assert outcome.line("k", "kcp://x") == (
        "- k kcp://x: restored, resumed (3 changes made while the agent was down, each dropped by its filter)"
    )


def test_a_gap_the_filter_dropped_still_says_why_in_the_restore_line() -> None:
    got, _ = catch_up_log(("L0", 0), log(range(1, 3)))  # a new log_id: a GAP, then two events
    assert got.outcome.gaps == 1
    lines, records = Delivery("k", "kcp://x").lines(Pending(got.events), [FilterOutcome()] * 3)
    outcome, notice = away_filtered("k", "kcp://x", got, lines, records)
    assert notice is None
    assert outcome.kind == "caught_up"
    assert "2 dropped by its filter; the server's log restarted" in outcome.line("k", "kcp://x")


# -- through the manager, with the real filter engine -------------------------------------------


async def receive(m: WatchManager) -> Notice:
    with anyio.fail_after(30):
        return await m.notices.receive()


async def test_a_filtered_state_watch_catches_up_with_its_filters_lines_only(tmp_path: Path) -> None:
    path, fake = tmp_path / "state.json", memo_fake()
    fake.set(NOTES, {"a": 1})
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path) as m:
        await m.watch_start("notes", NOTES, on_event=KEEP_SIGNAL)
        fake.update(NOTES, {"a": 1, "noise": 1})  # live: dropped, no notice
        fake.update(NOTES, {"a": 1, "noise": 1, "b": 1})
        live = await receive(m)
        assert live.text == "ADDED B"
        m.notice_taken(live)
    fake.set(NOTES, {"a": 2, "noise": 2, "b": 1, "c": 1})  # while down: a, noise, c
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path) as m:
        restore = await receive(m)
        assert restore.source == SOURCE_RESTORE
        assert (
            "- notes memo://notes: restored, caught up 2 changes made while the agent was down "
            "(1 more dropped by its filter)"
        ) in restore.text
        away = await receive(m)
        assert away.source == SOURCE_WATCH
        lines = away.text.splitlines()
        assert lines[0].startswith("While you were away (2 changes to memo://notes")
        assert sorted(lines[1:]) == ["ADDED C", "MODIFIED A"]
        assert sorted((e.type, e.key, e.line) for e in away.events) == [
            ("ADDED", "c", "ADDED C"),
            ("MODIFIED", "a", "MODIFIED A"),
        ]
        fake.update(NOTES, {"a": 2, "noise": 3, "b": 1, "c": 1, "d": 1})
        assert (await receive(m)).text == "ADDED D"  # then live, the same filter


async def test_missed_changes_all_dropped_by_the_filter_make_no_notice(tmp_path: Path) -> None:
    path, fake = tmp_path / "state.json", memo_fake()
    fake.set(NOTES, {"a": 1})
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path) as m:
        await m.watch_start("notes", NOTES, on_event=KEEP_SIGNAL)
    fake.set(NOTES, {"a": 1, "noise": 1})
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path) as m:
        restore = await receive(m)
        assert (
            "notes memo://notes: restored, resumed (1 change made while the agent was down, "
            "each dropped by its filter)"
        ) in restore.text
        fake.update(NOTES, {"a": 1, "noise": 1, "x": 1})
        assert (await receive(m)).text == "ADDED X"  # the next notice is live: no catch-up
        assert m.watch_list()[0].events == 2  # the one it caught up on, and the live one
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path) as m:
        # The dropped change moved the checkpoint: it is not read again.
        assert "restored, resumed (nothing changed" in (await receive(m)).text


async def test_a_filtered_event_log_catches_up_through_the_filter_in_order(tmp_path: Path) -> None:
    path, fake = tmp_path / "state.json", log_fake()
    odd_only = 'f"pod {event[\'seq\']}" if event["seq"] % 2 else None'
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path) as m:
        await m.watch_start("pods", LOG, on_event=odd_only)
    fake.set(LOG, log_body("L1", range(1, 9)), mime_type=EVENTS_MIME_TYPE)  # 4..8 while down
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path) as m:
        restore = await receive(m)
        assert "pods kcp://pods: restored, caught up 2 changes" in restore.text
        assert "(3 more dropped by its filter)" in restore.text
        away = await receive(m)
        assert away.text.splitlines()[1:] == ["pod 5", "pod 7"]
        assert [e.seq for e in away.events] == [5, 7]


# -- end to end: the CLI, SIGKILLed --------------------------------------------------------------


async def next_record(out: Any) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(await out.next())
    return record


async def test_the_cli_killed_and_started_again_prints_what_it_missed_through_its_filter(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state.json"
    args = ["watch", NOTES, "--debounce", "0", "--json", "--name", "notes", "--on-event", KEEP_SIGNAL]
    args += ["--watch-state", str(state)]
    async with memo_http_server() as (url, _), McpResourceSource.http(url) as writer:
        async with cli(*args, "--server", f"memo={url}") as (proc, out):
            await wait_until_watching(proc)
            await writer.call_tool("memo_set", {"key": "todo", "value": "milk"})
            assert (await next_record(out))["lines"] == ["ADDED TODO"]
            proc.send_signal(signal.SIGKILL)
            with anyio.fail_after(WAIT):
                assert await proc.wait() == -signal.SIGKILL
        # While it is down: one change its filter drops, one it keeps.
        await writer.call_tool("memo_set", {"key": "noise", "value": "x"})
        await writer.call_tool("memo_set", {"key": "cat", "value": "fed"})
        async with cli(*args, "--server", f"memo={url}") as (proc, out):
            restore = await next_record(out)
            assert restore["kind"] == "watch.restore"
            assert any(
                "notes memo://notes: restored, caught up 1 change made while the agent was down "
                "(1 more dropped by its filter)" in line
                for line in restore["lines"]
            ), restore["lines"]
            away = await next_record(out)
            if away["redelivered"]:  # killed between printing "ADDED TODO" and marking it taken
                assert away["lines"][-1] == "ADDED TODO"
                away = await next_record(out)
            assert away["lines"] == [
                "While you were away (1 change to memo://notes while the agent was down):",
                "ADDED CAT",
            ]
            assert [(e["type"], e["key"], e["line"]) for e in away["events"]] == [
                ("ADDED", "cat", "ADDED CAT")
            ]
            await wait_until_watching(proc)
            await writer.call_tool("memo_set", {"key": "noise", "value": "y"})
            await writer.call_tool("memo_set", {"key": "dog", "value": "out"})
            assert (await next_record(out))["lines"] == ["ADDED DOG"]  # live, the same filter
            proc.send_signal(signal.SIGTERM)
            with anyio.fail_after(WAIT):
                assert await proc.wait() == 0
