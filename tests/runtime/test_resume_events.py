"""A redelivered notice keeps its typed events: the outbox stores them, versioned."""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest

from asyncai_watch import McpResourceSource
from asyncai_watch.core.notice import SOURCE_RESTORE, SOURCE_WATCH, Notice, NoticeEvent
from asyncai_watch.core.resume import REDELIVERED_META_KEY
from asyncai_watch.notice_json import notice_record, notice_schema
from asyncai_watch.resume_store import OUTBOX_RECORD_VERSION, ResumeStore
from asyncai_watch.runtime.manager import WatchManager
from asyncai_watch.testing import FakeClock
from tests.support.cli import WAIT, cli, wait_until_watching
from tests.support.managers import IMMEDIATE, NOTES, memo_fake
from tests.support.memo import memo_http_server

VALIDATOR = jsonschema.Draft202012Validator(notice_schema())

EVENTS = (
    NoticeEvent(
        type="MODIFIED",
        watch="notes",
        uri=NOTES,
        key="todo",
        paths=("a.b", "c"),
        old={"a": {"b": 1}, "c": [1, 2]},
        new={"a": {"b": 2}, "c": None},
        line="MODIFIED todo (a.b, c)",
    ),
    NoticeEvent(
        type="GAP",
        watch="notes",
        uri=NOTES,
        seq=7,
        time="2026-12-05T03:00:00Z",
        message="GAP: 3 events missed",
        fields={"missed": 3, "from_seq": 4, "to_seq": 6, "reason": "truncated"},
        line="GAP: 3 events missed",
    ),
)


def test_a_kept_notice_comes_back_with_its_typed_events(tmp_path: Path) -> None:
    notice = Notice(SOURCE_WATCH, "two lines", meta={"name": "notes", "uri": NOTES}, events=EVENTS)
    with ResumeStore(tmp_path / "s.sqlite") as store:
        row = store.hand(notice)
    with ResumeStore(tmp_path / "s.sqlite") as store:
        [(again_id, again)] = store.pending()
    assert again_id == row
    assert again == notice
    assert tuple(again.events) == EVENTS


def test_a_row_from_a_store_written_before_events_were_kept_comes_back_as_text_and_meta(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.sqlite"
    old = sqlite3.connect(path)  # the outbox as the first version of the store made it
    old.executescript(
        "CREATE TABLE outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, source TEXT NOT NULL, "
        "text TEXT NOT NULL, meta TEXT NOT NULL);"
        "INSERT INTO outbox (source, text, meta) VALUES ('watch', 'ADDED k', '{\"name\": \"notes\"}');"
    )
    old.commit()
    old.close()
    with ResumeStore(path) as store:
        assert store.pending() == [(1, Notice(SOURCE_WATCH, "ADDED k", meta={"name": "notes"}))]
        store.hand(Notice(SOURCE_WATCH, "ADDED j", meta={"name": "notes"}, events=EVENTS[:1]))
    with ResumeStore(path) as store:  # the old table took the new column: new rows keep events
        assert [tuple(n.events) for _, n in store.pending()] == [(), EVENTS[:1]]


@pytest.mark.parametrize(
    "record",
    [
        json.dumps({"v": OUTBOX_RECORD_VERSION + 1, "events": [{"shape": "from the future"}]}),
        json.dumps({"v": OUTBOX_RECORD_VERSION, "events": [{"type": 3}]}),
        json.dumps({"v": OUTBOX_RECORD_VERSION, "events": "not a list"}),
        "not JSON",
    ],
)
def test_a_record_of_another_version_or_unreadable_leaves_the_notice_without_events(
    tmp_path: Path, record: str
) -> None:
    path = tmp_path / "s.sqlite"
    with ResumeStore(path) as store:
        store.hand(Notice(SOURCE_WATCH, "ADDED k", meta={"name": "notes"}, events=EVENTS))
    with sqlite3.connect(path) as db:
        db.execute("UPDATE outbox SET record = ?", (record,))
    db.close()
    with ResumeStore(path) as store:
        [(_, notice)] = store.pending()
    assert notice == Notice(SOURCE_WATCH, "ADDED k", meta={"name": "notes"})


@pytest.mark.anyio
async def test_a_redelivered_notice_has_its_events_and_its_json_record_validates(tmp_path: Path) -> None:
    path, fake = tmp_path / "state.json", memo_fake()
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path) as m:
        await m.watch_start("notes", NOTES)
        fake.update(NOTES, {"k": {"n": 1}})
        with anyio.fail_after(30):
            first = await m.notices.receive()
        # The turn that read it never completes: no notice_taken.
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path) as m:
        with anyio.fail_after(30):
            assert (await m.notices.receive()).source == SOURCE_RESTORE
            again = await m.notices.receive()
    assert again.meta[REDELIVERED_META_KEY] == "1"
    assert [e.type for e in again.events] == ["ADDED"]
    assert tuple(again.events) == tuple(first.events)
    record = notice_record(again, server="memo")
    VALIDATOR.validate(record)
    assert record["redelivered"] is True
    assert record["events"][0]["key"] == "k"
    assert record["events"][0]["new"] == {"n": 1}


@pytest.mark.anyio
async def test_the_cli_prints_a_redelivered_notice_with_its_events_and_the_record_validates(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state.json"
    args = ["watch", NOTES, "--debounce", "0", "--json", "--name", "notes", "--watch-state", str(state)]
    async with memo_http_server() as (url, _), McpResourceSource.http(url) as writer:
        async with cli(*args, "--server", f"memo={url}") as (proc, out):
            await wait_until_watching(proc)
            await writer.call_tool("memo_set", {"key": "todo", "value": "milk"})
            printed: dict[str, Any] = json.loads(await out.next())
            proc.send_signal(signal.SIGTERM)
            with anyio.fail_after(WAIT):
                assert await proc.wait() == 0
        # As if the process had died between handing that notice out and printing it: its row,
        # events and all, is still in the outbox (the CLI marks a notice taken once printed).
        events = tuple(
            NoticeEvent(
                type=e["type"], watch=e["watch"], uri=e["uri"], key=e["key"], new=e["new"], line=e["line"]
            )
            for e in printed["events"]
        )
        with ResumeStore.beside(state) as store:
            store.hand(
                Notice(SOURCE_WATCH, "ADDED todo", meta={"name": "notes", "uri": NOTES}, events=events)
            )
        async with cli(*args, "--server", f"memo={url}") as (proc, out):
            restore = json.loads(await out.next())
            again = json.loads(await out.next())
            proc.send_signal(signal.SIGTERM)
            with anyio.fail_after(WAIT):
                assert await proc.wait() == 0
    assert restore["kind"] == "watch.restore"
    VALIDATOR.validate(again)
    assert again["redelivered"] is True
    assert again["lines"][-1] == "ADDED todo"
    assert again["events"] == printed["events"]
    assert [(e["type"], e["key"], e["new"]) for e in again["events"]] == [("ADDED", "todo", "milk")]
