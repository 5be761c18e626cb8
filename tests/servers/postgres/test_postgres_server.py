"""The PostgreSQL server against a real PostgreSQL (tests/support/pg.py), writers in other processes.

The server is a real subprocess (stdio, or HTTP); writes come from psql or from connections of
this process, which are other backends, as any application's would be. Every wait is on a
``notifications/resources/updated`` or a notice, bounded by ``anyio.fail_after``: read, check,
and if the expected change is not there yet, wait for the next update (level-triggered, so a
change between the read and the wait is never missed).

One PostgreSQL cluster for the module (``module_postgres``: the tests change roles and cut
connections, which other modules' tests must not see), one fresh database per test.
"""

from __future__ import annotations

import itertools
import json
import os
import shlex
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.subscriptions import Subscription

from asyncai_servers.postgres.capture import Retention
from asyncai_servers.postgres.config import TableName, load_config
from asyncai_servers.postgres.listener import LISTEN_APP_NAME
from asyncai_servers.postgres.server import PostgresServer
from asyncai_servers.postgres.triggers import install_triggers
from asyncai_watch import WatchManager
from asyncai_watch.core.events import EVENTS_MIME_TYPE
from asyncai_watch.core.limits import Limits
from asyncai_watch.errors import WatchError
from asyncai_watch.server.eventlog import AFTER_META_KEY
from asyncai_watch.server.http import running_http_server
from asyncai_watch.testing import FakeClock
from tests.support.local_token import local_client
from tests.support.managers import stdio_manager
from tests.support.pg import PgServer, module_postgres_fixture  # noqa: F401  (fixture)
from tests.support.postgres import CONFIG, EVENTS, ITEMS, NOBODY, WAIT, WATCHER, Db, server_argv, write_config

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

STATE = "pg://public/items"
QUERY = "pg-query://failed"


@asynccontextmanager
async def pg_client(argv: list[str]) -> AsyncIterator[Client]:
    async with Client(StdioServerParameters(command=argv[0], args=argv[1:])) as client:
        yield client


async def read(client: Client, uri: str, after: tuple[str, int] | None = None) -> Any:
    meta = None if after is None else {AFTER_META_KEY: {"log_id": after[0], "seq": after[1]}}
    content = (await client.read_resource(uri, meta=meta)).contents[0]  # type: ignore[arg-type]
    text = getattr(content, "text", None)
    assert isinstance(text, str), content
    return json.loads(text)


OUTAGE = "cannot reach PostgreSQL, so changes cannot be heard"


async def read_until(
    client: Client, sub: Subscription, uri: str, done: Callable[[Any], bool], *, outage: bool = False
) -> Any:
    """Re-read ``uri`` after each update until ``done(body)``; with ``outage``, a read failing
    because PostgreSQL is not reachable (yet) waits for the next update too."""
    with anyio.fail_after(WAIT):
        while True:
            try:
                body = await read(client, uri)
            except MCPError as exc:
                if not (outage and OUTAGE in exc.error.message):
                    raise
            else:
                if done(body):
                    return body
            await sub.__anext__()


async def events_until(
    client: Client,
    sub: Subscription,
    after: int,
    done: Callable[[list[dict[str, Any]]], bool],
    uri: str = EVENTS,
) -> list[dict[str, Any]]:
    """The events with seq > ``after``, once ``done(events)`` holds: every one of them, in seq
    order (each read names the position reached, so none falls out of a read's window; a read
    answers a page of the log and the server signals again when more follows)."""
    found: list[dict[str, Any]] = []
    log_id = (await read(client, uri))["log_id"]
    seq = after
    with anyio.fail_after(WAIT):
        while True:
            body = await read(client, uri, (log_id, seq))
            assert body["log_id"] == log_id, "the log restarted"
            new = [e for e in body["events"] if e["seq"] > seq]
            if "from_seq" in body:  # a filtered view: every event of it after from_seq, other rows' skipped
                assert body["from_seq"] <= seq, "events missing"
                found += new
                seq = body["last_seq"]  # where the server stopped looking: the next read goes on from here
            else:
                assert [e["seq"] for e in new] == list(range(seq + 1, seq + 1 + len(new))), "events missing"
                found += new
                seq = (
                    new[-1]["seq"] if new else seq
                )  # a page of a longer log: the next read goes on from here
            if done(found):
                return found
            await sub.__anext__()


async def lines_until(m: WatchManager, done: Callable[[dict[str, list[str]]], bool]) -> dict[str, list[str]]:
    """Notice lines by watch name, once ``done(lines)`` holds."""
    lines: dict[str, list[str]] = {}
    with anyio.fail_after(WAIT):
        while not done(lines):
            notice = await m.notices.receive()
            lines.setdefault(notice.meta["name"], []).extend(notice.text.splitlines())
    return lines


def has(lines: dict[str, list[str]], name: str, text: str) -> bool:
    return any(text in line for line in lines.get(name, []))


def db_rows(db: Db) -> dict[str, dict[str, Any]]:
    return {str(r["id"]): r for (r,) in db.run("SELECT row_to_json(i) FROM items i")}


# -- reading what changed --------------------------------------------------------------------------


async def test_rows_changes_and_a_named_query_follow_a_psql_writer(db: Db, tmp_path: Path) -> None:
    async with pg_client(server_argv(write_config(tmp_path), db.dsn)) as client:
        caps = client.server_capabilities
        assert caps is not None
        assert caps.resources is not None
        assert caps.resources.subscribe
        async with client.listen(resource_subscriptions=[STATE, EVENTS, QUERY]) as sub:
            assert await read(client, STATE) == {
                "1": {"id": 1, "status": "open", "n": 0, "note": "one"},
                "2": {"id": 2, "status": "open", "n": 0, "note": "two"},
            }
            content = (await client.read_resource(EVENTS)).contents[0]
            assert content.mime_type == EVENTS_MIME_TYPE
            log = json.loads(getattr(content, "text", ""))
            assert (log["last_seq"], log["events"]) == (0, [])  # the log starts at the table as it is
            assert await read(client, QUERY) == []

            await db.psql(
                "UPDATE items SET status = 'failed', n = n + 1 WHERE id = 1;"
                " INSERT INTO items (id, note) VALUES (3, 'three'); DELETE FROM items WHERE id = 2"
            )
            events = await events_until(client, sub, 0, lambda evs: len(evs) >= 3)
            by_key = {e["key"]: e for e in events}
            assert sorted(by_key) == ["1", "2", "3"]
            assert by_key["1"]["type"] == "MODIFIED"
            assert by_key["1"]["object"] == {"id": 1, "status": "failed", "n": 1, "note": "one"}
            assert by_key["1"]["old"] == {"id": 1, "status": "open", "n": 0, "note": "one"}
            assert (by_key["3"]["type"], by_key["3"]["object"]["note"]) == ("ADDED", "three")
            assert (by_key["2"]["type"], by_key["2"]["object"]["note"]) == ("DELETED", "two")
            assert sorted(e["seq"] for e in events) == [1, 2, 3]

            await read_until(client, sub, STATE, lambda body: body == db_rows(db))
            await read_until(client, sub, QUERY, lambda body: body == [{"id": 1, "note": "one"}])

            await db.psql("UPDATE items SET id = 30 WHERE id = 3")  # a new primary key: another row
            # The log records the UPDATE itself: the row under its new key, its old key in `old`.
            (moved,) = await events_until(client, sub, 3, lambda evs: len(evs) >= 1)
            assert (moved["type"], moved["key"], moved["old"]["id"]) == ("MODIFIED", "30", 3)


