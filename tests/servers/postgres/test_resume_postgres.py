"""``asyncai-watch watch --watch-state`` on the PostgreSQL event log, the CLI SIGKILLed while rows
are written: every change arrives once it is started again, in commit order, with no GAP."""

from __future__ import annotations

import json
import shlex
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest

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
