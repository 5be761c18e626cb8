"""The switchboard on PostgreSQL when the database goes away, and when a replica starts under load.

One throwaway cluster for this module (``module_postgres``): the tests cut its connections with
``pg_terminate_backend`` (pool connections, the LISTEN connection, the connection a start migrates
on), refuse connections for a while (``ALLOW_CONNECTIONS false``), and restart it (``pg_ctl
restart -m fast``) under three replica processes. Nothing sleeps for a condition: tests await
results, doorbells, the injected clock's sleepers and the restart's own return, each under a
timeout. ``pg_terminate_backend(pid, timeout)`` returns once the backend has exited, so a request
made after it meets a dead connection for sure.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, cast

import anyio
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from asyncai_servers.switchboard.core import Switchboard
from asyncai_servers.switchboard.ledger import Creator, LedgerError
from asyncai_servers.switchboard.ledger_pg import SCHEMA_VERSION, PostgresLedger
from asyncai_watch.testing import FakeClock
from tests.support.pg import PgServer, Store, module_postgres_fixture  # noqa: F401  (fixture)
from tests.support.switchboard_core import ALICE, BOT, CREDS, EVE, board, collect
from tests.support.switchboard_server import CONFIG, Inbox, Running, call, connect, switchboard_http

pytestmark = [pytest.mark.postgres, pytest.mark.anyio]

WAIT = 30
UNAVAILABLE = "PostgreSQL is unavailable"
MAYBE_APPLIED = "may or may not have been applied"
ALICE_CREATOR = Creator(name="alice", attribution="human", verified=True, push=True)


@pytest.fixture(name="store")
def store_fixture(module_postgres: PgServer) -> Store:
    dsn = module_postgres.create_database()
    return Store(kind="postgres", cli=["--postgres", dsn], target=dsn)


@pytest.fixture(name="config")
def config_fixture(tmp_path: Path) -> Path:
    path = tmp_path / "credentials.json"
    path.write_text(json.dumps(CONFIG))
    return path


class Admin:
    """A superuser connection to the cluster's ``postgres`` database, outside the one under test."""

    def __init__(self, conn: psycopg.AsyncConnection[Any], dbname: str) -> None:
        self.conn = conn
        self.dbname = dbname

    async def kill(self, *, keep: Iterable[int | None] = ()) -> list[int]:
        """Terminate every client connection to the test database but ``keep``; return once they are gone."""
        # Materialized first: the planner may otherwise call pg_terminate_backend before the filters.
        cur = await self.conn.execute(
            "WITH victims AS MATERIALIZED (SELECT pid FROM pg_stat_activity WHERE datname = %s"
            " AND backend_type = 'client backend' AND pid <> ALL(%s))"
            " SELECT pid FROM victims WHERE pg_terminate_backend(pid, 30000)",
            (self.dbname, [p for p in keep if p is not None]),
        )
        return [int(r[0]) for r in await cur.fetchall()]

    async def allow_connections(self, allow: bool) -> None:
        await self.conn.execute(f"ALTER DATABASE {self.dbname} ALLOW_CONNECTIONS {str(allow).lower()}")


@asynccontextmanager
async def admin_of(store: Store) -> AsyncIterator[Admin]:
    dbname = str(conninfo_to_dict(store.target)["dbname"])
    conn = await psycopg.AsyncConnection.connect(
        make_conninfo(store.target, dbname="postgres"), autocommit=True
    )
    admin = Admin(conn, dbname)
    try:
        yield admin
    finally:
        await admin.allow_connections(True)
        await conn.close()


@asynccontextmanager
async def started_within(
    seconds: float, starting: AbstractAsyncContextManager[Switchboard]
) -> AsyncIterator[Switchboard]:
    """Enter ``starting`` in a task of its own, failing if it has not started within ``seconds``."""
    boards: list[Switchboard] = []
    started, stop = anyio.Event(), anyio.Event()

    async def run() -> None:
        async with starting as b:
            boards.append(b)
            started.set()
            await stop.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        with anyio.fail_after(seconds):
            await started.wait()
        try:
            yield boards[0]
        finally:
            stop.set()