async def test_a_filtered_uri_sees_rows_move_in_and_out_under_each_spelling(db: Db, tmp_path: Path) -> None:
    failed = "pg-events://public/items?status=failed"
    spelled = "pg-events://public/items?status=fail%65d"  # the same resource, spelled another way
    async with (
        pg_client(server_argv(write_config(tmp_path), db.dsn)) as client,
        client.listen(resource_subscriptions=[failed]) as sub,
        client.listen(resource_subscriptions=[spelled]) as sub2,
    ):
        assert (await read(client, failed))["events"] == []
        assert (await read(client, "pg://public/items?status=failed")) == {}
        async with db.connect() as w:
            await w.execute("UPDATE items SET n = 5 WHERE id = 2")  # outside the filter: no event
            await w.execute("UPDATE items SET status = 'failed' WHERE id = 1")
            await events_until(client, sub, 0, lambda evs: len(evs) >= 1, uri=failed)
            await w.execute("UPDATE items SET status = 'done' WHERE id = 1")
        events = await events_until(client, sub, 0, lambda evs: len(evs) >= 2, uri=failed)
        assert [(e["type"], e["key"], e["object"]["status"]) for e in events] == [
            ("ADDED", "1", "failed"),
            ("DELETED", "1", "failed"),
        ]
        # The other spelling is notified under its own string, and shares the one log.
        again = await events_until(client, sub2, 0, lambda evs: len(evs) >= 2, uri=spelled)
        assert again == events


async def test_notices_through_the_manager_and_a_rollback_says_nothing(db: Db, tmp_path: Path) -> None:
    async with stdio_manager("pg", server_argv(write_config(tmp_path), db.dsn)) as m:
        await m.watch_start("items", STATE)
        await m.watch_start("changes", EVENTS)
        await m.watch_start("failed", QUERY)
        async with db.connect() as w:
            async with w.transaction():
                await w.execute("INSERT INTO items (id, note) VALUES (10, 'never')")
                await w.execute("UPDATE items SET n = 99 WHERE id = 1")
                raise psycopg.Rollback()  # the block rolls back, quietly
            # NOTIFY is delivered in commit order: once this one is noticed, a rolled-back
            # change would have been noticed before it.
            await w.execute("UPDATE items SET status = 'failed' WHERE id = 2")
        lines = await lines_until(m, lambda ls: {"items", "changes", "failed"} <= ls.keys())
    assert lines["items"] == ["MODIFIED 2 (status: open→failed)"]
    assert lines["changes"] == ["MODIFIED 2 (status: open→failed)"]
    assert lines["failed"] == ["ADDED 2"]  # a list of rows is keyed by its "id" column


async def test_concurrent_writers_never_step_a_row_back(db: Db, tmp_path: Path) -> None:
    """Four connections update one row and fifty rows at once: each row's events chain from its
    first value to its last (every ``old`` is the previous ``object``), and the state ends equal
    to the table."""
    db.run("INSERT INTO items (id) SELECT g FROM generate_series(100, 149) g")
    async with (
        pg_client(server_argv(write_config(tmp_path), db.dsn)) as client,
        client.listen(resource_subscriptions=[EVENTS, STATE]) as sub,
    ):
        baseline = await read(client, STATE)
        start = (await read(client, EVENTS))["last_seq"]  # the log holds the inserts above too

        async def writer() -> None:
            async with db.connect() as w:
                for _ in range(25):
                    await w.execute("UPDATE items SET n = n + 1 WHERE id = 1")
                for _ in range(5):
                    # Rows locked in id order: a plain multi-row UPDATE locks them in the scan's
                    # physical order, which moves as rows are rewritten, and two such writers
                    # can deadlock each other (PostgreSQL then aborts one).
                    await w.execute(
                        "UPDATE items SET n = n + 1 WHERE id IN"
                        " (SELECT id FROM items WHERE id BETWEEN 100 AND 149 ORDER BY id FOR UPDATE)"
                    )

        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(writer)
        final = db_rows(db)
        assert final["1"]["n"] == 100
        await read_until(client, sub, STATE, lambda body: body == final)
        events = await events_until(
            client, sub, start, lambda evs: all(_last(evs, k) == final[k] for k in final if k not in ("2",))
        )
    for key in ["1", *map(str, range(100, 150))]:
        chain = [e for e in events if e["key"] == key]
        assert chain, key
        assert all(e["type"] == "MODIFIED" for e in chain)
        assert chain[0]["old"] == baseline[key]
        for before, after in itertools.pairwise(chain):
            assert after["old"] == before["object"]
            assert after["object"]["n"] > before["object"]["n"]
        assert chain[-1]["object"] == final[key]


def _last(events: list[dict[str, Any]], key: str) -> Any:
    mine = [e["object"] for e in events if e["key"] == key]
    return mine[-1] if mine else None


async def test_a_terminated_listen_connection_loses_no_change(db: Db, tmp_path: Path) -> None:
    """``pg_terminate_backend`` on the server's LISTEN connection mid-traffic, and the server kept
    from reconnecting while more rows change: once it is back, every change is in the log and the
    state (re-read on reconnect), in the same log (no GAP)."""
    argv = server_argv(write_config(tmp_path), db.as_role(WATCHER))
    role = psycopg.sql.Identifier(WATCHER)
    async with (
        pg_client(argv) as client,
        client.listen(resource_subscriptions=[EVENTS, STATE]) as sub,
        db.connect() as admin,
    ):
        # A change seen means LISTEN is up: it reaches a reader only through a NOTIFY or the
        # re-read that follows LISTEN.
        db.run("UPDATE items SET note = 'warm' WHERE id = 1")
        await read_until(client, sub, STATE, lambda b: b["1"]["note"] == "warm")
        start = await read(client, EVENTS)
        cut = anyio.Event()

        async def traffic() -> None:
            async with db.connect() as w:
                for i in range(100, 160):
                    await w.execute("INSERT INTO items (id) VALUES (%s)", (i,))
                    if i == 120:
                        cut.set()  # and go on writing while the connection is cut

        async with anyio.create_task_group() as tg:
            tg.start_soon(traffic)
            await cut.wait()
            await admin.execute(psycopg.sql.SQL("ALTER ROLE {} CONNECTION LIMIT 0").format(role))
            try:
                cur = await admin.execute(
                    "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity"
                    " WHERE application_name = %s AND datname = current_database()",
                    (LISTEN_APP_NAME,),
                )
                assert await cur.fetchall() == [(True,)]  # it was there, and it is gone
            except BaseException:
                await admin.execute(psycopg.sql.SQL("ALTER ROLE {} CONNECTION LIMIT -1").format(role))
                raise
        try:
            # The server cannot listen again yet: these are heard by nobody.
            await admin.execute("UPDATE items SET n = 7 WHERE id = 1")
            await admin.execute("DELETE FROM items WHERE id = 2")
        finally:
            await admin.execute(psycopg.sql.SQL("ALTER ROLE {} CONNECTION LIMIT -1").format(role))
        final = db_rows(db)
        # While the server could not LISTEN again, reads said so (an outage): then the net change.
        body = await read_until(client, sub, STATE, lambda b: b == final, outage=True)
        assert body == final
        wanted = {("ADDED", str(i)) for i in range(100, 160)} | {("MODIFIED", "1"), ("DELETED", "2")}
        after = start["last_seq"]  # the warm-up's event came before
        events = await events_until(
            client, sub, after, lambda evs: wanted <= {(e["type"], e.get("key")) for e in evs}
        )
        log = await read(client, EVENTS)
    assert log["log_id"] == start["log_id"]  # the same log: nothing to report as a GAP
    assert sorted(e["seq"] for e in events) == list(range(after + 1, after + 1 + len(events)))
    errors = [e for e in events if e["type"] == "ERROR"]
    assert len(errors) <= 1, errors
    assert all(OUTAGE in e["message"] for e in errors), errors
    assert {(e["type"], e["key"]) for e in events if e["type"] != "ERROR"} == wanted


async def test_a_database_restart_loses_no_change(db: Db, tmp_path: Path) -> None:
    """``pg_ctl restart`` cuts every connection, the LISTEN one and the reading ones: the server
    listens again, replaces its reading connections, and a change made meanwhile is seen, in the
    state and in the same change log (each once, in order)."""
    async with (
        pg_client(server_argv(write_config(tmp_path), db.dsn)) as client,
        client.listen(resource_subscriptions=[STATE, EVENTS]) as sub,
    ):
        db.run("UPDATE items SET note = 'before' WHERE id = 1")
        await read_until(client, sub, STATE, lambda b: b["1"]["note"] == "before")
        start = await read(client, EVENTS)
        await anyio.to_thread.run_sync(db.server.restart)
        db.run("UPDATE items SET note = 'after' WHERE id = 2")  # maybe before the server listens again
        db.run("UPDATE items SET note = 'after, again' WHERE id = 2")
        body = await read_until(client, sub, STATE, lambda b: b["2"]["note"] == "after, again", outage=True)
        assert body == db_rows(db)
        db.run("UPDATE items SET note = 'later' WHERE id = 1")  # and heard as usual afterwards
        await read_until(client, sub, STATE, lambda b: b["1"]["note"] == "later")
        events = await events_until(client, sub, start["last_seq"], lambda evs: len(evs) >= 3)
        assert (await read(client, EVENTS))["log_id"] == start["log_id"]
    assert [e["object"]["note"] for e in events] == ["after", "after, again", "later"]


