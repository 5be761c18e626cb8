"""``asyncai-watch watch --watch-state`` on the PostgreSQL event log, the CLI SIGKILLed while rows
are written: every change arrives once it is started again, in commit order, with no GAP; past
the change log's retention, a GAP naming it, then what the log still keeps."""

from __future__ import annotations

import json
import re
import shlex
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest

from asyncai_servers.postgres.capture import Retention
from asyncai_servers.postgres.config import TableName
from asyncai_servers.postgres.triggers import install_triggers
from tests.support.cli import WAIT, cli, wait_until_watching
from tests.support.pg import PgServer, module_postgres_fixture  # noqa: F401  (fixture)
from tests.support.postgres import EVENTS, WATCHER, Db, server_argv, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


async def next_record(out: Any) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(await out.next())
    return record


async def test_rows_written_while_the_cli_was_killed_arrive_every_one_in_commit_order(
    db: Db,
    tmp_path: Path,
) -> None:
    server = shlex.join(server_argv(write_config(tmp_path), db.as_role(WATCHER)))
    state = tmp_path / "state.json"
    args = (
        "watch",
        EVENTS,
        "--server",
        f"pg={server}",
        "--debounce",
        "0",
        "--json",
        "--watch-state",
        str(state),
    )
    async with cli(*args) as (proc, out):
        await wait_until_watching(proc)
        db.run("INSERT INTO items (id, note) VALUES (10, 'ten')")
        first = await next_record(out)
        assert len(first["lines"]) == 1
        proc.send_signal(signal.SIGKILL)
        with anyio.fail_after(WAIT):
            assert await proc.wait() == -signal.SIGKILL
    # While it is down (its server gone with it): committed to the database's change log.
    for i in (11, 12, 13):
        db.run("INSERT INTO items (id, note) VALUES (%s, 'new')", (i,))
    db.run("UPDATE items SET note = 'changed' WHERE id = 11")
    async with cli(*args) as (proc, out):
        restore = await next_record(out)
        away = await next_record(out)
        if away["redelivered"]:  # killed between printing the first notice and marking it taken
            assert away["lines"][1:] == first["lines"]
            away = await next_record(out)
        proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(WAIT):
            await proc.wait()
    assert any(
        "restored, caught up 4 changes made while the agent was down" in line for line in restore["lines"]
    )
    lines = away["lines"][1:]
    assert not any(line.startswith("GAP") for line in lines)
    assert [line.split()[0] for line in lines] == ["ADDED", "ADDED", "ADDED", "MODIFIED"]
    assert ["11" in lines[0], "12" in lines[1], "13" in lines[2], "11" in lines[3]] == [True] * 4, lines


async def test_rows_past_the_change_logs_retention_while_the_cli_was_killed_are_a_gap_then_the_rest(
    db: Db,
    tmp_path: Path,
) -> None:
    install_triggers(db.dsn, [TableName("public", "items")], Retention(max_bytes=16 << 10))
    server = shlex.join(server_argv(write_config(tmp_path), db.as_role(WATCHER)))
    state = tmp_path / "state.json"
    args = ["watch", EVENTS, "--server", f"pg={server}", "--debounce", "0", "--json"]
    args += ["--watch-state", str(state)]
    async with cli(*args) as (proc, out):
        await wait_until_watching(proc)
        db.run("INSERT INTO items (id, note) VALUES (10, 'ten')")
        first = await next_record(out)
        assert first["lines"] == ["ADDED 10"]
        proc.send_signal(signal.SIGKILL)
        with anyio.fail_after(WAIT):
            assert await proc.wait() == -signal.SIGKILL
    # While it is down: rows of 1 kB each, far more than the 16 kB the change log keeps.
    for i in range(100, 400):
        db.run("INSERT INTO items (id, note) VALUES (%s, repeat('x', 1000))", (i,))
    async with cli(*args) as (proc, out):
        restore = await next_record(out)
        away = await next_record(out)
        if away["redelivered"]:  # killed between printing "ADDED 10" and marking it taken
            assert away["lines"][1:] == first["lines"]
            away = await next_record(out)
        await wait_until_watching(proc)
        db.run("INSERT INTO items (id, note) VALUES (400, 'after')")
        live = await next_record(out)
        proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(WAIT):
            await proc.wait()
    lines = away["lines"][1:]
    kept = [line for line in lines if line.startswith("ADDED ")]
    assert 0 < len(kept) < 300
    assert kept == [f"ADDED {i}" for i in range(400 - len(kept), 400)]  # the newest, in order
    # One GAP first, naming the retention: every row before the kept ones is in it.
    assert len(lines) == len(kept) + 1, lines
    assert lines[0].startswith(f"GAP: missed {300 - len(kept)} ")
    assert lines[0].endswith(": older than the log keeps (changes of the last 7d, at most 16kB per table)")
    assert away["lines"][0].startswith(f"While you were away ({len(kept) + 1} changes")
    [line] = [line for line in restore["lines"] if "pg-events://public/items" in line]
    said = re.fullmatch(
        rf"- watch pg-events://public/items: restored, caught up {len(kept)} changes made while the agent "
        r"was down; seqs (\d+)\.\.(\d+) fell out of the server's retention \(GAP\)",
        line,
    )
    assert said is not None, line
    assert int(said[2]) - int(said[1]) + 1 == 300 - len(kept)
    # Then it goes on watching, from there.
    assert live["lines"] == ["ADDED 400"]
    assert not live["redelivered"]