# -- broken connections and outages, in process ------------------------------------------------------


async def test_terminated_pool_connections_are_replaced_and_no_request_fails(store: Store) -> None:
    # Finding: after one ledger connection was terminated, 3 of 12 later todo_creates failed with
    # "the connection is lost", and kept failing.
    ledger = cast(PostgresLedger, store.ledger())
    async with admin_of(store) as admin, Switchboard(ledger, CREDS) as b:
        await b.create(ALICE, queue="ops", kind="k", summary="warm")
        killed = await admin.kill(keep=[ledger.listener_pid])
        assert killed  # every pool connection (not the LISTEN one)
        made = [(await b.create(ALICE, queue="ops", kind="k", summary=f"after {i}"))[0] for i in range(12)]
        todo, new = await b.claim(EVE, "ops")
        assert todo is not None
        assert new
        assert todo.lease is not None
        await b.complete(EVE, todo.id, todo.lease, "ok")
        listed = await b.list_todos(BOT, queue="ops", status="open")
        assert [t.id for t in listed] == [t.id for t in made]
        # A second round: the replacements are live connections, not one-off retries.
        await admin.kill(keep=[ledger.listener_pid])
        assert len(await b.list_todos(BOT, queue="ops")) == 13


async def test_an_outage_fails_a_request_once_clearly_and_the_next_succeeds_when_it_is_back(
    store: Store,
) -> None:
    listen_clock = FakeClock()
    ledger = PostgresLedger(store.target, clock=listen_clock)
    async with admin_of(store) as admin, board(store) as a, Switchboard(ledger, CREDS) as b:
        with b.hub.subscribe(EVE) as eve:
            await admin.allow_connections(False)
            pid = ledger.listener_pid
            assert await admin.kill()  # both replicas' pool and LISTEN connections
            with anyio.fail_after(WAIT), pytest.raises(LedgerError) as failed:
                await b.create(ALICE, queue="ops", kind="k", summary="during the outage")
            text = str(failed.value)
            assert text.startswith(UNAVAILABLE)
            assert "nothing was changed" in text
            assert "\n" not in text
            assert len(text) < 400
            with anyio.fail_after(WAIT), pytest.raises(LedgerError, match=UNAVAILABLE):
                await b.list_todos(BOT, queue="ops")
            # The LISTEN loop backs off on the ledger's clock instead of ending the replica.
            with anyio.fail_after(WAIT):
                await listen_clock.wait_for_sleepers(1)
            assert listen_clock.deadlines() == [1.0]

            await admin.allow_connections(True)
            # Back: the very next request succeeds, with no retry timer in between.
            made = (await b.create(ALICE, queue="ops", kind="k", summary="after"))[0]
            assert await collect(eve, 1) == [made.id]
            # A's create while B is not listening rings on B once its LISTEN is back (catch-up).
            missed = (await a.create(ALICE, queue="ops", kind="k", summary="missed"))[0]
            listen_clock.advance(1.0)
            assert await collect(eve, 1) == [missed.id]
            assert ledger.listener_pid not in (None, pid)
            later = (await a.create(ALICE, queue="ops", kind="k", summary="later"))[0]
            assert await collect(eve, 1) == [later.id]


async def test_a_failed_catch_up_backs_off_instead_of_ending_the_replica(store: Store) -> None:
    # The LISTEN connection comes back but the catch-up query cannot run: the loop backs off.
    listen_clock = FakeClock()
    ledger = PostgresLedger(store.target, clock=listen_clock)
    async with admin_of(store) as admin, board(store) as a, Switchboard(ledger, CREDS) as b:
        real_snapshot = ledger._listen_snapshot
        cut: list[bool] = []

        async def snapshot_then_outage(conn: Any) -> str:
            snapshot = await real_snapshot(conn)
            if not cut:  # the reconnect only: refuse connections and cut the pool under the catch-up
                cut.append(True)
                await admin.allow_connections(False)
                await admin.kill(keep=[conn.info.backend_pid])
            return snapshot

        with b.hub.subscribe(EVE) as eve:
            ledger._listen_snapshot = snapshot_then_outage  # type: ignore[method-assign]
            await admin.kill()
            with anyio.fail_after(WAIT):
                await listen_clock.wait_for_sleepers(1)
            assert listen_clock.deadlines() == [1.0]
            await admin.allow_connections(True)
            missed = (await a.create(ALICE, queue="ops", kind="k", summary="missed"))[0]
            listen_clock.advance(1.0)
            assert await collect(eve, 1) == [missed.id]