async def test_an_outage_is_said_to_every_listener_and_the_recovery_too(db: Db, tmp_path: Path) -> None:
    """PostgreSQL stopped: every listener is signalled, a state read is an error naming the cause
    (not the rows held from before), and so is a read of the change log; started again: one more
    signal, the net change (a write made as it came back), and that write in the same log."""
    async with (
        pg_client(server_argv(write_config(tmp_path), db.dsn)) as client,
        client.listen(resource_subscriptions=[STATE]) as sub,
        client.listen(resource_subscriptions=[EVENTS]) as sub2,
    ):
        await read(client, EVENTS)  # the baseline is read: the next change is an event
        db.run("UPDATE items SET note = 'before' WHERE id = 1")
        await read_until(client, sub, STATE, lambda b: b["1"]["note"] == "before")
        start = await events_until(client, sub2, 0, lambda evs: len(evs) >= 1)
        try:
            await anyio.to_thread.run_sync(db.server.stop)
            with anyio.fail_after(WAIT):
                await sub.__anext__()
                with pytest.raises(MCPError, match=OUTAGE):
                    await read(client, STATE)
            with anyio.fail_after(WAIT):
                message = ""
                while not message:  # level-triggered: read; while the log still answers, wait for a signal
                    try:
                        await read(client, EVENTS)
                    except MCPError as exc:
                        message = exc.error.message
                    else:
                        await sub2.__anext__()
            assert OUTAGE in message
        finally:
            await anyio.to_thread.run_sync(db.server.start)
        db.run("UPDATE items SET note = 'back' WHERE id = 2")
        body = await read_until(client, sub, STATE, lambda b: b["2"]["note"] == "back", outage=True)
        assert body == db_rows(db)
        back = await events_until(client, sub2, start[-1]["seq"], lambda evs: len(evs) >= 1)
        assert [(e["type"], e["key"]) for e in back] == [("MODIFIED", "2")]


def killable(argv: list[str], pid_file: Path) -> list[str]:
    """``argv`` run so that ``pid_file`` names the server process itself (``exec`` keeps the PID,
    and the file is written before the server can answer)."""
    return ["sh", "-c", f'echo $$ > "{pid_file}"; exec "$@"', "sh", *argv]


async def test_a_server_killed_while_a_writer_commits_loses_no_change(db: Db, tmp_path: Path) -> None:
    """SIGKILL the MCP server mid-traffic: the manager starts it again, and the event-log watch
    gets every change committed meanwhile, once each, in commit order, in the same log (no GAP)."""
    pid_file = tmp_path / "server.pid"
    argv = killable(server_argv(write_config(tmp_path), db.dsn), pid_file)
    # Every line shown (a notice shows 20 by default): the test counts them.
    limits = Limits(debounce_quiet=0, debounce_max_wait=0, resubscribe_initial=0.2, lines_per_notice=1000)
    async with stdio_manager("pg", argv, limits) as m:
        await m.watch_start("items", STATE)
        await m.watch_start("changes", EVENTS)
        db.run("UPDATE items SET n = 1 WHERE id = 1")
        await lines_until(
            m, lambda ls: has(ls, "changes", "MODIFIED 1 (n: 0→1)") and has(ls, "items", "MODIFIED 1")
        )
        killed = anyio.Event()

        async def writer() -> None:
            async with db.connect() as w:
                for i in range(100, 200):
                    await w.execute("INSERT INTO items (id) VALUES (%s)", (i,))
                    if i == 120:
                        os.kill(int(pid_file.read_text()), signal.SIGKILL)
                        killed.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(writer)
        assert killed.is_set()
        db.run("UPDATE items SET n = 2 WHERE id = 1")  # maybe before the server is back, maybe after
        lines = await lines_until(
            m, lambda ls: has(ls, "changes", "MODIFIED 1 (n: 1→2)") and has(ls, "items", "ADDED 199")
        )
    changes = lines["changes"]
    assert not [line for line in changes if line.startswith("GAP")]
    # (A read in flight when the server died may fail: the client says so, then reads on.)
    assert all("the connection is closed" in line for line in changes if line.startswith("ERROR"))
    added = [line for line in changes if line.startswith("ADDED ")]
    assert added == [f"ADDED {i}" for i in range(100, 200)]  # each once, in commit order
    assert changes[-1] == "MODIFIED 1 (n: 1→2)"


async def test_a_filtered_event_log_loses_nothing_across_a_server_restart(db: Db, tmp_path: Path) -> None:
    """A filtered event log is the durable log too: SIGKILL the server while a writer commits rows
    in and out of the filter; back, the watch gets each row of the view once, in commit order,
    with no GAP (it used to be kept in the server's memory: a restart was a GAP)."""
    pid_file = tmp_path / "server.pid"
    argv = killable(server_argv(write_config(tmp_path), db.dsn), pid_file)
    view = "pg-events://public/items?status=open"
    limits = Limits(debounce_quiet=0, debounce_max_wait=0, resubscribe_initial=0.2, lines_per_notice=1000)
    async with stdio_manager("pg", argv, limits) as m:
        await m.watch_start("open", view)
        db.run("UPDATE items SET n = 1 WHERE id = 1")
        await lines_until(m, lambda ls: has(ls, "open", "MODIFIED 1 (n: 0→1)"))
        killed = anyio.Event()

        async def writer() -> None:
            async with db.connect() as w:
                for i in range(100, 500):  # 200 rows of the view: more than a page (100) to catch up
                    status = "open" if i % 2 == 0 else "closed"
                    await w.execute("INSERT INTO items (id, status) VALUES (%s, %s)", (i, status))
                    if i == 120:
                        os.kill(int(pid_file.read_text()), signal.SIGKILL)
                        killed.set()
                await w.execute("UPDATE items SET status = 'closed' WHERE id = 2")  # out of the view

        async with anyio.create_task_group() as tg:
            tg.start_soon(writer)
        assert killed.is_set()
        lines = await lines_until(m, lambda ls: has(ls, "open", "DELETED 2"))
    changes = lines["open"]
    assert not [line for line in changes if line.startswith("GAP")], changes
    assert all("the connection is closed" in line for line in changes if line.startswith("ERROR"))
    added = [line for line in changes if line.startswith("ADDED ")]
    assert added == [f"ADDED {i}" for i in range(100, 500, 2)]  # each once, in commit order
    assert changes[-1].startswith("DELETED 2")


async def test_a_new_watch_of_a_filtered_event_log_starts_at_its_end(db: Db, tmp_path: Path) -> None:
    """A view with more than a page (100) of changes in the log before the watch starts: the
    watch's first notice is the change made after it started, not the view's older changes past
    the first page (the baseline took the oldest page of the newest 2,000 changes and called the
    rest news)."""
    async with db.connect() as w:
        for i in range(100, 250):
            await w.execute("INSERT INTO items (id) VALUES (%s)", (i,))
    limits = Limits(debounce_quiet=0, debounce_max_wait=0, lines_per_notice=1000)
    async with stdio_manager("pg", server_argv(write_config(tmp_path), db.dsn), limits) as m:
        await m.watch_start("open", "pg-events://public/items?status=open")
        db.run("INSERT INTO items (id) VALUES (1000)")
        lines = await lines_until(m, lambda ls: has(ls, "open", "ADDED 1000"))
    assert [line for line in lines["open"] if not line.startswith(" ")] == ["ADDED 1000"], lines


