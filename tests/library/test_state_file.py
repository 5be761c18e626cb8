"""The --watch-state file: atomic saves, strict loads, and the manager's restore rules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from asyncai_watch.core.limits import Limits
from asyncai_watch.core.notice import SOURCE_RESTORE, SOURCE_WATCH, Notice
from asyncai_watch.core.spec import WatchSpec
from asyncai_watch.errors import LimitError, StateFileError
from asyncai_watch.filters import RestrictedPythonEngine
from asyncai_watch.runtime.manager import WatchManager
from asyncai_watch.state_file import SavedWatch, StateFile
from asyncai_watch.testing import FakeClock
from tests.support.managers import IMMEDIATE, NOTES, memo_fake


def write_specs(path: Path, specs: list[dict[str, Any]]) -> None:
    path.write_text(json.dumps({"version": 1, "watches": specs}))  # a file of the previous version


def saved(path: Path) -> list[dict[str, Any]]:
    data: dict[str, Any] = json.loads(path.read_text())
    assert data["version"] == 2
    watches: list[dict[str, Any]] = data["watches"]
    return watches


async def receive(m: WatchManager) -> Notice:
    with anyio.fail_after(5):
        return await m.notices.receive()


def test_save_load_round_trip_is_atomic(tmp_path: Path) -> None:
    sf = StateFile(tmp_path / "sub" / "state.json")
    assert sf.load() == []  # no file yet
    specs = [
        WatchSpec(name="a", uri="memo://notes"),
        WatchSpec(name="b", uri="x://y", on_event='event["key"]'),
    ]
    sf.save(specs)
    assert sf.load() == [SavedWatch(spec) for spec in specs]
    sf.save([SavedWatch(specs[0], "FilterError: on_event does not compile"), specs[1]])
    assert sf.load()[0] == SavedWatch(specs[0], "FilterError: on_event does not compile")
    assert saved(sf.path)[0]["error"] == "FilterError: on_event does not compile"
    sf.save(specs[1:])
    assert sf.load() == [SavedWatch(specs[1])]
    # Only the state file and its owner's lock remain: the temp file was renamed over it.
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["state.json", "state.json.lock"]
    assert saved(sf.path) == [{"name": "b", "uri": "x://y", "on_event": 'event["key"]'}]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("{not json", "not valid JSON"),
        ('{"version": 1, "watches": [{"name": 1, "uri": "x"}]}', r"watches\[0\]\.name"),
        ('{"version": 1, "watches": [{"name": "a", "uri": "x", "on_event": 3}]}', "on_event"),
        ('{"version": 1, "watches": [{"name": "a", "uri": "x", "extra": 1}]}', "extra"),
        ('{"version": 9, "watches": []}', "version 9; this asyncai-watch reads versions 1 and 2"),
        ('{"watches": []}', "version"),
        ("[]", "expected shape"),
        (
            '{"version": 1, "watches": [{"name": "a", "uri": "x"}, {"name": "a", "uri": "y"}]}',
            "more than once",
        ),
    ],
)
def test_bad_files_are_reported_with_the_path(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "state.json"
    path.write_text(text)
    with pytest.raises(StateFileError, match=match) as info:
        StateFile(path).load()
    assert str(path) in str(info.value)


@pytest.mark.anyio
async def test_corrupt_state_file_stops_the_manager_and_is_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(b'{"version": 1, "watches": [')
    fake = memo_fake()
    with pytest.raises(StateFileError, match="not valid JSON") as info:
        async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path):
            pytest.fail("the manager must not start over a corrupt state file")
    assert str(path) in str(info.value)
    assert path.read_bytes() == b'{"version": 1, "watches": ['
    assert fake.requests["subscriptions/listen"] == 0


@pytest.mark.anyio
async def test_watch_state_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    fake = memo_fake()
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path) as m:
        await m.watch_start("notes", NOTES)
        assert saved(path) == [{"name": "notes", "uri": NOTES, "on_event": None}]
        await m.watch_start("keys", NOTES, on_event='"key " + event["key"]')
        await m.watch_stop("notes")
        assert saved(path) == [{"name": "keys", "uri": NOTES, "on_event": '"key " + event["key"]'}]
    # Closing the manager stops the watches but keeps their specs.
    assert [s["name"] for s in saved(path)] == ["keys"]

    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path) as m:
        restore = await receive(m)
        assert restore.source == SOURCE_RESTORE
        assert "Restored 1 of 1" in restore.text
        assert "keys memo://notes: restored" in restore.text
        assert [w.name for w in m.watch_list()] == ["keys"]
        fake.update(NOTES, {"fresh": 1})  # a fresh baseline: only this change is reported
        notice = await receive(m)
        assert (notice.source, notice.text) == (SOURCE_WATCH, "key fresh")


@pytest.mark.anyio
async def test_restore_rules(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    write_specs(
        path,
        [
            {"name": "good", "uri": NOTES, "on_event": None},
            {"name": "badfilter", "uri": NOTES, "on_event": "event["},
            {"name": "fnrepr", "uri": NOTES, "on_event": "<function fmt at 0x7f3a>"},
            {"name": "bad name", "uri": NOTES, "on_event": None},
            {"name": "down", "uri": "memo://notes/todo", "on_event": None},
            {"name": "third", "uri": NOTES, "on_event": None},
        ],
    )
    fake = memo_fake()
    fake.read_errors["memo://notes/todo"] = ConnectionError("server restarting")
    # Saved watches keep their slots, running or not: with room for six, a seventh waits.
    # (A file of more than max_watches is refused whole: tests/library/test_state_file_hostile.py.)
    limits = Limits(max_watches=6, debounce_quiet=0, debounce_max_wait=0, resubscribe_attempts=0)
    async with WatchManager([fake], limits=limits, clock=FakeClock(), watch_state=path) as m:
        restore = await receive(m)
        text = restore.text
        assert "Restored 2 of 6" in text
        assert "good memo://notes: restored" in text
        assert "third memo://notes: restored" in text
        assert "down memo://notes/todo: not started, still saved" in text  # no retries (attempts=0)
        assert "server restarting" in text
        for broken in ("badfilter", "fnrepr", "bad name"):
            assert f"- {broken} memo://notes: cannot start as saved, kept with its reason" in text
        assert dict(restore.meta)["restore_failed"] == "4"
        # No saved spec is ever dropped: the ones that did not start keep their reasons in the file.
        entries = {e["name"]: e for e in saved(path)}
        assert list(entries) == ["good", "badfilter", "fnrepr", "bad name", "down", "third"]
        assert "error" not in entries["good"]
        assert "does not compile" in entries["badfilter"]["error"]
        assert "server restarting" in entries["down"]["error"]
        listed = {w.name: w for w in m.watch_list()}
        assert listed["down"].status == "restore_failed"
        assert listed["down"].error is not None
        assert "server restarting" in listed["down"].error
        assert listed["badfilter"].status == "restore_failed"
        assert listed["good"].status == "running"
        assert fake.listeners() == 1  # good and third share one subscription
        # Saved specs keep their slots: a fixed start of one must wait for a free slot.
        del fake.read_errors["memo://notes/todo"]
        fake.set("memo://notes/todo", {"value": "milk"})
        with pytest.raises(LimitError, match=r"already: good, badfilter \(restore_failed\)"):
            await m.watch_start("overlimit", NOTES)
        for name in ("third", "badfilter", "fnrepr", "bad name"):
            await m.watch_stop(name)
        # Starting it again (the server is back) clears the flag and its reason, and keeps it saved.
        await m.watch_start("down", "memo://notes/todo")
        assert {w.name: w for w in m.watch_list()}["down"].status == "running"
        assert [(e["name"], "error" in e) for e in saved(path)] == [
            ("good", False),
            ("down", False),
        ]
        await m.watch_start("overlimit", NOTES)
        assert {w.name: w.status for w in m.watch_list()} == {
            "good": "running",
            "down": "running",
            "overlimit": "running",
        }


@pytest.mark.anyio
async def test_a_transient_restore_failure_is_tried_again_and_the_watch_comes_back(tmp_path: Path) -> None:
    """A filter that reads a server still starting times out on its sample at restore: the spec
    stays saved, is tried again after the backoff, and the watch starts once the server answers."""
    path = tmp_path / "state.json"
    on_event = 'read_resource(uri="memo://readme") + " " + event["key"]'
    write_specs(path, [{"name": "slow", "uri": NOTES, "on_event": on_event}])
    fake = memo_fake()
    gate = fake.gate_reads("memo://readme")  # the filter's catalog read hangs: the dry run times out
    clock = FakeClock()
    limits = Limits(debounce_quiet=0, debounce_max_wait=0, filter_timeout=0.5)
    async with WatchManager([fake], limits=limits, clock=clock, watch_state=path) as m:
        restore = await receive(m)
        assert (
            "slow memo://notes: not started yet, tried again after 1, 2, 4, 8, 16 s (still saved)"
            in restore.text
        )
        assert "timed out" in restore.text
        (listed,) = m.watch_list()
        assert listed.status == "restore_failed"
        (entry,) = saved(path)
        assert entry["on_event"] == on_event  # the spec is still saved, with why it is not running
        assert "timed out" in entry["error"]
        gate.open()  # the server answers now
        await clock.wait_for_deadline(1.0)
        clock.advance(1.0)
        again = await receive(m)
        assert again.source == SOURCE_RESTORE
        assert again.text == "Restored slow memo://notes on attempt 2 (it could not start at first)."
        assert m.watch_list()[0].status == "running"
        assert saved(path) == [{"name": "slow", "uri": NOTES, "on_event": on_event}]
        fake.update(NOTES, {"k": 1})
        assert (await receive(m)).text == "hello k"


@pytest.mark.anyio
async def test_restore_failed_spec_is_cleared_by_watch_stop_and_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    write_specs(path, [{"name": "down", "uri": NOTES, "on_event": None}])
    fake = memo_fake()
    fake.disconnect()  # the server is down: listing fails, so routing fails -> transient
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path) as m:
        restore = await receive(m)
        assert "not started yet, tried again" in restore.text
        assert m.watch_list()[0].status == "restore_failed"
    assert [s["name"] for s in saved(path)] == ["down"]  # kept for the next start
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path) as m:
        await receive(m)
        assert await m.watch_stop("down") is True
        assert m.watch_list() == []
        assert saved(path) == []
    fake.reconnect()
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path) as m:
        # Nothing saved: no restore notice, nothing running.
        assert m.watch_list() == []
        assert m.notices.statistics().current_buffer_used == 0


@pytest.mark.anyio
async def test_a_filter_worker_that_cannot_start_keeps_the_spec_saved(tmp_path: Path) -> None:
    # The engine failing (here: its Python cannot be started) says nothing about the spec, so
    # restore keeps it as restore_failed instead of dropping it from the file for good.
    path = tmp_path / "state.json"
    write_specs(path, [{"name": "filtered", "uri": NOTES, "on_event": "event['key']"}])
    broken = RestrictedPythonEngine(limits=IMMEDIATE, python=str(tmp_path / "no-such-python"))
    async with WatchManager(
        [memo_fake()], limits=IMMEDIATE, clock=FakeClock(), watch_state=path, filter_engine=broken
    ) as m:
        restore = await receive(m)
        assert "filtered memo://notes: not started yet, tried again" in restore.text
        assert "cannot start the filter worker" in restore.text
        (listed,) = m.watch_list()
        assert listed.status == "restore_failed"
    assert [s["name"] for s in saved(path)] == ["filtered"]


@pytest.mark.anyio
async def test_a_restored_watch_cannot_crowd_out_the_restore_notice(tmp_path: Path) -> None:
    # With a one-notice buffer, a restored watch's notice sent before the restore notice used to
    # fill it, and `async with WatchManager(...)` never returned.
    path = tmp_path / "state.json"
    specs = [
        {"name": "a", "uri": NOTES, "on_event": None},
        {"name": "b", "uri": "memo://readme", "on_event": None},
    ]
    path.write_text(json.dumps({"version": 1, "watches": specs}))
    fake = memo_fake()
    gate = fake.gate_reads("memo://readme")  # b's baseline read waits: a is already running
    entered = anyio.Event()
    notices: list[Notice] = []

    async def run() -> None:
        async with WatchManager(
            [fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path, notice_buffer=1
        ) as m:
            entered.set()
            for _ in range(2):
                with anyio.fail_after(5):
                    notices.append(await m.notices.receive())

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        with anyio.fail_after(5):
            await gate.wait_blocked()
        fake.update(NOTES, {"k": 1})
        await anyio.wait_all_tasks_blocked()  # a has turned the update into its notice
        gate.open()
        with anyio.fail_after(5):
            await entered.wait()
    assert [(n.source, n.text.splitlines()[0]) for n in notices] == [
        (
            SOURCE_RESTORE,
            "Restored 2 of 2 watches from "
            + str(path)
            + "; each resumed from where it stood (what changed while the agent was down follows,"
            " one notice per watch).",
        ),
        (SOURCE_WATCH, "ADDED k"),
    ]