async def test_a_connection_cut_while_committing_says_the_change_may_have_been_applied(store: Store) -> None:
    ledger = cast(PostgresLedger, store.ledger())
    real_notify = ledger._notify
    cut: list[int] = []

    async with admin_of(store) as admin, Switchboard(ledger, CREDS) as b:

        async def notify_then_cut(conn: Any, *args: Any) -> None:
            await real_notify(conn, *args)  # the create's last statement: what follows is COMMIT
            if not cut:
                cut.append(conn.info.backend_pid)
                await admin.conn.execute("SELECT pg_terminate_backend(%s, 30000)", (conn.info.backend_pid,))

        ledger._notify = notify_then_cut  # type: ignore[method-assign,assignment]
        with pytest.raises(LedgerError, match=MAYBE_APPLIED) as failed:
            await b.create(ALICE, queue="ops", kind="k", summary="s", idempotency_key="k1")
        assert "same idempotency_key" in str(failed.value)
        # The advice holds: repeating it with the same key leaves exactly one todo.
        todo, created = await b.create(ALICE, queue="ops", kind="k", summary="s", idempotency_key="k1")
        assert created  # here the cut came before the server committed: it had not been applied
        again, created_again = await b.create(ALICE, queue="ops", kind="k", summary="s", idempotency_key="k1")
        assert (again.id, created_again) == (todo.id, False)
        assert [t.id for t in await b.list_todos(BOT, queue="ops")] == [todo.id]
        assert len(cut) == 1


async def test_the_lease_timer_survives_an_outage_and_retries_on_its_backoff(store: Store) -> None:
    # Finding: the lease timer caught only LedgerError, and a lost connection ended the replica.
    clock = FakeClock(start=1_000_000.0)
    ledger = PostgresLedger(store.target, clock=FakeClock())
    async with admin_of(store) as admin, Switchboard(ledger, CREDS, clock=clock, lease_seconds=30) as b:
        with b.hub.subscribe(BOT) as watcher:
            todo, _ = await b.create(ALICE, queue="ops", kind="k", summary="s")
            assert await collect(watcher, 1) == [todo.id]
            assert (await b.claim(EVE, "ops"))[0] is not None
            with anyio.fail_after(WAIT):
                await clock.wait_for_deadline(1_000_030.0)
            await admin.allow_connections(False)
            await admin.kill()
            # The expiry fails, then each read of the next deadline: 1, 2, 4 s apart on the clock.
            for retry_at in (1_000_030.0, 1_000_031.0, 1_000_033.0, 1_000_037.0):
                with anyio.fail_after(WAIT):
                    await clock.wait_for_deadline(retry_at)
                clock.set_time(retry_at)
            with anyio.fail_after(WAIT):
                await clock.wait_for_deadline(1_000_045.0)
            await admin.allow_connections(True)
            clock.set_time(1_000_045.0)
            assert await collect(watcher, 1) == [todo.id]  # expired: it rings again
            assert b.expired == 1
            assert (await b.ledger.get(todo.id)).status == "open"  # type: ignore[union-attr]


# -- schema setup beside live traffic ------------------------------------------------------------------