async def test_a_reader_resumes_from_its_seq_across_a_server_restart(db: Db, tmp_path: Path) -> None:
    """A session reads the log and goes, with its server; rows are written with nobody serving,
    two of them by transactions that commit in the opposite order to the one they started in. A
    new server and session, reading from the old position, get each change once, in commit
    order, with the writer's transaction id."""
    argv = server_argv(write_config(tmp_path), db.as_role(WATCHER))
    async with pg_client(argv) as client:
        start = await read(client, EVENTS)
    committed: list[tuple[int, str]] = []  # (row id, txid) in commit order
    async with db.connect() as a, db.connect() as b:
        for i in (10, 11):
            cur = await a.execute(
                "INSERT INTO items (id) VALUES (%s) RETURNING pg_current_xact_id()::text", (i,)
            )
            committed.append((i, str((await cur.fetchone() or ("",))[0])))
        # a starts first (the lower id and txid), b commits first.
        await a.set_autocommit(False)
        await b.set_autocommit(False)
        cur_a = await a.execute("INSERT INTO items (id) VALUES (20) RETURNING pg_current_xact_id()::text")
        cur_b = await b.execute("INSERT INTO items (id) VALUES (21) RETURNING pg_current_xact_id()::text")
        txid_a, txid_b = (await cur_a.fetchone() or ("",))[0], (await cur_b.fetchone() or ("",))[0]
        assert int(txid_a) < int(txid_b)
        await b.commit()
        await a.commit()
        committed += [(21, txid_b), (20, txid_a)]
    async with pg_client(argv) as client, client.listen(resource_subscriptions=[EVENTS]) as sub:
        events = await events_until(client, sub, start["last_seq"], lambda evs: len(evs) >= 4)
        assert (await read(client, EVENTS))["log_id"] == start["log_id"]  # the same log as before
    assert [(e["type"], e["object"]["id"], str(e["txid"])) for e in events] == [
        ("ADDED", i, txid) for i, txid in committed
    ]


async def test_two_writers_arrive_in_commit_order_while_watched(db: Db, tmp_path: Path) -> None:
    """The transaction that started first (lower txid, lower capture row id) commits last: its
    change has the higher seq, and each change arrives once."""
    async with (
        pg_client(server_argv(write_config(tmp_path), db.dsn)) as client,
        client.listen(resource_subscriptions=[EVENTS]) as sub,
        db.connect() as a,
        db.connect() as b,
    ):
        start = (await read(client, EVENTS))["last_seq"]
        await a.set_autocommit(False)
        await b.set_autocommit(False)
        for round_ in range(5):
            await a.execute("UPDATE items SET note = %s WHERE id = 1", (f"a{round_}",))
            await b.execute("UPDATE items SET note = %s WHERE id = 2", (f"b{round_}",))
            await b.commit()
            await a.commit()
        events = await events_until(client, sub, start, lambda evs: len(evs) >= 10)
    assert [e["object"]["note"] for e in events] == [x for r in range(5) for x in (f"b{r}", f"a{r}")]
    # In each round, the change with the lower txid (a's) came second: seqs follow commits, not txids.
    assert all(a["txid"] < b["txid"] for b, a in zip(events[0::2], events[1::2], strict=True))


@pytest.mark.parametrize("uri", [EVENTS, "pg-events://public/items?status=open"])
async def test_a_reader_past_the_retention_gets_a_gap_naming_it(db: Db, tmp_path: Path, uri: str) -> None:
    """Installed with --retain-size 16kB: while the server is down, rows of 1 kB each are written
    until the oldest are dropped; back, the watch (of the table, or of a filtered view) reports a
    GAP that names the retention, then the changes still kept."""
    config = write_config(tmp_path)
    install = [sys.executable, "-m", "asyncai_servers.postgres", "--config", str(config), "--dsn", db.dsn]
    with anyio.fail_after(WAIT):
        done = await anyio.run_process([*install, "--install-triggers", "--retain-size", "16kB"], check=False)
    assert done.returncode == 0, done.stderr
    assert "the change log keeps changes of the last 7d, at most 16kB per table" in done.stdout.decode()
    pid_file = tmp_path / "server.pid"
    argv = killable(server_argv(config, db.dsn), pid_file)
    limits = Limits(debounce_quiet=0, debounce_max_wait=0, resubscribe_initial=0.2, lines_per_notice=1000)
    async with stdio_manager("pg", argv, limits) as m:
        await m.watch_start("changes", uri)
        db.run("UPDATE items SET n = 1 WHERE id = 1")
        await lines_until(m, lambda ls: has(ls, "changes", "MODIFIED 1 (n: 0→1)"))
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
        for i in range(100, 400):
            db.run("INSERT INTO items (id, note) VALUES (%s, repeat('x', 1000))", (i,))
        lines = await lines_until(m, lambda ls: has(ls, "changes", "ADDED 399"))
    changes = lines["changes"]
    gaps = [line for line in changes if line.startswith("GAP")]
    assert len(gaps) == 1, changes
    assert gaps[0].startswith("GAP: missed ")
    assert gaps[0].endswith(": older than the log keeps (changes of the last 7d, at most 16kB per table)")
    kept = [line for line in changes if line.startswith("ADDED ")]
    assert 0 < len(kept) < 300
    assert kept == [f"ADDED {i}" for i in range(400 - len(kept), 400)]  # the newest, in order
    size = db.run("SELECT sum(pg_column_size(c.*)) FROM asyncai_watch.changes c")[0][0]
    assert size < 2 * 16 * 1024  # trimmed back under the cap as the writers went


async def test_ddl_under_a_watch_is_one_error_line_and_the_watch_resumes(db: Db, tmp_path: Path) -> None:
    async with stdio_manager("pg", server_argv(write_config(tmp_path), db.dsn)) as m:
        await m.watch_start("items", STATE)
        await m.watch_start("changes", EVENTS)
        db.run("DROP TABLE items")
        gone = "public.items does not exist (dropped or renamed?)"
        lines = await lines_until(m, lambda ls: has(ls, "items", gone) and has(ls, "changes", gone))
        assert all(line.startswith("ERROR") for line in lines["items"] + lines["changes"])
        assert all(len(line.splitlines()) == 1 for line in lines["changes"])
        # The table comes back (with its triggers): the state reports what it holds now; the
        # new table's change log is a new log (it starts at the install), which the watch says.
        db.run(
            "CREATE TABLE items (id int PRIMARY KEY, status text NOT NULL DEFAULT 'open', n int NOT NULL DEFAULT 0, note text)"
        )
        db.run("INSERT INTO items (id, note) VALUES (9, 'nine')")
        install_triggers(db.dsn, [ITEMS])
        lines = await lines_until(
            m,
            lambda ls: has(ls, "changes", "GAP: the event log restarted") and has(ls, "items", "ADDED 9"),
        )
        db.run("UPDATE items SET n = 1 WHERE id = 9")
        await lines_until(m, lambda ls: has(ls, "changes", "MODIFIED 9 (n: 0→1)"))


async def test_ordinary_ddl_is_heard_through_the_real_event_trigger(db: Db, tmp_path: Path) -> None:
    """A renamed column or table, a disabled trigger, a dropped column: each is said at once by
    the event trigger's NOTIFY (whose oids are JSON strings), and the DDL that fixes it brings the
    watch back with the net change, including writes made while it was broken."""
    config = write_config(tmp_path, '[[table]]\nname = "items"\ncolumns = ["id", "status", "n", "note"]\n')
    async with stdio_manager("pg", server_argv(config, db.dsn)) as m:
        await m.watch_start("items", STATE)
        db.run("ALTER TABLE items RENAME COLUMN note TO remark")
        await lines_until(m, lambda ls: has(ls, "items", "public.items has no column 'note'"))
        db.run("UPDATE items SET remark = 'x' WHERE id = 1")
        db.run("ALTER TABLE items RENAME COLUMN remark TO note")
        await lines_until(m, lambda ls: has(ls, "items", "MODIFIED 1 (note: one→x)"))
        db.run("ALTER TABLE items DISABLE TRIGGER asyncai_watch_update")
        await lines_until(m, lambda ls: has(ls, "items", "public.items has no asyncai-watch triggers"))
        db.run("UPDATE items SET n = 5 WHERE id = 1")  # not heard: the trigger is off
        db.run("ALTER TABLE items ENABLE TRIGGER asyncai_watch_update")
        await lines_until(m, lambda ls: has(ls, "items", "MODIFIED 1 (n: 0→5)"))
        db.run("ALTER TABLE items RENAME TO items_old")
        await lines_until(m, lambda ls: has(ls, "items", "public.items does not exist"))
        db.run("UPDATE items_old SET n = 6 WHERE id = 1")
        db.run("ALTER TABLE items_old RENAME TO items")
        await lines_until(m, lambda ls: has(ls, "items", "MODIFIED 1 (n: 5→6)"))
        db.run("ALTER TABLE items DROP COLUMN status")
        await lines_until(m, lambda ls: has(ls, "items", "public.items has no column 'status'"))
        db.run("ALTER TABLE items ADD COLUMN status text NOT NULL DEFAULT 'back'")
        await lines_until(m, lambda ls: has(ls, "items", "(status: open→back)"))


