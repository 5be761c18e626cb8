"""asyncai-mcp-webhooks on PostgreSQL: several replicas on one database, a real (throwaway)
PostgreSQL cluster, real server processes, real HTTP on loopback.

Nothing waits on time: each step awaits an HTTP answer, a listen's notification or a fake clock's
sleeper, bounded by ``anyio.fail_after``.
"""

from __future__ import annotations

import json
import signal
import threading
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from asyncai_servers.webhooks.config import load_config
from asyncai_servers.webhooks.server import TRIM_INTERVAL, WebhooksServer
from asyncai_servers.webhooks.store import Retention, Store
from asyncai_servers.webhooks.store_pg import PgStore
from asyncai_servers.webhooks.uri import LogTarget
from asyncai_watch.core.eventlog import Sequencer
from asyncai_watch.testing import FakeClock
from tests.support.pg import PgServer, postgres_server  # noqa: F401  (fixture)
from tests.support.webhooks_helpers import (
    NOW,
    RUNS,
    WAIT,
    body_of,
    github,
    http_server,
    log_until,
    mcp_client,
    post,
    read_log,
    run_delivery,
    sources,
    workflow_run,
    write_config,
)

pytestmark = [pytest.mark.anyio]
pg = pytest.mark.postgres


@pytest.fixture
def dsn(postgres_server: PgServer) -> str:  # noqa: F811
    return postgres_server.create_database()


def pg_store(dsn: str, clock: list[float] | None = None, **kw: Any) -> PgStore:
    now = clock if clock is not None else [NOW]
    return PgStore(dsn, kinds={"github": "github"}, now=lambda: now[0], **kw)