async def test_a_start_beside_a_reader_that_then_writes_neither_blocks_nor_deadlocks(store: Store) -> None:
    # Finding: every start ran CREATE INDEX / ALTER TABLE; with a transaction that read todos and
    # then wrote, and an insert committing meanwhile, the start failed with "deadlock detected",
    # and a start blocked a running replica's todo_create.
    async with board(store) as a:
        first = (await a.create(ALICE, queue="ops", kind="k", summary="first"))[0]
        async with await psycopg.AsyncConnection.connect(store.target) as reader:
            await reader.execute("SELECT count(*) FROM todos")  # holds its lock on todos until commit
            await a.create(ALICE, queue="ops", kind="k", summary="meanwhile")
            async with started_within(WAIT, board(store)) as b:
                with anyio.fail_after(WAIT):
                    await a.create(ALICE, queue="ops", kind="k", summary="on A")
                    await b.create(ALICE, queue="ops", kind="k", summary="on B")
                with anyio.fail_after(WAIT):
                    await reader.execute(
                        "UPDATE todos SET summary = 'edited' WHERE id = %s", (int(first.id),)
                    )
                    await reader.commit()
                assert [t.summary for t in await b.list_todos(BOT, queue="ops")] == [
                    "edited",
                    "meanwhile",
                    "on A",
                    "on B",
                ]


LEGACY_SCHEMA = """
CREATE TABLE todos (
    id BIGSERIAL PRIMARY KEY, queue TEXT NOT NULL, kind TEXT NOT NULL, summary TEXT NOT NULL,
    payload TEXT NOT NULL, status TEXT NOT NULL DEFAULT 'open', creator TEXT NOT NULL,
    creator_attribution TEXT NOT NULL, creator_verified BOOLEAN NOT NULL, push BOOLEAN NOT NULL,
    idempotency_key TEXT, assignee TEXT, claimant TEXT, lease TEXT, lease_until DOUBLE PRECISION,
    attempts INTEGER NOT NULL DEFAULT 0, result TEXT, created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL, UNIQUE (creator, idempotency_key)
);
INSERT INTO todos (queue, kind, summary, payload, creator, creator_attribution, creator_verified, push,
                   created_at, updated_at)
VALUES ('ops', 'k', 'from an older version', 'null', 'alice', 'human', true, true, 1, 1);
"""
"""A ledger made by a version before ``created_xid`` and the schema version table."""


async def test_an_old_schema_is_migrated_by_one_start_that_gives_way_to_live_traffic(store: Store) -> None:
    async with await psycopg.AsyncConnection.connect(store.target, autocommit=True) as setup:
        await setup.execute(LEGACY_SCHEMA)
    clock = FakeClock()
    ledger = PostgresLedger(store.target, clock=clock)
    started = anyio.Event()
    stop = anyio.Event()

    async def start() -> None:
        async with Switchboard(ledger, CREDS):
            started.set()
            await stop.wait()

    async with (
        admin_of(store) as admin,
        await psycopg.AsyncConnection.connect(store.target) as reader,
        await psycopg.AsyncConnection.connect(store.target, autocommit=True) as writer,
        anyio.create_task_group() as tg,
    ):
        await reader.execute("SELECT count(*) FROM todos")  # a long read: the migration must wait
        tg.start_soon(start)
        # The migration gave up on its lock timeout and backs off, holding no lock on todos.
        with anyio.fail_after(WAIT):
            await clock.wait_for_sleepers(1)
        assert clock.deadlines() == [1.0]
        assert not started.is_set()
        with anyio.fail_after(WAIT):  # live traffic goes on meanwhile
            await writer.execute(
                "INSERT INTO todos (queue, kind, summary, payload, creator, creator_attribution,"
                " creator_verified, push, created_at, updated_at)"
                " VALUES ('ops', 'k', 'live', 'null', 'bot', 'agent', true, false, 2, 2)"
            )
        assert await admin.kill(keep=[reader.info.backend_pid, writer.info.backend_pid])  # its connections
        await reader.commit()
        clock.advance(1.0)
        with anyio.fail_after(WAIT):
            await started.wait()
        cur = await writer.execute("SELECT version FROM switchboard_schema")
        assert [r[0] for r in await cur.fetchall()] == [SCHEMA_VERSION]
        # The migrated ledger works: old rows are there and new ones take the new column.
        made, _ = await ledger.create(
            queue="ops",
            kind="k",
            summary="new",
            payload=None,
            creator=ALICE_CREATOR,
            idempotency_key=None,
            now=3.0,
        )
        assert made.summary == "new"
        assert [t.summary for t in await ledger.list_todos(["ops"])] == [
            "from an older version",
            "live",
            "new",
        ]
        stop.set()