async def test_columns_named_like_the_servers_aliases_are_read(db: Db, tmp_path: Path) -> None:
    """Columns ``t``, ``c`` and ``q`` (the aliases the server's SQL used), a ``[[query]]`` ending in
    a ``-- comment``, and a query that fails as written: an error naming the query and its fix."""
    db.run("CREATE TABLE odd (id int PRIMARY KEY, t timestamptz NOT NULL DEFAULT now(), c int, q int)")
    db.run("CREATE TABLE odd2 (id int PRIMARY KEY, c int, q int)")
    db.run("INSERT INTO odd (id, c, q) VALUES (1, 10, 100)")
    db.run("INSERT INTO odd2 (id, c, q) VALUES (1, 20, 200)")
    install_triggers(db.dsn, [TableName("public", "odd"), TableName("public", "odd2")])
    config = write_config(
        tmp_path,
        '[[table]]\nname = "odd"\n\n[[table]]\nname = "odd2"\ncolumns = ["id", "c"]\n\n'
        '[[query]]\nname = "qs"\nsql = "SELECT id, q FROM odd2 -- q is a column too"\ndepends_on = ["odd2"]\n\n'
        '[[query]]\nname = "broken"\nsql = "SELECT nosuch FROM odd2"\ndepends_on = ["odd2"]\n\n'
        '[[query]]\nname = "untyped"\nsql = "SELECT length(id) FROM odd2"\ndepends_on = ["odd2"]\n',
    )
    async with pg_client(server_argv(config, db.dsn)) as client:
        with anyio.fail_after(WAIT):
            body = await read(client, "pg://public/odd")
            assert set(body["1"]) == {"id", "t", "c", "q"}
            assert (body["1"]["c"], body["1"]["q"]) == (10, 100)
            assert await read(client, "pg://public/odd2") == {"1": {"id": 1, "c": 20}}
            assert await read(client, "pg-query://qs") == [{"id": 1, "q": 200}]
            with pytest.raises(MCPError) as caught:
                await read(client, "pg-query://broken")
            with pytest.raises(MCPError) as untyped:
                await read(client, "pg-query://untyped")
    assert caught.value.error.code != -32603  # the config's mistake, not the server's
    assert "query 'broken': column \"nosuch\" does not exist" in caught.value.error.message
    assert "the config's [[query]] 'broken' sql fails as written" in caught.value.error.message
    assert untyped.value.error.code != -32603  # was -32603 with no hint
    assert "function length(integer) does not exist (SQLSTATE 42883); the config's [[query]] 'untyped'" in (
        untyped.value.error.message
    )


async def test_numeric_keys_stay_exact_text(db: Db, tmp_path: Path) -> None:
    """Keys ``0.1000000000000000001`` and ``...0002`` are two rows, ``1.50`` keeps its zero, and a
    change to one of them (re-read by the key its NOTIFY named) is that row's."""
    db.run("CREATE TABLE prices (id numeric PRIMARY KEY, v int NOT NULL DEFAULT 0)")
    db.run("INSERT INTO prices (id) VALUES (0.1000000000000000001), (0.1000000000000000002), (1.50)")
    install_triggers(db.dsn, [TableName("public", "prices")])
    config = write_config(tmp_path, '[[table]]\nname = "prices"\n')
    state, events = "pg://public/prices", "pg-events://public/prices"
    async with (
        pg_client(server_argv(config, db.dsn)) as client,
        client.listen(resource_subscriptions=[state, events]) as sub,
    ):
        with anyio.fail_after(WAIT):
            assert sorted(await read(client, state)) == [
                "0.1000000000000000001",
                "0.1000000000000000002",
                "1.50",
            ]
        db.run("UPDATE prices SET v = 1 WHERE id = 0.1000000000000000002")
        (event,) = await events_until(client, sub, 0, lambda evs: len(evs) >= 1, uri=events)
        assert (event["type"], event["key"], event["object"]["v"]) == ("MODIFIED", "0.1000000000000000002", 1)
        db.run("INSERT INTO prices (id) VALUES (2.500)")
        (added,) = await events_until(client, sub, 1, lambda evs: len(evs) >= 1, uri=events)
        assert (added["type"], added["key"]) == ("ADDED", "2.500")


async def test_writes_to_any_partition_are_seen_and_a_new_partition_is_covered(
    db: Db, tmp_path: Path
) -> None:
    """A statement on a partition fires only the partition's triggers: they are installed on every
    partition, name the partitioned table, and the event trigger adds them to a partition created
    (or attached) later."""
    db.run(
        "CREATE TABLE orders (id int, region text, v int, PRIMARY KEY (id, region)) PARTITION BY LIST (region)"
    )
    db.run("CREATE TABLE orders_eu PARTITION OF orders FOR VALUES IN ('eu')")
    db.run("CREATE TABLE orders_us PARTITION OF orders FOR VALUES IN ('us')")
    install_triggers(db.dsn, [TableName("public", "orders")])
    config = write_config(tmp_path, '[[table]]\nname = "orders"\n')
    uri = "pg-events://public/orders"

    def keys(events: list[dict[str, Any]]) -> set[tuple[str, str]]:
        return {(e["type"], e["key"]) for e in events}

    async with (
        pg_client(server_argv(config, db.dsn)) as client,
        client.listen(resource_subscriptions=[uri]) as sub,
    ):
        await read(client, uri)
        db.run("INSERT INTO orders_eu VALUES (1, 'eu', 0)")  # the partition itself
        db.run("INSERT INTO orders VALUES (2, 'us', 0)")  # through the partitioned table
        db.run("UPDATE orders_us SET v = 1 WHERE id = 2")
        seen = await events_until(client, sub, 0, lambda evs: len(evs) >= 3, uri=uri)
        assert keys(seen) == {("ADDED", '[1,"eu"]'), ("ADDED", '[2,"us"]'), ("MODIFIED", '[2,"us"]')}
        db.run("CREATE TABLE orders_ap PARTITION OF orders FOR VALUES IN ('ap')")
        db.run("CREATE TABLE orders_sa (id int, region text, v int, PRIMARY KEY (id, region))")
        db.run("ALTER TABLE orders ATTACH PARTITION orders_sa FOR VALUES IN ('sa')")
        db.run("INSERT INTO orders_ap VALUES (3, 'ap', 0)")
        db.run("INSERT INTO orders_sa VALUES (4, 'sa', 0)")
        later = await events_until(client, sub, 3, lambda evs: len(keys(evs)) >= 2, uri=uri)
        assert keys(later) == {("ADDED", '[3,"ap"]'), ("ADDED", '[4,"sa"]')}
    # A partition without the triggers (made with the event triggers off): the watch says so.
    db.run("ALTER EVENT TRIGGER asyncai_watch_ddl DISABLE")
    db.run("CREATE TABLE orders_af PARTITION OF orders FOR VALUES IN ('af')")
    db.run("ALTER EVENT TRIGGER asyncai_watch_ddl ENABLE")
    async with pg_client(server_argv(config, db.dsn)) as client:
        with (
            anyio.fail_after(WAIT),
            pytest.raises(MCPError, match="has partitions without asyncai-watch triggers"),
        ):
            await read(client, uri)