def events_of(s: PgStore | Store, target: LogTarget, after: tuple[str, int] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(s.read_log(target, after).text)
    return body


# -- the store, two replicas in one process ----------------------------------------------------------


@pg
def test_a_filtered_log_one_replica_made_is_appended_to_by_the_other(dsn: str) -> None:
    a, b = pg_store(dsn), pg_store(dsn)
    failures = LogTarget("github", "workflow_run", (("conclusion", "failure"),))
    a.insert(*run_delivery(1))
    assert b.ensure_view(failures)  # made (and filled) at replica b ...
    assert not a.ensure_view(failures)  # ... and found, not made twice, at replica a
    a.insert_many([run_delivery(2), run_delivery(3, conclusion="success")])
    b.insert(*run_delivery(1))  # a retry sent to the other replica: nothing
    mine = events_of(b, failures)
    every = events_of(a, LogTarget("github", "workflow_run"))
    assert [(e["seq"], e["key"]) for e in mine["events"]] == [(1, "1"), (2, "2")]
    assert [(e["seq"], e["key"]) for e in every["events"]] == [(1, "1"), (2, "2"), (3, "3")]
    assert a.counts()["github"]["deliveries"] == 3


@pg
def test_replicas_inserting_at_once_number_each_log_without_gaps_or_duplicates(dsn: str) -> None:
    replicas = [pg_store(dsn) for _ in range(2)]
    failures = LogTarget("github", "workflow_run", (("conclusion", "failure"),))
    replicas[1].ensure_view(failures)
    per_thread = 60
    errors: list[BaseException] = []

    def send(store: PgStore, first: int) -> None:
        try:
            for i in range(first, first + per_thread, 3):  # batches of 3, each a retry of the last too
                batch = [
                    run_delivery(j, conclusion="failure" if j % 2 else "success") for j in range(i, i + 3)
                ]
                store.insert_many([*batch, batch[-1]])
                store.insert(*batch[0])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=send, args=(s, k * per_thread)) for k, s in enumerate(replicas)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert not errors
    assert not any(t.is_alive() for t in threads)
    total = 2 * per_thread
    every = events_of(replicas[0], LogTarget("github", "workflow_run"), None)
    seqs: list[int] = []
    keys: list[str] = []
    for target, want in ((LogTarget("github", "workflow_run"), total), (failures, total // 2)):
        seqs, keys = [], []
        after: tuple[str, int] = (events_of(replicas[1], target)["log_id"], 0)  # from the start
        while len(seqs) < want:
            page = events_of(replicas[1], target, after)
            assert page["events"], (len(seqs), want)
            seqs += [e["seq"] for e in page["events"]]
            keys += [e["key"] for e in page["events"]]
            after = (page["log_id"], seqs[-1])
        assert seqs == list(range(1, want + 1))
        assert len(set(keys)) == want
    assert every["last_seq"] == total


@pg
def test_positions_stay_valid_when_every_replica_restarts(dsn: str) -> None:
    target = LogTarget("github", "workflow_run", (("conclusion", "failure"),))
    a = pg_store(dsn)
    a.ensure_view(target)
    a.insert_many([run_delivery(1), run_delivery(2)])
    first = events_of(a, target)
    a.close()
    again = pg_store(dsn)
    again.insert(*run_delivery(3))
    later = events_of(again, target, (first["log_id"], 2))
    sequencer = Sequencer()
    sequencer.feed(first)
    assert later["log_id"] == first["log_id"]
    assert [(e.type, e.seq) for e in sequencer.feed(later).events] == [("workflow_run.completed", 3)]


@pg
def test_retention_on_postgres_drops_the_oldest_and_a_reader_behind_gets_a_gap(dsn: str) -> None:
    clock = [NOW]
    s = pg_store(dsn, clock, retention=Retention(max_age=3600, max_count=3))
    target = LogTarget("github", "workflow_run")
    s.insert(*run_delivery(1))
    sequencer = Sequencer()
    sequencer.feed(events_of(s, target))
    s.insert_many([run_delivery(i) for i in range(2, 7)])
    assert s.trim() == 3
    clock[0] += 7200
    s.insert(*run_delivery(7))
    assert s.trim() == 3
    events = sequencer.feed(events_of(s, target, (sequencer.log_id or "", 1))).events
    assert events[0].type == "GAP"
    assert events[0].fields["retention"] == "deliveries of the last 3600s, at most 3 per source"
    assert [e.seq for e in events[1:]] == [7]


# -- the retention timer: an idle server trims too -----------------------------------------------


def _server(tmp: Path, clock: FakeClock, **store: Any) -> WebhooksServer:
    return WebhooksServer(
        load_config(write_config(tmp)), clock=clock, retention=Retention(max_age=100), **store
    )


async def _idle_server_trims(server: WebhooksServer, clock: FakeClock) -> dict[str, Any]:
    target = LogTarget("github", "workflow_run")
    async with server.running():
        with anyio.fail_after(WAIT):
            assert await server.deliver(run_delivery(1)[0]) is True
        before = json.loads((await anyio.to_thread.run_sync(server.store.read_log, target, None)).text)
        assert [e["seq"] for e in before["events"]] == [1]
        # No delivery comes; time passes beyond the retention (a day), and the timer applies it.
        with anyio.fail_after(WAIT):
            await clock.wait_for_sleepers(1)
            clock.advance(86400)
            await clock.wait_for_deadline(clock.now() + min(TRIM_INTERVAL, 100))
        after: dict[str, Any] = json.loads(
            (await anyio.to_thread.run_sync(server.store.read_log, target, None)).text
        )
    server.close()
    return after


async def test_an_idle_server_applies_the_retention_on_its_clock(tmp_path: Path) -> None:
    clock = FakeClock(NOW)
    after = await _idle_server_trims(_server(tmp_path, clock, db=tmp_path / "hooks.sqlite3"), clock)
    assert after["events"] == []
    assert (after["first_seq"], after["last_seq"]) == (2, 1)


@pg
async def test_an_idle_replica_applies_the_retention_on_its_clock(tmp_path: Path, dsn: str) -> None:
    clock = FakeClock(NOW)
    after = await _idle_server_trims(_server(tmp_path, clock, dsn=dsn), clock)
    assert after["events"] == []
    assert (after["first_seq"], after["last_seq"]) == (2, 1)


# -- two server processes on one database ------------------------------------------------------------


def _posts(hooks: str, run_ids: range) -> list[tuple[str, bytes, dict[str, str]]]:
    out = []
    for run_id in run_ids:
        b = body_of(workflow_run(run_id))
        out.append((hooks + "github", b, github(b, "workflow_run", delivery=f"delivery-{run_id}")))
    return out


@pg
async def test_a_watcher_on_one_replica_hears_deliveries_to_both_in_order_once(
    tmp_path: Path, dsn: str
) -> None:
    uri = f"{RUNS}?conclusion=failure"
    store = ["--database", dsn]
    async with (
        http_server(tmp_path, store=store) as (_url_a, hooks_a, headers, _a),
        http_server(tmp_path, store=store) as (url_b, hooks_b, _headers, _b),
        mcp_client(url_b, headers) as watcher,
        watcher.listen(resource_subscriptions=[uri]) as sub,
    ):
        sent: list[str] = []
        for i, (hook, body, hdrs) in enumerate(_posts("", range(1, 8))):  # the last to a: heard by NOTIFY
            answer = await post((hooks_a if i % 2 == 0 else hooks_b) + hook, body, hdrs)
            assert answer.json()["stored"] is True
            sent.append(hdrs["X-GitHub-Delivery"])
        # Heard at b by notification (the deliveries to a too), then read: in order, once.
        body = await log_until(watcher, sub, uri, lambda got: len(got["events"]) >= 7)
    assert [e["seq"] for e in body["events"]] == [1, 2, 3, 4, 5, 6, 7]
    assert [e["delivery_id"] for e in body["events"]] == sent


@pg
async def test_a_delivery_only_the_other_replica_received_wakes_the_watcher(tmp_path: Path, dsn: str) -> None:
    store = ["--database", dsn]
    async with (
        http_server(tmp_path, store=store) as (_url_a, hooks_a, headers, _a),
        http_server(tmp_path, store=store) as (url_b, _hooks_b, _headers, _b),
        mcp_client(url_b, headers) as watcher,
        watcher.listen(resource_subscriptions=[RUNS]) as sub,
    ):
        first = await read_log(watcher, RUNS)
        ((hook, b, hdrs),) = _posts(hooks_a, range(42, 43))
        assert (await post(hook, b, hdrs)).json()["stored"] is True
        with anyio.fail_after(WAIT):
            await sub.__anext__()  # b's listener is told: b received nothing itself
        got = await read_log(watcher, RUNS)
    assert first["events"] == []
    assert [e["key"] for e in got["events"]] == ["42"]


@pg
async def test_a_retry_sent_to_both_replicas_is_one_event(tmp_path: Path, dsn: str) -> None:
    store = ["--database", dsn]
    async with (
        http_server(tmp_path, store=store) as (url_a, hooks_a, headers, _a),
        http_server(tmp_path, store=store) as (url_b, hooks_b, _headers, _b),
        mcp_client(url_a, headers) as client_a,
        mcp_client(url_b, headers) as client_b,
    ):
        ((_, b, hdrs),) = _posts("", range(8, 9))
        answers: list[dict[str, Any]] = []

        async def send(hooks: str) -> None:
            answers.append((await post(hooks + "github", b, hdrs)).json())

        async with anyio.create_task_group() as tg:  # the redelivery racing the original, at both
            for hooks in (hooks_a, hooks_b, hooks_a, hooks_b):
                tg.start_soon(send, hooks)
        runs = await read_log(client_b, RUNS)
        listed = [await sources(c) for c in (client_a, client_b)]
    assert sorted(a["stored"] for a in answers) == [False, False, False, True]
    assert [e["seq"] for e in runs["events"]] == [1]
    assert sum(x["accepted"] for x in listed) == 1
    assert sum(x["duplicates"] for x in listed) == 3
    assert listed[0]["sources"]["github"]["deliveries"] == 1


@pg
async def test_killed_replicas_restarted_keep_every_position(tmp_path: Path, dsn: str) -> None:
    store = ["--database", dsn]
    filtered = f"{RUNS}?conclusion=failure"
    async with (
        http_server(tmp_path, store=store) as (url_a, hooks_a, headers, proc_a),
        http_server(tmp_path, store=store) as (_url_b, hooks_b, _headers, proc_b),
        mcp_client(url_a, headers) as client,
    ):
        for i, (hook, b, hdrs) in enumerate(_posts("", range(1, 4))):
            assert (await post((hooks_a, hooks_b)[i % 2] + hook, b, hdrs)).status_code == 200
        first = await read_log(client, RUNS)
        first_filtered = await read_log(client, filtered)
        for proc in (proc_a, proc_b):
            proc.send_signal(signal.SIGKILL)
    async with (
        http_server(tmp_path, store=store) as (url, hooks, headers, _proc),
        mcp_client(url, headers) as client,
    ):
        for hook, b, hdrs in _posts(hooks, range(4, 6)):
            assert (await post(hook, b, hdrs)).status_code == 200
        after = await read_log(client, RUNS, (first["log_id"], 3))
        after_filtered = await read_log(client, filtered, (first_filtered["log_id"], 3))
    sequencer = Sequencer()
    sequencer.feed(first)
    assert (after["log_id"], after_filtered["log_id"]) == (first["log_id"], first_filtered["log_id"])
    assert [(e.type, e.seq) for e in sequencer.feed(after).events] == [
        ("workflow_run.completed", 4),
        ("workflow_run.completed", 5),
    ]
    assert [e["key"] for e in after_filtered["events"]] == ["4", "5"]


# -- the command line ------------------------------------------------------------------------------


def test_a_password_on_the_command_line_is_refused_naming_where_it_may_go(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from asyncai_servers.webhooks.__main__ import main

    argv = [
        "--config",
        str(write_config(tmp_path)),
        "--database",
        "postgresql://hooks:s3cret@127.0.0.1/hooks",
    ]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert "--database: the DSN carries a password" in err
    assert "--database-file" in err
    assert "ASYNCAI_WEBHOOKS_DATABASE" in err
    assert "s3cret" not in err
    with pytest.raises(SystemExit):
        main(["--config", str(write_config(tmp_path))])
    assert "--db FILE (SQLite), or PostgreSQL by --database DSN" in capsys.readouterr().err


# -- the LISTEN connection -------------------------------------------------------------------------


@pg
async def test_a_cut_listen_connection_is_made_again_and_wakes_every_listener(dsn: str) -> None:
    import psycopg

    from asyncai_servers.webhooks.store_pg import Changed, listen

    a, b = pg_store(dsn), pg_store(dsn)
    heard_send, heard = anyio.create_memory_object_stream[Changed | str](100)
    async with anyio.create_task_group() as tg:
        await tg.start(
            partial(
                listen,
                dsn,
                b.replica_id,
                on_change=heard_send.send_nowait,
                on_connect=lambda: heard_send.send_nowait("connected"),
            )
        )
        with anyio.fail_after(WAIT):
            assert await heard.receive() == "connected"
            await anyio.to_thread.run_sync(b.insert, *run_delivery(1))  # b's own: not heard
            await anyio.to_thread.run_sync(a.insert, *run_delivery(2))
            change = await heard.receive()
            assert isinstance(change, Changed)
            assert LogTarget("github", "workflow_run") in change.logs
            assert [s.object_id for s in change.states] == ["2"]
            with psycopg.connect(dsn, autocommit=True) as admin:  # what a database restart does to it
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                    (f"asyncai-mcp-webhooks {b.replica_id} listen",),
                )
            assert await heard.receive() == "connected"  # again: every listener is woken to read
            await anyio.to_thread.run_sync(a.insert, *run_delivery(3))
            change = await heard.receive()
            assert isinstance(change, Changed)
            assert [s.object_id for s in change.states] == ["3"]
        tg.cancel_scope.cancel()
    a.close()
    b.close()


@pg
def test_past_the_cap_the_least_recently_read_filtered_log_of_any_replica_goes(dsn: str) -> None:
    clock = [NOW]
    a, b = pg_store(dsn, clock, max_views=2), pg_store(dsn, clock, max_views=2)
    main, dev, ci = (LogTarget("github", "workflow_run", (("branch", x),)) for x in ("main", "dev", "ci"))
    other = LogTarget("deploys", "", (("action", "done"),))
    a.insert(*run_delivery(1))
    first = {t: events_of(a, t)["log_id"] for t in (main, dev)}
    clock[0] += 1
    b.read_log(main, None)  # read at replica b: dev is now the least recently read
    clock[0] += 1
    b.trim()  # b's reading times are written at its next retention pass
    a.read_log(ci, None)  # a third filtered log: one must go
    assert events_of(a, main)["log_id"] == first[main]
    assert events_of(a, dev)["log_id"] != first[dev]
    clock[0] += 1
    assert events_of(b, other)["events"] == []  # another source's filtered log evicts across sources
    import psycopg

    with psycopg.connect(dsn) as conn:
        kept = conn.execute("SELECT source FROM webhook_views WHERE filter <> '' ORDER BY source").fetchall()
    assert kept == [("deploys",), ("github",)]


@pg
async def test_a_dsn_with_a_password_is_taken_from_a_file_or_the_environment(
    tmp_path: Path, dsn: str
) -> None:
    import argparse

    from asyncai_servers.webhooks.__main__ import _dsn

    secret = f"{dsn} password=only-in-the-file"  # the test cluster trusts loopback: it is not checked
    (tmp_path / "dsn").write_text(secret + "\n")
    async with (
        http_server(tmp_path, store=["--database-file", str(tmp_path / "dsn")]) as (url, hooks, headers, _p),
        mcp_client(url, headers) as client,
    ):
        ((hook, b, hdrs),) = _posts(hooks, range(5, 6))
        assert (await post(hook, b, hdrs)).json()["stored"] is True
        assert [e["key"] for e in (await read_log(client, RUNS))["events"]] == ["5"]
    none = argparse.Namespace(database=None, database_file=None, db=None)
    assert _dsn(none, {"ASYNCAI_WEBHOOKS_DATABASE": secret}) == secret
    (tmp_path / "big").write_text("x" * 5000)
    with pytest.raises(ValueError, match="longer than 4096 bytes"):
        _dsn(argparse.Namespace(database=None, database_file=tmp_path / "big", db=None), {})