async def test_a_migration_kept_out_by_a_long_transaction_gives_up_with_a_clear_error(store: Store) -> None:
    async with await psycopg.AsyncConnection.connect(store.target, autocommit=True) as setup:
        await setup.execute(LEGACY_SCHEMA)
    clock = FakeClock()
    ledger = PostgresLedger(store.target, clock=clock)
    failed: list[BaseException] = []

    async def start() -> None:
        try:
            await ledger.open()
        except LedgerError as exc:
            failed.append(exc)

    async with await psycopg.AsyncConnection.connect(store.target) as reader, anyio.create_task_group() as tg:
        await reader.execute("SELECT count(*) FROM todos")  # held for the whole test
        tg.start_soon(start)
        for wait in (1, 2, 4, 8, 8, 8, 8, 8):  # MIGRATE_BACKOFF, then the start gives up
            with anyio.fail_after(WAIT):
                await clock.wait_for_deadline(clock.now() + wait)
            clock.advance(wait)
    assert len(failed) == 1
    text = str(failed[0])
    assert text.startswith("cannot open PostgreSQL ledger: cannot migrate the switchboard schema")
    assert "after 9 attempts" in text
    assert "a long transaction holding table todos kept the migration out" in text


# -- three replica processes ----------------------------------------------------------------------------


@asynccontextmanager
async def replicas(store: Store, config: Path, n: int = 3) -> AsyncIterator[list[Running]]:
    """``n`` replica processes on one database, started at once (so on a new database they race to
    create the schema: one migrates, the others wait for it and find it current)."""
    running: list[Running] = []
    up, stop = anyio.Event(), anyio.Event()

    async def replica() -> None:
        async with switchboard_http(store, config) as r:
            running.append(r)
            if len(running) == n:
                up.set()
            await stop.wait()

    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(replica)
        with anyio.fail_after(WAIT * 2):
            await up.wait()
        try:
            yield running
        finally:
            stop.set()


def assert_alive(running: Iterable[Running]) -> None:
    for r in running:
        assert r.proc.returncode is None, f"a replica exited with {r.proc.returncode}"


async def test_three_replicas_survive_cut_connections_and_a_postgres_restart_mid_traffic(
    store: Store, config: Path, module_postgres: PgServer
) -> None:
    # Findings: one terminated pool connection ended a replica during claims; `pg_ctl restart -m
    # fast` ended all three replicas within 1.6 s. One set of replicas for both (each start costs
    # seconds of imports): claims while every connection is cut, then creates across a restart.
    async with replicas(store, config) as reps:
        async with admin_of(store) as admin:  # not across the restart: that cuts it too
            done = await claims_while_connections_are_cut(reps, admin)
        acked = await creates_across_a_restart(reps, module_postgres)
        assert_alive(reps)
        async with connect(reps[1].url, "bot") as bot:
            listed = (await call(bot, "todo_list", queue="ops", limit=200))["todos"]
        assert {t["id"]: t["result"] for t in listed if t["status"] == "done"} == done
        keys = [t["idempotency_key"] for t in listed if t["idempotency_key"]]
        assert sorted(keys) == sorted(acked)  # each acknowledged create exists once
        assert_alive(reps)