async def test_truncating_one_partition_is_told_to_the_tables_and_the_partitions_watchers(
    db: Db, tmp_path: Path
) -> None:
    """TRUNCATE of one partition fires only that partition's statement triggers: it is captured in
    the partitioned table's log (naming the partition) and in the partition's own when a config
    names it, and both state watches lose its rows; a partition made later is covered too."""
    db.run("CREATE TABLE orders (id int, region text, PRIMARY KEY (id, region)) PARTITION BY LIST (region)")
    db.run("CREATE TABLE orders_eu PARTITION OF orders FOR VALUES IN ('eu')")
    db.run("CREATE TABLE orders_us PARTITION OF orders FOR VALUES IN ('us')")
    db.run("INSERT INTO orders VALUES (1, 'eu'), (2, 'us')")
    install_triggers(db.dsn, [TableName("public", "orders"), TableName("public", "orders_eu")])
    config = write_config(tmp_path, '[[table]]\nname = "orders"\n\n[[table]]\nname = "orders_eu"\n')
    parent, part = "pg-events://public/orders", "pg-events://public/orders_eu"
    uris = [parent, part, "pg://public/orders", "pg://public/orders_eu"]
    async with (
        pg_client(server_argv(config, db.dsn)) as client,
        client.listen(resource_subscriptions=uris) as sub,
    ):
        start = {uri: (await read(client, uri))["last_seq"] for uri in (parent, part)}
        db.run("INSERT INTO orders_eu VALUES (3, 'eu')")
        db.run("TRUNCATE orders_eu")
        seen = await events_until(client, sub, start[parent], lambda evs: len(evs) >= 2, uri=parent)
        assert [(e["type"], e["object"]) for e in seen][1] == (
            "TRUNCATED",
            {"table": "public.orders", "partition": "public.orders_eu"},
        )
        own = await events_until(client, sub, start[part], lambda evs: len(evs) >= 2, uri=part)
        assert [(e["type"], e.get("key")) for e in own] == [("ADDED", '[3,"eu"]'), ("TRUNCATED", None)]
        assert own[1]["object"] == {"table": "public.orders_eu"}
        await read_until(client, sub, "pg://public/orders", lambda b: set(b) == {'[2,"us"]'})
        await read_until(client, sub, "pg://public/orders_eu", lambda b: b == {})
        db.run("CREATE TABLE orders_ap PARTITION OF orders FOR VALUES IN ('ap')")
        db.run("INSERT INTO orders VALUES (4, 'ap')")
        db.run("TRUNCATE orders_ap")
        later = await events_until(client, sub, seen[-1]["seq"], lambda evs: len(evs) >= 2, uri=parent)
        assert later[1]["object"] == {"table": "public.orders", "partition": "public.orders_ap"}


async def test_the_row_cap_is_an_error_naming_it(db: Db, tmp_path: Path) -> None:
    db.run("CREATE TABLE big (id int PRIMARY KEY)")
    db.run("INSERT INTO big SELECT generate_series(1, 5)")
    install_triggers(db.dsn, [TableName("public", "big")])
    config = write_config(
        tmp_path, '[[table]]\nname = "items"\nmax_rows = 3\n\n[[table]]\nname = "big"\nmax_rows = 4\n'
    )
    async with stdio_manager("pg", server_argv(config, db.dsn)) as m:
        with pytest.raises(WatchError) as caught:
            await m.watch_start("big", "pg://public/big")
        assert (
            "public.big has more than 4 rows, the row cap (max_rows = 4 in the config's [[table]] for public.big)"
            in str(caught.value)
        )
        await m.watch_start("items", STATE)
        await m.watch_start("changes", EVENTS)
        db.run("INSERT INTO items (id) VALUES (3), (4)")
        over = "public.items has more than 3 rows, the row cap (max_rows = 3"
        # The state cannot be served over its cap; the change log does not hold the rows, and goes on.
        await lines_until(m, lambda ls: has(ls, "items", over) and has(ls, "changes", "ADDED 4"))
        db.run(
            "DELETE FROM items WHERE id = 4"
        )  # back under the cap: the net change since the last good read
        lines = await lines_until(
            m, lambda ls: has(ls, "changes", "DELETED 4") and has(ls, "items", "ADDED 3")
        )
    assert not has(lines, "items", "ADDED 4")
    assert not has(lines, "changes", over)


async def test_a_role_without_rights_gets_one_line(db: Db, tmp_path: Path) -> None:
    config = write_config(tmp_path)
    async with stdio_manager("pg", server_argv(config, db.as_role(NOBODY))) as m:
        with pytest.raises(WatchError) as caught:
            await m.watch_start("items", STATE)
    message = str(caught.value)
    assert (
        f"role {NOBODY} may not read public.items (permission denied): GRANT USAGE ON SCHEMA public "
        f"and SELECT ON public.items TO {NOBODY}"
    ) in message
    assert "\n" not in message
    # Rights taken away under a watch: the event log says so in one line.
    async with stdio_manager("pg", server_argv(config, db.as_role(WATCHER))) as m:
        await m.watch_start("changes", EVENTS)
        db.run(
            psycopg.sql.SQL("REVOKE SELECT ON items FROM {}")
            .format(psycopg.sql.Identifier(WATCHER))
            .as_string(None)
        )
        lines = await lines_until(
            m, lambda ls: has(ls, "changes", f"role {WATCHER} may not read public.items")
        )
    assert lines["changes"][-1].startswith("ERROR")


# -- shared work, caps and refusals ----------------------------------------------------------------


def _load_pg_stat_statements(db: Db) -> None:
    """Load pg_stat_statements in the module's cluster (a restart: it needs shared memory)."""
    loaded = db.run("SHOW shared_preload_libraries")[0][0]
    if "pg_stat_statements" not in loaded:
        db.run("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
        db.server.restart()
    db.run("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")


def _statements(db: Db, role: str) -> int:
    rows = db.run(
        "SELECT coalesce(sum(calls), 0)::int8 FROM pg_stat_statements"
        " WHERE userid = %s::regrole AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())",
        (role,),
    )
    return int(rows[0][0])


async def test_ten_thousand_filtered_uris_share_one_reread_per_change(db: Db, tmp_path: Path) -> None:
    """One listen of 10,000 filtered URIs, a second client's watch beside it: their first reads
    are shared (a statement for many new URIs, not one each), a single-row UPDATE costs a bounded
    number of statements (one shared re-read, not one per URI), and both clients are told."""
    await anyio.to_thread.run_sync(_load_pg_stat_statements, db)
    config = write_config(tmp_path, '[[table]]\nname = "items"\nwhere = ["n"]\n')
    argv = server_argv(config, db.as_role(WATCHER))
    many = [f"pg://public/items?n={i}" for i in range(10_000)]
    async with pg_client(argv) as client, pg_client(argv) as other:
        db.run("SELECT pg_stat_statements_reset()")
        with anyio.fail_after(120):  # 10,000 first reads before the ack
            async with (
                client.listen(resource_subscriptions=many) as sub,
                other.listen(resource_subscriptions=["pg://public/items?n=5"]) as sub2,
            ):
                first = _statements(db, WATCHER)
                assert first < 200, f"{first} statements for the first reads of 10,001 filtered URIs"
                assert await read(other, "pg://public/items?n=5") == {}
                assert set(await read(client, "pg://public/items?n=0")) == {"1", "2"}
                db.run("SELECT pg_stat_statements_reset()")
                db.run("UPDATE items SET n = 5 WHERE id = 1")
                moved = await read_until(other, sub2, "pg://public/items?n=5", lambda b: "1" in b)
                assert moved["1"]["n"] == 5
                await read_until(client, sub, "pg://public/items?n=0", lambda b: set(b) == {"2"})
                assert set(await read(client, "pg://public/items?n=5")) == {"1"}
                spent = _statements(db, WATCHER)
    assert spent <= 3, f"{spent} statements for one single-row UPDATE under 10,001 filtered URIs"


async def test_one_client_cannot_take_every_source(db: Db, tmp_path: Path) -> None:
    """--max-sources-per-client: a listen that would make one client's listens hold more distinct
    targets is refused naming the flag; what the client already holds is shared, and an ended
    listen gives its targets back."""
    config = write_config(tmp_path, '[[table]]\nname = "items"\nwhere = ["n"]\n')
    uris = [f"pg://public/items?n={i}" for i in range(4)]
    async with pg_client(server_argv(config, db.dsn, "--max-sources-per-client", "2")) as client:
        with anyio.fail_after(WAIT), pytest.raises(MCPError) as over:
            async with client.listen(resource_subscriptions=uris[:3]):
                pass
        message = over.value.error.message
        assert "would hold 3 targets" in message
        assert "more than one client may (--max-sources-per-client 2)" in message
        async with client.listen(resource_subscriptions=uris[:2]) as sub:
            with anyio.fail_after(WAIT), pytest.raises(MCPError) as third:
                async with client.listen(resource_subscriptions=[uris[2]]):
                    pass
            assert "(--max-sources-per-client 2); it holds 2" in third.value.error.message
            # A target it holds already (spelled another way, or the event log of it) costs nothing more.
            async with client.listen(resource_subscriptions=["pg-events://public/items?n=%31"]):
                db.run("UPDATE items SET n = 1 WHERE id = 2")
                await read_until(client, sub, uris[1], lambda b: "2" in b)
        async with client.listen(resource_subscriptions=uris[2:]) as sub:  # the first listen ended
            db.run("UPDATE items SET n = 3 WHERE id = 2")
            await read_until(client, sub, uris[3], lambda b: "2" in b)


async def test_a_listen_that_can_only_fail_or_is_over_the_cap_is_refused_at_once(
    db: Db, tmp_path: Path
) -> None:
    config = write_config(tmp_path, '[[table]]\nname = "items"\nwhere = ["n", "status"]\n')
    async with pg_client(server_argv(config, db.dsn, "--max-sources", "3")) as client:
        with anyio.fail_after(WAIT), pytest.raises(MCPError) as bad_value:
            async with client.listen(resource_subscriptions=["pg://public/items?n=abc"]):
                pass
        assert 'invalid input syntax for type integer: "abc"' in bad_value.value.error.message
        uris = [f"pg://public/items?n={i}" for i in range(4)]
        with anyio.fail_after(WAIT), pytest.raises(MCPError) as over:
            async with client.listen(resource_subscriptions=uris):
                pass
        assert "the most it allows (--max-sources 3)" in over.value.error.message
        async with client.listen(resource_subscriptions=uris[:3]) as sub:  # within the cap: served
            db.run("UPDATE items SET n = 2 WHERE id = 1")
            await read_until(client, sub, uris[2], lambda b: "1" in b)
    async with pg_client(server_argv(config, db.as_role(NOBODY))) as client:
        with anyio.fail_after(WAIT), pytest.raises(MCPError) as no_rights:
            async with client.listen(resource_subscriptions=[STATE]):
                pass
    assert f"role {NOBODY} may not read public.items (permission denied)" in no_rights.value.error.message


# -- the surface: listings, refusals, HTTP, the CLI, the bridge -------------------------------------


async def test_lists_refuses_and_serves_over_http(db: Db, tmp_path: Path) -> None:
    db.run("CREATE TABLE nopk (a int)")
    db.run("CREATE VIEW items_view AS SELECT * FROM items")
    install_triggers(db.dsn, [TableName("public", "nopk")])
    config = write_config(tmp_path, CONFIG + '\n[[table]]\nname = "nopk"\n\n[[table]]\nname = "items_view"\n')
    argv = server_argv(config, db.dsn, "--http", "127.0.0.1:0")
    async with running_http_server(argv) as (url, _proc), local_client(url) as client:
        listed = {r.uri: r for r in (await client.list_resources()).resources}
        assert set(listed) >= {STATE, EVENTS, QUERY, "pg://public/nopk"}
        assert listed[EVENTS].mime_type == EVENTS_MIME_TYPE
        assert 'Example: await watch_start(name="items", uri="pg://public/items")' in (
            listed[STATE].description or ""
        )
        templates = [t.uri_template for t in (await client.list_resource_templates()).resource_templates]
        assert templates == ["pg://public/items{?status}", "pg-events://public/items{?status}"]

        for uri, message in [
            ("pg://public/orders", "table public.orders is not in the config"),
            (
                "pg://public/items?note=x",
                "'note' is not a filter column of public.items; allowed: status",
            ),
        ]:
            with anyio.fail_after(WAIT), pytest.raises(MCPError, match=message) as caught:
                async with client.listen(resource_subscriptions=[uri]):
                    pass
            assert caught.value.error.code == -32602
        for uri, message in [
            ("pg://public/nopk", "public.nopk has no primary key, and rows are keyed by it"),
            ("pg://public/items_view", "public.items_view is not a table \\(pg_class.relkind 'v'\\)"),
            ("pg-query://nope", "no such named query; the config names: failed"),
        ]:
            with anyio.fail_after(WAIT), pytest.raises(MCPError, match=message):
                await client.read_resource(uri)

        async with client.listen(resource_subscriptions=[STATE]) as sub:
            assert "3" not in await read(client, STATE)
            db.run("INSERT INTO items (id) VALUES (3)")
            await read_until(client, sub, STATE, lambda body: "3" in body)


@pytest.mark.filterwarnings(
    "ignore::mcp.shared.exceptions.MCPDeprecationWarning"
)  # 2025's subscribe, on purpose
async def test_a_2025_client_subscribes_too(db: Db, tmp_path: Path) -> None:
    from tests.support.legacy_client import legacy_client

    argv = server_argv(write_config(tmp_path), db.dsn)
    async with legacy_client(StdioServerParameters(command=argv[0], args=argv[1:])) as (client, updates):
        with anyio.fail_after(WAIT):
            await client.subscribe_resource(STATE)
            assert set(await read(client, STATE)) == {"1", "2"}
        db.run("INSERT INTO items (id) VALUES (3)")
        assert await updates.next() == STATE
        assert set(await read(client, STATE)) == {"1", "2", "3"}
        with anyio.fail_after(WAIT), pytest.raises(MCPError) as refused:
            await client.subscribe_resource("pg://public/orders")
    assert refused.value.error.code == -32602


async def test_big_keys_and_truncate_fall_back_to_a_whole_read(db: Db, tmp_path: Path) -> None:
    """Keys that do not fit a NOTIFY (8000 bytes) are sent as "the table changed"; so is TRUNCATE,
    which the change log records as one ``TRUNCATED`` event (the state shows each row gone)."""
    db.run("CREATE TABLE docs (id text PRIMARY KEY, v int)")
    install_triggers(db.dsn, [TableName("public", "docs")])
    config = write_config(tmp_path, '[[table]]\nname = "docs"\n')
    uri = "pg-events://public/docs"
    keys = [f"{i:02d}" + "x" * 1000 for i in range(12)]
    async with (
        pg_client(server_argv(config, db.dsn)) as client,
        client.listen(resource_subscriptions=[uri]) as sub,
    ):
        await read(client, uri)
        db.run("INSERT INTO docs SELECT unnest(%s::text[]), 0", (keys,))
        events = await events_until(client, sub, 0, lambda evs: len(evs) >= 12, uri=uri)
        assert sorted((e["type"], e["key"]) for e in events) == [("ADDED", k) for k in keys]
        db.run("TRUNCATE docs")
        (event,) = await events_until(client, sub, 12, lambda evs: len(evs) >= 1, uri=uri)
        assert (event["type"], event["object"]) == ("TRUNCATED", {"table": "public.docs"})


async def test_install_is_idempotent_and_remove_takes_the_triggers_away(db: Db, tmp_path: Path) -> None:
    config = write_config(tmp_path)
    base = [sys.executable, "-m", "asyncai_servers.postgres", "--config", str(config), "--dsn", db.dsn]
    with anyio.fail_after(WAIT):
        done = await anyio.run_process([*base, "--install-triggers"], check=False)  # installed already
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().strip() == (
        "asyncai-watch triggers installed on public.items; DDL event triggers installed; "
        "the change log keeps changes of the last 7d, at most 256MB per table"
    )
    count = "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'items'::regclass AND tgname LIKE 'asyncai%%'"
    assert db.run(count) == [(6,)]  # four NOTIFY triggers, two capture triggers
    with anyio.fail_after(WAIT):
        done = await anyio.run_process([*base, "--remove-triggers"], check=False)
    assert done.returncode == 0, done.stderr
    assert db.run(count) == [(0,)]
    assert db.run("SELECT count(*) FROM pg_namespace WHERE nspname = 'asyncai_watch'") == [(0,)]
    async with pg_client(server_argv(config, db.dsn)) as client:
        with (
            anyio.fail_after(WAIT),
            pytest.raises(MCPError, match=r"public\.items has no asyncai-watch triggers"),
        ):
            await client.read_resource(STATE)
    with anyio.fail_after(WAIT):
        done = await anyio.run_process(
            [*base[:-1], "host=127.0.0.1 port=1", "--install-triggers"], check=False
        )
    assert done.returncode == 1
    assert done.stderr.decode().startswith("asyncai-mcp-postgres: installing the triggers failed: ")
    assert len(done.stderr.decode().strip().splitlines()) == 1


async def test_changes_older_than_the_retention_age_are_dropped_at_a_later_write(
    db: Db, tmp_path: Path
) -> None:
    """Installed with a retention of 1h: changes made "2 hours ago" (their commit time set back, as
    a clock would) are dropped when the log next trims (a write crossing a multiple of 256 seqs);
    a reader positioned before them gets the kept changes, and the body says what is kept."""
    install_triggers(db.dsn, [ITEMS], Retention(max_age=timedelta(hours=1)))
    async with pg_client(server_argv(write_config(tmp_path), db.dsn)) as client:
        start = await read(client, EVENTS)
        db.run("INSERT INTO items (id) SELECT generate_series(10, 14)")
        db.run("UPDATE asyncai_watch.xacts SET at = at - interval '2 hours'")
        db.run("INSERT INTO items (id) SELECT generate_series(100, 355)")  # 256 rows: a trim
        body = await read(client, EVENTS, (start["log_id"], start["last_seq"]))
    assert body["retention"] == "changes of the last 1h, at most 256MB per table"
    assert body["first_seq"] == start["last_seq"] + 6  # the five old ones went
    assert [e["key"] for e in body["events"]] == [str(i) for i in range(100, 200)]  # a page of the kept


async def test_the_retention_age_is_applied_on_the_servers_clock_without_a_write(
    db: Db, tmp_path: Path
) -> None:
    """Installed with a retention of 1h: changes made "2 hours ago" (their commit time set back, as
    a clock would) and no write since. The server (in this process, on a fake clock) drops them
    when its clock reaches the next expiry the database named; before that, nothing goes."""
    install_triggers(db.dsn, [ITEMS], Retention(max_age=timedelta(hours=1)))
    db.run("INSERT INTO items (id) SELECT generate_series(10, 14)")
    db.run("INSERT INTO items (id) VALUES (15)")

    def kept() -> list[int]:
        return [int(n) for (n,) in db.run("SELECT last_seq FROM asyncai_watch.xacts ORDER BY last_seq")]

    clock = FakeClock()
    config = load_config(write_config(tmp_path))
    server = PostgresServer(config, db.as_role(WATCHER), clock=clock)
    async with server.running():
        with anyio.fail_after(WAIT):
            await clock.wait_for_sleepers(1)  # the first round ran at start: nothing was old yet
        assert kept() == [5, 6]
        (deadline,) = clock.deadlines()
        assert 3500 < deadline <= 3600  # the oldest kept change ages out in about an hour
        db.run("UPDATE asyncai_watch.xacts SET at = at - interval '2 hours' WHERE last_seq = 5")
        clock.advance(deadline - 1)
        with anyio.fail_after(WAIT):
            await anyio.wait_all_tasks_blocked()
        assert kept() == [5, 6]  # not yet: the timer is the server's clock
        clock.advance(1)
        with anyio.fail_after(WAIT):
            await clock.wait_for_sleepers(1)  # the round ran and parked again
        assert kept() == [6]  # the old one went, the newest is always kept
        assert db.run("SELECT count(*) FROM asyncai_watch.changes")[0][0] == 1


async def test_an_older_install_is_told_to_reinstall_and_upgraded_by_it(db: Db, tmp_path: Path) -> None:
    """An install from before the durable log (the NOTIFY triggers only): the state is served,
    the change log says what to run; ``--install-triggers`` (twice) upgrades it."""
    db.run(
        "DROP TRIGGER asyncai_watch_capture_row ON items; DROP TRIGGER asyncai_watch_capture_truncate ON items;"
        " DROP TABLE asyncai_watch.changes, asyncai_watch.xacts, asyncai_watch.logs"
    )
    config = write_config(tmp_path)
    argv = server_argv(config, db.dsn)
    async with pg_client(argv) as client:
        assert await read(client, STATE) == db_rows(db)
        with (
            anyio.fail_after(WAIT),
            pytest.raises(
                MCPError, match=r"public\.items has no durable change log .* --install-triggers again"
            ),
        ):
            await client.read_resource(EVENTS)
    base = [sys.executable, "-m", "asyncai_servers.postgres", "--config", str(config), "--dsn", db.dsn]
    for _ in range(2):
        with anyio.fail_after(WAIT):
            done = await anyio.run_process([*base, "--install-triggers"], check=False)
        assert done.returncode == 0, done.stderr
    async with pg_client(argv) as client, client.listen(resource_subscriptions=[EVENTS]) as sub:
        start = await read(client, EVENTS)
        db.run("UPDATE items SET n = 5 WHERE id = 2")
        (event,) = await events_until(client, sub, start["last_seq"], lambda evs: len(evs) >= 1)
    assert (event["type"], event["key"], event["object"]["n"]) == ("MODIFIED", "2", 5)


async def test_cli_watch_prints_the_change(db: Db, tmp_path: Path) -> None:
    from tests.support.cli import cli, wait_until_watching

    server = shlex.join(server_argv(write_config(tmp_path), db.dsn))
    async with cli("watch", STATE, "--server", f"pg={server}", "--debounce", "0", "--json") as (proc, out):
        await wait_until_watching(proc)
        db.run("UPDATE items SET note = 'uno' WHERE id = 1")
        notice = json.loads(await out.next())
        proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(WAIT):
            await proc.wait()
    assert notice["lines"] == ["MODIFIED 1 (note: one→uno)"]
    assert (notice["uri"], notice["server"]) == (STATE, "pg")


async def test_the_bridge_pushes_a_table_change(db: Db, tmp_path: Path) -> None:
    from tests.support.serve import Channel, call, serve

    channel = Channel()
    server = shlex.join(server_argv(write_config(tmp_path), db.dsn))
    async with Client(serve("--server", f"pg={server}", "--debounce", "0"), extensions=[channel]) as client:
        started = await call(client, "watch_start", name="failed", uri="pg://public/items?status=failed")
        assert started["shape"] == "state"
        db.run("UPDATE items SET status = 'failed' WHERE id = 2")
        push = await channel.next_for("failed")
    assert push.content == "ADDED 2"


async def test_a_pydantic_ai_agent_hears_a_table_change(db: Db, tmp_path: Path) -> None:
    """A framework agent (PydanticAI, offline with its FunctionModel) starts a watch on a table's
    change log through its watch tools; a commit in another connection becomes its next turn."""
    from pydantic_ai import Agent
    from pydantic_ai.models.function import FunctionModel

    from asyncai_watch.integrations.pydantic_ai import watch_runner, watch_toolset
    from tests.support.integration_memo import Brain, Published, ask_call
    from tests.support.pydantic_ai_model import Model

    brain, published = Brain(), Published()
    async with stdio_manager("pg", server_argv(write_config(tmp_path), db.dsn)) as m:
        agent = Agent(FunctionModel(Model(brain).respond), toolsets=[watch_toolset(m)])
        async with watch_runner(agent, m, publish=published) as runner:
            with anyio.fail_after(WAIT):
                started = await runner.ask(ask_call("watch_start", name="changes", uri=EVENTS))
                assert (
                    started.reply == f'tool said: {{"name":"changes","uri":"{EVENTS}","shape":"event-log"}}'
                )
                await db.psql("UPDATE items SET status = 'failed' WHERE id = 2")
                await runner.wait(lambda s: s.runs_completed == 2)
    assert published.texts[1] == "seen: MODIFIED 2 (status: open→failed)"
    assert runner.runs[1].prompt.startswith(f'<watch-event name="changes" uri="{EVENTS}">\n')