async def claims_while_connections_are_cut(reps: list[Running], admin: Admin) -> dict[str, str]:
    """Three claimers (one per replica) drain 30 todos; every connection is cut a third of the way.

    Returns who completed each todo. A verb may fail only as "may or may not have been applied"
    (its connection was cut while committing); the verbs are idempotent, so the claimer repeats it.
    """
    total, cut_after = 30, 10
    done: dict[str, str] = {}
    reached = anyio.Event()

    async def claimer(url: str, who: str) -> None:
        async with connect(url, who) as c:

            async def repeated(tool: str, **args: Any) -> Any:
                while True:
                    with anyio.fail_after(WAIT):
                        res = await c.call_tool(tool, args)
                    if not res.is_error:
                        return res.structured_content
                    text = res.content[0].text  # type: ignore[union-attr]
                    assert MAYBE_APPLIED in text, text

            while True:
                got = await repeated("todo_claim", queue="ops")
                if got["todo"] is None:
                    return
                todo_id = got["todo"]["id"]
                await repeated("todo_complete", todo_id=todo_id, lease=got["lease"], result=who)
                assert done.setdefault(todo_id, who) == who  # one owner per todo
                if len(done) >= cut_after:
                    reached.set()

    async with connect(reps[0].url, "bot") as bot:  # an agent's todos: pull-only, no doorbells
        for i in range(total):
            await call(bot, "todo_create", queue="ops", kind="k", summary=f"t{i}")
    async with anyio.create_task_group() as tg:
        for r, who in zip(reps, ("bot", "eve", "carol"), strict=True):
            tg.start_soon(claimer, r.url, who)
        with anyio.fail_after(WAIT):
            await reached.wait()
        assert await admin.kill()  # every connection of every replica: pool and LISTEN
    assert_alive(reps)
    assert len(done) == total
    return done


async def creates_across_a_restart(reps: list[Running], server: PgServer) -> dict[str, str]:
    """A writer per replica creates 12 todos; PostgreSQL restarts after the first 6 are acknowledged.

    A create may fail only while the database is away, and only with the clear errors; the writer
    waits for the restart to finish and repeats it with the same idempotency_key. Afterwards every
    replica hears the others again. Returns idempotency_key -> todo_id as acknowledged.
    """
    per_writer, restart_after = 12, 6
    acked: dict[str, str] = {}
    reached, restarted = anyio.Event(), anyio.Event()

    async def writer(url: str, w: int) -> None:
        async with connect(url, "alice") as c:
            for i in range(per_writer):
                key = f"w{w}-{i}"
                while True:
                    back = restarted.is_set()
                    with anyio.fail_after(WAIT):
                        res = await c.call_tool(
                            "todo_create",
                            {"queue": "ops", "kind": "k", "summary": key, "idempotency_key": key},
                        )
                    if not res.is_error:
                        break
                    text = res.content[0].text  # type: ignore[union-attr]
                    assert not back, f"failed after the database was back: {text}"
                    assert UNAVAILABLE in text or MAYBE_APPLIED in text, text
                    with anyio.fail_after(WAIT * 2):
                        await restarted.wait()
                assert res.structured_content is not None
                todo_id = res.structured_content["todo"]["id"]
                assert acked.setdefault(key, todo_id) == todo_id
                if len(acked) >= restart_after:
                    reached.set()

    inboxes = [Inbox() for _ in reps]
    async with AsyncExitStack() as stack:
        for r, inbox in zip(reps, inboxes, strict=True):
            eve = await stack.enter_async_context(connect(r.url, "eve", [inbox.extension]))
            await stack.enter_async_context(eve.listen(resource_subscriptions=[]))
        async with anyio.create_task_group() as tg:
            for w, r in enumerate(reps):
                tg.start_soon(writer, r.url, w)
            with anyio.fail_after(WAIT):
                await reached.wait()
            await anyio.to_thread.run_sync(server.restart)
            restarted.set()
        assert_alive(reps)
        assert len(acked) == len(reps) * per_writer
        # Every replica listens again: a todo made on replica 0 rings eve on each replica.
        async with connect(reps[0].url, "alice") as alice:
            sentinel = (await call(alice, "todo_create", queue="ops", kind="k", summary="sentinel"))["todo"]
        for inbox in inboxes:
            while (await inbox.next()).meta["todo_id"] != sentinel["id"]:  # each next() is bounded
                pass
    return acked
