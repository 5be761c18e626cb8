"""PostgreSQL server benchmark, as a user of the library sees it: every figure goes through ``WatchManager``.

    python bench/postgres.py           # 1,000 changes; 20 poll phases; 10 s idle; 10 s of load
    python bench/postgres.py --quick   # 200 changes; 5 poll phases; 3 s idle; 4 s of load

A throwaway PostgreSQL (tests/support/pg.py; fsync off, so the figures are the server's and not the
disk's) with ``pg_stat_statements`` loaded. The server (``python -m asyncai_servers.postgres``)
runs over stdio as a read-only role ``watcher``; writers are separate processes
(``bench/_pg_writer.py``) on their own connections, as any application is; the polling baseline
runs as role ``poller`` on its own connection, so each role's statements are counted apart.

1. commit -> notice: a writer process updates one row of ``payments`` (1,000 rows), one change
   at a time, the next once the notice of the last has come. Latency = the notice's arrival on
   ``WatchManager.notices`` minus the writer's clock just before its statement (its commit
   included). Measured for the state watch (``pg://public/payments``, the whole table) and the
   event-log watch (``pg-events://public/payments``). Target: p50 <= 10 ms. Baseline, same run:
   a client polling ``SELECT ... FROM payments`` every 1 s and diffing, the changes made at
   evenly spread phases (k + 0.5) / M of its period.
2. statements while idle: with both watches open and nothing changing, the statements the
   server's role ran (``pg_stat_statements``) over the window, against the poller's. Target 0.
3. sustained load: four writer processes insert rows into ``load``, 1,000 per second between
   them, each row in its own transaction; an event-log watch (``pg-events://public/load``) with no debounce and no
   per-read cap counts an ``ADDED`` line per row. Figures: rows delivered of rows committed
   (none may be lost or reported in a GAP), the rate delivered, each row's lag from its
   statement to its notice against a 1 s poll of the same table, and the server's statements
   per committed row (re-reads batch what piles up while one runs).
4. shared work: one client's single event-log watch of ``payments`` (p50 commit -> notice)
   alone, then beside another client of the same server (Streamable HTTP) whose one listen names
   10,000 filtered URIs of ``payments``. Target: at most 1.5x its p50 alone.
5. writer cost: a single-row UPDATE in its own transaction on ``payments`` (the triggers) against
   an identical table without them, interleaved. Reported, not a target.
6. changes committed while the server is down: the server is killed (SIGKILL) with a durable
   event-log watch (``pg-events://public/down``) open, a writer commits rows one per
   transaction, and the manager starts the server again 5 s later: rows delivered after it is
   back of rows committed while down. Beside it, same run: a filtered watch of the same rows
   (``?k=1``), whose log is read from the same durable log (it was the server's in-memory ring:
   0 delivered and a GAP).
7. a restart under 1,000 changes/s: the sustained load of 3 into ``restart``, the server killed
   halfway and started again by the manager: rows delivered, lost, duplicated, and GAP lines, for
   the durable watch and the filtered view beside it (durable too now).
8. the change source, measured side by side: a writer's single-row INSERT + commit (p50) into a
   table without triggers, with the NOTIFY triggers only, with the NOTIFY triggers and the
   capture, and with a logical replication slot (pgoutput, a publication of that table; the
   cluster runs ``wal_level = logical`` for this); and what reading 1,000 changes back costs
   through the server's ``read_log`` against ``pg_logical_slot_get_binary_changes``.
   Reported, not gated.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import attrs
import httpx2

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import pg  # noqa: E402  (the tests' throwaway PostgreSQL)
import psycopg  # noqa: E402
import psycopg.sql  # noqa: E402
from _memo import LineProcess, line_process, pct, poll_latency, row  # noqa: E402
from latency import Counting  # noqa: E402  (a source that timestamps update signals and reads)

from asyncai_servers.postgres.config import TableName  # noqa: E402
from asyncai_servers.postgres.triggers import install_triggers  # noqa: E402
from asyncai_watch import Limits, McpResourceSource, WatchManager  # noqa: E402

PERIOD = 1.0  # the polling client's period, s
P50_TARGET_MS = 10.0
RATE = 1000.0  # rows per second, sustained
ROWS = 1000  # rows of payments
LOADERS = 4  # writer processes sharing the sustained load (one alone cannot offer 1,000/s on a busy machine)
IMMEDIATE = Limits(debounce_quiet=0, debounce_max_wait=0)
UNCAPPED = Limits(
    debounce_quiet=0, debounce_max_wait=0, events_per_update=1_000_000, lines_per_notice=1_000_000
)
# The client's default events per update (the server's page is that size): a reader catching
# up reads page after page; every line shown.
UNCAPPED_D = Limits(debounce_quiet=0, debounce_max_wait=0, lines_per_notice=1_000_000)
FILTERED = 10_000  # URIs in the crowding client's one listen (figure 4)
CONFIG = f"""
[[table]]
name = "payments"
max_rows = {ROWS * 2}
where = ["id"]

[[table]]
name = "load"
max_rows = 1000000

[[table]]
name = "down"
where = ["k"]
max_rows = 1000000

[[table]]
name = "restart"
where = ["k"]
max_rows = 1000000
"""
DOWN_FOR = 5.0  # s the manager waits before starting a killed server again (bench 4)
COST_ROWS = 1000  # single-row commits per writer-cost variant (bench 6)


def start_cluster(base: Path) -> pg.PgServer:
    """initdb + start, then restart with pg_stat_statements loaded (it needs shared memory)."""
    srv = pg.start_postgres(base)
    with psycopg.connect(srv.dsn(), autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
        # For the side-by-side with logical decoding (6); it adds little WAL to the other figures.
        conn.execute("ALTER SYSTEM SET wal_level = 'logical'")
    srv.restart()
    return srv


def set_up(srv: pg.PgServer) -> str:
    dsn = srv.create_database()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pg_stat_statements")
        for role in ("watcher", "poller"):
            conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(
            "CREATE TABLE payments (id int PRIMARY KEY, status text NOT NULL, amount numeric(10, 2))"
        )
        conn.execute(
            "INSERT INTO payments SELECT g, 'open', g / 100.0 FROM generate_series(1, %s) g", (ROWS,)
        )
        conn.execute("CREATE TABLE load (id int PRIMARY KEY, v int NOT NULL)")
        for name in ("down", "restart"):
            conn.execute(
                f"CREATE TABLE {name} (id int PRIMARY KEY, v int NOT NULL, k int NOT NULL DEFAULT 1)"
            )
        for name in ("cost_plain", "cost_notify", "cost_capture", "cost_logical"):
            conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v int NOT NULL, note text)")
        conn.execute("GRANT SELECT ON payments, load, down, restart TO watcher, poller")
    watched = ["payments", "load", "down", "restart", "cost_notify", "cost_capture"]
    install_triggers(dsn, [TableName("public", t) for t in watched])
    with psycopg.connect(dsn, autocommit=True) as conn:  # cost_notify: the NOTIFY triggers alone
        conn.execute("DROP TRIGGER asyncai_watch_capture_row ON cost_notify")
        conn.execute("DROP TRIGGER asyncai_watch_capture_truncate ON cost_notify")
    return dsn


def server_pid() -> int | None:
    """The server process (a child of this one, spawned by ``McpResourceSource.stdio``)."""
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if ppid == me and b"asyncai_servers.postgres" in cmdline:
            return int(entry.name)
    return None


def cpu_seconds(pid: int | None) -> float:
    """CPU (user + system) a process has used so far, from /proc; 0 without one."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def as_role(dsn: str, role: str) -> str:
    return dsn.replace("user=postgres", f"user={role}")


def statements(dsn: str, role: str) -> int:
    """Statements ``role`` has run (pg_stat_statements), read on the admin's own connection."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(
            "SELECT coalesce(sum(calls), 0)::int8 FROM pg_stat_statements WHERE userid = %s::regrole", (role,)
        )
        found = cur.fetchone()
    return int(found[0]) if found else 0


class Writer(LineProcess):
    """``bench/_pg_writer.py`` in its own process."""

    def __init__(self, process: anyio.abc.Process) -> None:
        super().__init__(process)
        self.calls: list[float] = []

    async def update(self, row_id: int, value: str) -> float:
        t0, t1 = map(float, (await self.ask(f"update {row_id} {value}")).split())
        self.calls.append(t1 - t0)
        return t0

    async def load(
        self, rate: float, seconds: float, part: int, parts: int, begin: float, table: str = "load"
    ) -> dict[int, float]:
        answer = await self.ask(
            f"load {rate} {seconds} {part} {parts} {begin!r} {table}", wait=seconds * 10 + 60
        )
        return {int(k): float(v) for k, v in json.loads(answer).items()}


def writer(dsn: str) -> AbstractAsyncContextManager[Writer]:
    return line_process([sys.executable, str(HERE / "_pg_writer.py"), dsn], Writer)


async def stamped(
    m: WatchManager, tg: anyio.abc.TaskGroup
) -> anyio.abc.ObjectReceiveStream[tuple[float, str]]:
    """Each notice's arrival (``time.monotonic()``, taken when the channel hands it over) and text."""
    send, receive = anyio.create_memory_object_stream[tuple[float, str]](1_000_000)

    async def stamp() -> None:
        async for notice in m.notices:
            send.send_nowait((time.monotonic(), notice.text))

    tg.start_soon(stamp)
    return receive


@dataclasses.dataclass
class Change:
    """One change as the watch saw it: the writer's clock before its statement, the update
    signal at the watcher, the watcher's read of it (start, end) and the notice's arrival."""

    t0: float
    signal: float
    read_start: float
    read_end: float
    arrived: float


async def watch_latency(
    source: McpResourceSource, uri: str, w: Writer, changes: int, tag: str
) -> list[Change]:
    counted = Counting(source)
    async with WatchManager([counted], limits=IMMEDIATE) as m, anyio.create_task_group() as tg:
        await m.watch_start("w", uri)
        arrivals = await stamped(m, tg)
        seen: list[Change] = []
        for i in range(-20, changes):  # the first 20 warm up the connections and the code paths
            reads, signals = len(counted.reads), len(counted.signals)
            t0 = await w.update(i % ROWS + 1, f"{tag}{i}")
            with anyio.fail_after(30):
                arrived, _ = await arrivals.receive()
            if i >= 0:
                # The signal and the read that carried the change: the first ones after the writer's call.
                signal = next((t for t in counted.signals[signals:] if t >= t0), arrived)
                start, end = next((r for r in counted.reads[reads:] if r[0] >= t0), (arrived, arrived))
                seen.append(Change(t0, signal, start, end, arrived))
        tg.cancel_scope.cancel()
    return seen


class Poller:
    """A client that runs the table's query every ``period`` s on a fixed schedule and diffs."""

    def __init__(self, dsn: str, start: float, period: float) -> None:
        self.dsn, self.start, self.period = dsn, start, period
        self.send, self.detections = anyio.create_memory_object_stream[float](100)

    async def run(self) -> None:
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:

            async def snapshot() -> dict[int, str]:
                cur = await conn.execute("SELECT id, row_to_json(p)::text FROM payments p")
                return dict(await cur.fetchall())

            previous = await snapshot()
            tick = 1
            while True:
                # The polling client's own wait: this is the baseline being measured.
                await anyio.sleep(max(0.0, self.start + tick * self.period - time.monotonic()))
                current = await snapshot()
                if current != previous:
                    await self.send.send(time.monotonic())
                previous = current
                tick += 1


async def load_poller(
    dsn: str, start: float, seen: dict[int, float], total: int, all_seen: anyio.Event
) -> None:
    """The 1 s polling baseline of the load: new rows since the last poll, when they were first seen."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        last, tick = 0, 1
        while True:
            await anyio.sleep(max(0.0, start + tick * PERIOD - time.monotonic()))  # the poller's period
            cur = await conn.execute("SELECT id FROM load WHERE id > %s ORDER BY id", (last,))
            now = time.monotonic()
            for (row_id,) in await cur.fetchall():
                seen.setdefault(row_id, now)
                last = max(last, row_id)
            if len(seen) >= total:
                all_seen.set()
            tick += 1


async def sustained(source: McpResourceSource, dsn: str, admin: str, seconds: float) -> dict[str, Any]:
    total = round(RATE * seconds)
    arrived: dict[int, float] = {}
    polled: dict[int, float] = {}
    gaps: list[str] = []
    done, polled_all = anyio.Event(), anyio.Event()
    async with WatchManager([source], limits=UNCAPPED) as m, AsyncExitStack() as stack:
        loaders = [await stack.enter_async_context(writer(dsn)) for _ in range(LOADERS)]
        tg = await stack.enter_async_context(anyio.create_task_group())
        await m.watch_start("load", "pg-events://public/load")

        async def tally() -> None:
            async for notice in m.notices:
                now = time.monotonic()
                for line in notice.text.splitlines():
                    kind, _, key = line.partition(" ")
                    if kind == "ADDED" and key.isdigit():
                        arrived.setdefault(int(key), now)
                    else:
                        gaps.append(line)
                if len(arrived) >= total:
                    done.set()

        tg.start_soon(tally)
        tg.start_soon(load_poller, as_role(dsn, "poller"), time.monotonic(), polled, total, polled_all)
        before = statements(admin, "watcher")
        pid = server_pid()
        cpu_before = cpu_seconds(pid)
        begin = time.monotonic() + 0.5
        starts: dict[int, float] = {}

        async def run_loader(part: int) -> None:
            starts.update(await loaders[part].load(RATE, seconds, part, LOADERS, begin))

        async with anyio.create_task_group() as load_tg:
            for part in range(LOADERS):
                load_tg.start_soon(run_loader, part)
        with anyio.move_on_after(30):  # every row, or 30 s after the last commit
            await done.wait()
        queries = statements(admin, "watcher") - before
        cpu = cpu_seconds(pid) - cpu_before
        with anyio.move_on_after(PERIOD * 2 + 5):  # the poller's next look finds the last rows
            await polled_all.wait()
        tg.cancel_scope.cancel()
    lags = [arrived[i] - t for i, t in starts.items() if i in arrived]
    poll_lags = [polled[i] - t for i, t in starts.items() if i in polled]
    last = max(arrived.values()) if arrived else float("nan")
    first, final = min(starts.values()), max(starts.values())
    return {
        "total": total,
        "delivered": len(arrived),
        "offered_rate": total / (final - first) if final > first else float("nan"),
        "delivered_rate": len(arrived) / (last - first) if arrived else 0.0,
        "lags": lags,
        "poll_lags": poll_lags,
        "other_lines": gaps,
        "queries": queries,
        "cpu": cpu,
    }


async def crowded(argv: list[str], w: Writer, changes: int) -> tuple[list[Change], list[Change], float]:
    """A client's single watch of ``payments``, alone and then beside another client of the same
    server (Streamable HTTP, so both share it) whose one listen names 10,000 filtered URIs of the
    same table (``pg://public/payments?id=N``, each updated row is one of them). The sources of one
    table share one re-read per change, so the crowd should cost the single watch little. Also
    the seconds from the crowd's listen to its acknowledgment (10,000 first reads)."""
    from mcp import Client

    from asyncai_watch.server.http import running_http_server

    uri = "pg-events://public/payments"
    many = [f"pg://public/payments?id={i}" for i in range(1, FILTERED + 1)]
    async with AsyncExitStack() as stack:
        # Both clients present the same credentials, so to the server they are one client: let it
        # hold the crowd and the single watch (--max-sources-per-client, default 10,000).
        served = [*argv, "--http", "127.0.0.1:0", "--max-sources-per-client", str(FILTERED + 1)]
        url, _proc = await stack.enter_async_context(running_http_server(served))
        source = await stack.enter_async_context(McpResourceSource.http(url, name="pg"))
        alone = await watch_latency(source, uri, w, changes, "a")
        from mcp.client.streamable_http import streamable_http_client

        from asyncai_watch.http_auth.local import local_headers

        # The server published a token for the run (loopback, no token of its own): send it.
        http = await stack.enter_async_context(
            httpx2.AsyncClient(headers=local_headers(url, None, has_auth=False))
        )
        crowd = await stack.enter_async_context(Client(streamable_http_client(url, http_client=http)))
        t0 = time.monotonic()
        with anyio.fail_after(600):
            await stack.enter_async_context(crowd.listen(resource_subscriptions=many))
        acked = time.monotonic() - t0
        beside = await watch_latency(source, uri, w, changes, "b")
    return alone, beside, acked


def writer_cost(dsn: str, n: int) -> tuple[float, float]:
    """p50 of a single-row UPDATE (its own transaction, round trip included) on ``payments``
    (the triggers) and on an identical table without them, interleaved: the writers' price."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS plain (LIKE payments INCLUDING ALL)")
        conn.execute("INSERT INTO plain SELECT * FROM payments ON CONFLICT DO NOTHING")
        with_t: list[float] = []
        without: list[float] = []
        for i in range(-50, n):  # the first 50 warm up
            for table, out in (("payments", with_t), ("plain", without)):
                t0 = time.perf_counter()
                conn.execute(
                    psycopg.sql.SQL("UPDATE {} SET status = %s WHERE id = %s").format(
                        psycopg.sql.Identifier(table)
                    ),
                    (f"w{i}", i % ROWS + 1),
                )
                if i >= 0:
                    out.append(time.perf_counter() - t0)
    return pct(with_t, 50), pct(without, 50)


def killable(argv: list[str], pid_file: Path) -> list[str]:
    """``argv`` run so that ``pid_file`` names the server process itself (``exec`` keeps the PID)."""
    return ["sh", "-c", f'echo $$ > "{pid_file}"; exec "$@"', "sh", *argv]


def kill_server(pid_file: Path) -> None:
    os.kill(int(pid_file.read_text()), signal.SIGKILL)


def insert_rows(dsn: str, table: str, rows: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        insert = psycopg.sql.SQL("INSERT INTO {} (id, v) VALUES (%s, %s)").format(
            psycopg.sql.Identifier(table)
        )
        for i in range(1, rows + 1):
            conn.execute(insert, (i, i))


def tally_lines(text: str, added: dict[str, list[int]], name: str, other: dict[str, list[str]]) -> None:
    for line in text.splitlines():
        kind, _, key = line.partition(" ")
        if kind == "ADDED" and key.isdigit():
            added[name].append(int(key))
        else:
            other[name].append(line)


async def while_down(argv: list[str], pid_file: Path, dsn: str, rows: int) -> dict[str, Any]:
    """Bench 6: rows committed while the server is down, and what each watch delivers after."""
    added: dict[str, list[int]] = {"durable": [], "filtered": []}
    other: dict[str, list[str]] = {"durable": [], "filtered": []}
    limits = attrs.evolve(UNCAPPED_D, resubscribe_initial=DOWN_FOR, resubscribe_max=max(DOWN_FOR, 16.0))
    async with (
        McpResourceSource.stdio(argv, name="pg", cwd=ROOT) as source,
        WatchManager([source], limits=limits) as m,
        anyio.create_task_group() as tg,
    ):
        await m.watch_start("durable", "pg-events://public/down")
        await m.watch_start("filtered", "pg-events://public/down?k=1")
        done = anyio.Event()

        killed = time.monotonic()
        complete: dict[str, float] = {}

        async def tally() -> None:
            async for notice in m.notices:
                tally_lines(notice.text, added, notice.meta["name"], other)
                # Every watch counted to the end: stopping at the first complete one counted the
                # other mid-catch-up as lost (the filtered view reads a page behind the durable one).
                if all_complete(added, rows, complete, time.monotonic() - killed):
                    done.set()

        tg.start_soon(tally)
        kill_server(pid_file)
        await anyio.to_thread.run_sync(insert_rows, dsn, "down", rows)
        written = time.monotonic() - killed
        with anyio.move_on_after(DOWN_FOR + 60):
            await done.wait()
        back = time.monotonic() - killed
        tg.cancel_scope.cancel()
    order = commit_order(dsn, "down")
    return {
        "rows": rows,
        "written_in": written,
        "delivered_after": back,
        "complete": complete,
        "added": added,
        "other": other,
        "order": order,
    }


async def restart_under_load(argv: list[str], pid_file: Path, dsn: str, seconds: float) -> dict[str, Any]:
    """Bench 7: the sustained load into ``restart``, the server killed halfway."""
    total = round(RATE * seconds)
    added: dict[str, list[int]] = {"durable": [], "filtered": []}
    other: dict[str, list[str]] = {"durable": [], "filtered": []}
    limits = attrs.evolve(UNCAPPED_D, resubscribe_initial=0.2)
    done = anyio.Event()
    async with (
        McpResourceSource.stdio(argv, name="pg", cwd=ROOT) as source,
        WatchManager([source], limits=limits) as m,
        AsyncExitStack() as stack,
    ):
        loaders = [await stack.enter_async_context(writer(dsn)) for _ in range(LOADERS)]
        tg = await stack.enter_async_context(anyio.create_task_group())
        await m.watch_start("durable", "pg-events://public/restart")
        await m.watch_start("filtered", "pg-events://public/restart?k=1")

        begin = time.monotonic() + 0.5
        complete: dict[str, float] = {}

        async def tally() -> None:
            async for notice in m.notices:
                tally_lines(notice.text, added, notice.meta["name"], other)
                if all_complete(added, total, complete, time.monotonic() - begin):
                    done.set()

        tg.start_soon(tally)

        async def run_loader(part: int) -> None:
            await loaders[part].load(RATE, seconds, part, LOADERS, begin, "restart")

        async def kill() -> None:
            await anyio.sleep(max(0.0, begin + seconds / 2 - time.monotonic()))  # halfway through the load
            kill_server(pid_file)

        async with anyio.create_task_group() as load_tg:
            for part in range(LOADERS):
                load_tg.start_soon(run_loader, part)
            load_tg.start_soon(kill)
        with anyio.move_on_after(60):
            await done.wait()
        tg.cancel_scope.cancel()
    return {
        "total": total,
        "added": added,
        "other": other,
        "complete": complete,
        "order": commit_order(dsn, "restart"),
    }


def all_complete(added: dict[str, list[int]], total: int, complete: dict[str, float], now: float) -> bool:
    """Whether every watch in ``added`` has delivered ids 1..``total``; notes in ``complete`` when
    each got there (``now``, s)."""
    for name, ids in added.items():
        if name not in complete and len(set(ids) & set(range(1, total + 1))) >= total:
            complete[name] = now
    return len(complete) == len(added)


def _when(complete: dict[str, float], since: str) -> str:
    """When each watch had every row, or that it never did within the wait."""
    return "; ".join(
        f"{name} complete {complete[name]:.2f} s after {since}"
        if name in complete
        else f"{name} NEVER complete"
        for name in ("durable", "filtered")
    )


def commit_order(dsn: str, table: str) -> list[int]:
    """The ids of ``table``'s rows in the order of its change log's seqs (the commit order)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT (c.new ->> 'id')::int FROM asyncai_watch.xacts x JOIN asyncai_watch.changes c"
            " ON c.relid = x.relid AND c.xid = x.xid WHERE x.relid = %s::regclass ORDER BY x.last_seq, c.id",
            (table,),
        ).fetchall()
    return [int(r[0]) for r in rows]


def outcome(total: int, added: list[int], order: list[int] | None = None) -> tuple[int, int, int, bool]:
    """(delivered, lost, duplicated, in commit order) of ids 1..total."""
    distinct = set(added)
    lost = total - len(distinct & set(range(1, total + 1)))
    return len(distinct), lost, len(added) - len(distinct), order is None or added == order


def source_cost(dsn: str, rows: int) -> dict[str, list[float]]:
    """Bench 8 (writers): each variant's single-row INSERT + commit times, s."""
    out: dict[str, list[float]] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE PUBLICATION bench_pub FOR TABLE cost_logical")
        conn.execute("SELECT pg_create_logical_replication_slot('bench_slot', 'pgoutput')")
        for _ in range(2):  # the variants interleaved, twice: the machine's mood is shared
            for table in ("cost_plain", "cost_notify", "cost_capture", "cost_logical"):
                insert = psycopg.sql.SQL("INSERT INTO {} (id, v, note) VALUES (%s, %s, 'a note')").format(
                    psycopg.sql.Identifier(table)
                )
                start = len(out.get(table, ()))
                for i in range(start + 1, start + rows // 2 + 1):
                    t0 = time.perf_counter()
                    conn.execute(insert, (i, i))
                    out.setdefault(table, []).append(time.perf_counter() - t0)
    return out


def reader_cost(dsn: str, rows: int) -> tuple[float, float]:
    """Bench 8 (readers): seconds to read ``rows`` changes back, the capture's ``read_log`` (the
    server's page size) and the slot's ``pg_logical_slot_get_binary_changes``."""
    from asyncai_servers.postgres.capture import read_log
    from asyncai_servers.postgres.sources import LOG_PAGE

    with psycopg.connect(dsn, autocommit=True) as conn:
        relid = int((conn.execute("SELECT 'cost_capture'::regclass::oid::int8").fetchone() or (0,))[0])
        head = conn.execute(*read_log(relid, None, 1)).fetchone()
        assert head is not None
        position, last = (str(head[0]), 0), int(head[2])
        t0 = time.perf_counter()
        read = 0
        while position[1] < last:
            got = conn.execute(*read_log(relid, position, LOG_PAGE)).fetchall()[1:]
            read += len(got)
            position = (position[0], int(got[-1][5]))
        capture = time.perf_counter() - t0
        assert read == rows, (read, rows)
        t0 = time.perf_counter()
        conn.execute(
            "SELECT count(*) FROM pg_logical_slot_get_binary_changes('bench_slot', NULL, NULL,"
            " 'proto_version', '1', 'publication_names', 'bench_pub')"
        )
        logical = time.perf_counter() - t0
        conn.execute("SELECT pg_drop_replication_slot('bench_slot')")
    return capture, logical


async def main(quick: bool) -> int:
    changes = 200 if quick else 1000
    phases = 5 if quick else 20
    idle = 3.0 if quick else 10.0
    seconds = 4.0 if quick else 10.0
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"postgres bench ({'quick' if quick else 'full'}): {changes} changes; writers in their own processes; "
        f"server over stdio as a read-only role; load average {load}",
        flush=True,
    )
    if pg.find_pg_bindir() is None:
        print("  skipped: PostgreSQL server binaries (initdb, pg_ctl) not installed")
        return 0
    base = Path(tempfile.mkdtemp(prefix="postgres-bench-"))
    srv = start_cluster(base)
    try:
        admin = set_up(srv)
        config = base / "pg.toml"
        config.write_text(CONFIG)
        argv = [
            sys.executable,
            "-m",
            "asyncai_servers.postgres",
            "--config",
            str(config),
            "--dsn",
            as_role(admin, "watcher"),
        ]
        async with AsyncExitStack() as stack:
            source = await stack.enter_async_context(McpResourceSource.stdio(argv, name="pg", cwd=ROOT))
            w = await stack.enter_async_context(writer(admin))
            state_lat = await watch_latency(source, "pg://public/payments", w, changes, "s")
            events_lat = await watch_latency(source, "pg-events://public/payments", w, changes, "e")
            async with anyio.create_task_group() as tg:
                poller = Poller(as_role(admin, "poller"), time.monotonic() + 0.05, PERIOD)
                tg.start_soon(poller.run)
                plat = await poll_latency(poller, lambda k: w.update(k % ROWS + 1, f"poll{k}"), phases)
                # Idle: both watches open, the poller polling, nothing changing.
                async with WatchManager([source], limits=IMMEDIATE) as m:
                    await m.watch_start("state", "pg://public/payments")
                    await m.watch_start("events", "pg-events://public/payments")
                    server_before, poller_before = statements(admin, "watcher"), statements(admin, "poller")
                    await anyio.sleep(
                        idle
                    )  # the bench measures what happens over time: an idle window on purpose
                    server_idle = statements(admin, "watcher") - server_before
                    poller_idle = statements(admin, "poller") - poller_before
                tg.cancel_scope.cancel()

            s = await sustained(source, admin, admin, seconds)
            alone, beside, acked = await crowded(argv, w, changes // 2)
        cost_with, cost_without = await anyio.to_thread.run_sync(writer_cost, admin, changes)
        pid_file = base / "server.pid"
        down = await while_down(killable(argv, pid_file), pid_file, admin, 500 if quick else 2000)
        rs = await restart_under_load(killable(argv, pid_file), pid_file, admin, seconds)
        cost_rows = 400 if quick else COST_ROWS * 2
        costs = source_cost(admin, cost_rows)
        read_capture, read_logical = reader_cost(admin, cost_rows)
    finally:
        srv.stop()
        shutil.rmtree(base, ignore_errors=True)

    b50 = pct(plat, 50) * 1e3
    print("1. commit -> notice on WatchManager.notices (debounce 0), one row of 1,000 updated per change;")
    print(
        f"   baseline: a client polling every {PERIOD:g} s, {phases} changes at phases (k + 0.5)/{phases} of its period:"
    )
    ok = True
    for label, seen in (
        ("state watch p50 (whole table read)", state_lat),
        ("event-log watch p50", events_lat),
    ):
        lat = [c.arrived - c.t0 for c in seen]
        p50 = pct(lat, 50) * 1e3
        met = p50 <= P50_TARGET_MS
        ok = ok and met
        row(label, p50, b50, "ms", f"target <= {P50_TARGET_MS:g} ms: {'met' if met else 'MISSED'}")
        print(
            f"  {'':<38} (p99 {pct(lat, 99) * 1e3:.2f} ms, mean {statistics.fmean(lat) * 1e3:.2f} ms;"
            f" baseline p99 {pct(plat, 99) * 1e3:.0f} ms); where the time goes, p50 / p99 (ms):"
        )
        for step, values in (
            ("statement + commit -> update signal", [c.signal - c.t0 for c in seen]),
            ("update signal -> the watcher's read", [c.read_start - c.signal for c in seen]),
            ("the watcher's read (stdio round trip)", [c.read_end - c.read_start for c in seen]),
            ("read answered -> notice on the channel", [c.arrived - c.read_end for c in seen]),
        ):
            print(f"    {step:<42} {pct(values, 50) * 1e3:8.2f} / {pct(values, 99) * 1e3:.2f}")
    print(f"  (the writer's UPDATE + commit round trip: p50 {pct(w.calls, 50) * 1e3:.2f} ms)")

    per_min_server, per_min_poll = server_idle * 60 / idle, poller_idle * 60 / idle
    idle_ok = server_idle == 0
    ok = ok and idle_ok
    print(
        f"2. statements while idle (pg_stat_statements, {idle:g} s window with both watches open, scaled to 1 min):"
    )
    print(
        f"  {'server (role watcher) vs poller':<38} {per_min_server:10.1f} /min   baseline {per_min_poll:10.1f} /min"
        f"   {'':>9}   target 0: {'met' if idle_ok else 'MISSED'}"
    )

    lost = s["total"] - s["delivered"]
    kept_up = lost == 0 and not s["other_lines"] and s["delivered_rate"] >= s["offered_rate"] * 0.95
    offered_enough = s["offered_rate"] >= RATE * 0.95
    load_ok = kept_up and offered_enough
    ok = ok and load_ok
    if load_ok:
        verdict = "met"
    elif kept_up:
        verdict = (
            f"not reached: the writers offered only {s['offered_rate']:,.0f}/s on this machine; "
            "the server delivered all of it"
        )
    else:
        verdict = "MISSED"
    print(
        f"3. sustained load: {s['total']:,} inserts, each its own transaction, offered at {s['offered_rate']:,.0f}/s"
        " (target 1,000/s with none lost):"
    )
    row(
        "rows delivered / s",
        s["delivered_rate"],
        s["offered_rate"],
        "/s",
        f"{s['delivered']:,} of {s['total']:,} delivered, {lost:,} lost: {verdict}",
        lower_is_better=False,
    )
    if s["other_lines"]:
        print(f"  other lines (GAP, ERROR): {s['other_lines'][:5]}")
    if s["lags"] and s["poll_lags"]:
        row(
            "row lag p50 (statement -> notice)", pct(s["lags"], 50) * 1e3, pct(s["poll_lags"], 50) * 1e3, "ms"
        )
        row("row lag p99", pct(s["lags"], 99) * 1e3, pct(s["poll_lags"], 99) * 1e3, "ms")
    print(
        f"  server statements per committed row: {s['queries'] / s['total']:.3f}"
        f" ({s['queries']:,} for {s['total']:,} rows: re-reads batch what piles up while one runs);"
        f" server CPU per row: {s['cpu'] / s['total'] * 1e6:.0f} µs"
    )
    a50 = pct([c.arrived - c.t0 for c in alone], 50) * 1e3
    c50 = pct([c.arrived - c.t0 for c in beside], 50) * 1e3
    crowd_ok = c50 <= a50 * 1.5
    ok = ok and crowd_ok
    print(
        f"4. a client's single event-log watch of payments beside another client of the same server whose one"
        f" listen names {FILTERED:,} filtered URIs of payments (listen -> ack: {acked:.1f} s):"
    )
    row(
        "single watch p50, beside the crowd",
        c50,
        a50,
        "ms",
        f"baseline: the same watch alone; target <= 1.5x: {'met' if crowd_ok else 'MISSED'}",
    )
    print("5. what the triggers cost a writer (reported, not a target): single-row UPDATE, own transaction:")
    row(
        "UPDATE + commit p50, with the triggers",
        cost_with * 1e3,
        cost_without * 1e3,
        "ms",
        "baseline: no triggers",
    )

    print(
        f"6. changes committed while the server is down: SIGKILL, {down['rows']:,} rows committed one per transaction"
        f" in {down['written_in']:.1f} s, the server started again {DOWN_FOR:g} s after the kill:"
    )
    d_delivered, d_lost, d_dup, d_order = outcome(down["rows"], down["added"]["durable"], down["order"])
    r_delivered, r_lost, r_dup, r_order = outcome(down["rows"], down["added"]["filtered"], down["order"])
    down_ok = d_lost == 0 and d_dup == 0 and d_order and not down["other"]["durable"]
    # The view is durable too: its loss is a miss like the log's.
    down_ok = down_ok and r_lost == 0 and r_dup == 0 and r_order
    ok = ok and down_ok
    row(
        "rows delivered after it is back",
        d_delivered,
        r_delivered or None,
        "rows",
        f"{d_lost} lost, {d_dup} duplicated, {'in' if d_order else 'NOT in'} commit order: "
        f"{'met' if down_ok else 'MISSED'}",
        lower_is_better=False,
    )
    print(
        f"  {'':<38} the filtered view ?k=1 (durable now; was an in-memory ring): {r_delivered:,} delivered, {r_lost:,} lost,"
        f" {r_dup} duplicated, {'in' if r_order else 'NOT in'} commit order;"
        f" its other lines: {down['other']['filtered'][:2]}"
    )
    print(
        f"  {'':<38} all delivered {down['delivered_after']:.1f} s after the kill"
        f" ({_when(down['complete'], 'the kill')})"
    )
    print(f"7. a restart under {RATE:,.0f} changes/s: {rs['total']:,} inserts, the server killed halfway:")
    l_delivered, l_lost, l_dup, l_order = outcome(rs["total"], rs["added"]["durable"], rs["order"])
    b_delivered, b_lost, b_dup, b_order = outcome(rs["total"], rs["added"]["filtered"], rs["order"])
    gaps = [x for x in rs["other"]["durable"] if x.startswith("GAP")]
    restart_ok = l_lost == 0 and l_dup == 0 and not gaps and l_order
    ok = ok and restart_ok
    row(
        "rows delivered",
        l_delivered,
        b_delivered or None,
        "rows",
        f"{l_lost} lost, {l_dup} duplicated, {len(gaps)} GAP, {'in' if l_order else 'NOT in'} commit order:"
        f" {'met' if restart_ok else 'MISSED'}",
        lower_is_better=False,
    )
    filtered_gaps = [x for x in rs["other"]["filtered"] if x.startswith("GAP")]
    ok = ok and b_lost == 0 and b_dup == 0 and not filtered_gaps and b_order
    print(
        f"  {'':<38} the filtered view ?k=1 (durable now; was an in-memory ring): {b_delivered:,} delivered, {b_lost:,} lost,"
        f" {b_dup} duplicated, {len(filtered_gaps)} GAP, {'in' if b_order else 'NOT in'} commit order"
    )
    print(f"  {'':<38} {_when(rs['complete'], 'the load began')}")
    others = [x for x in rs["other"]["durable"] if not x.startswith("GAP")]
    if others:
        # A read in flight when the server died fails (the client says so once), then reads go on.
        print(f"  {'':<38} other lines of the durable watch: {len(others)}, e.g. {others[0][:110]}...")
    print(f"8. the change source, side by side ({cost_rows:,} single-row INSERT + commit each, interleaved):")
    plain = pct(costs["cost_plain"], 50) * 1e6
    for label, table in (
        ("writer p50, NOTIFY triggers only", "cost_notify"),
        ("writer p50, NOTIFY + durable capture", "cost_capture"),
        ("writer p50, logical slot (pgoutput)", "cost_logical"),
    ):
        value = pct(costs[table], 50) * 1e6
        print(
            f"  {label:<38} {value:10.0f} µs   baseline {plain:10.0f} µs (no trigger, no slot)"
            f"   {value / plain:6.2f}x the baseline's cost   (reported, not gated)"
        )
    print(
        f"  {'reading them back, per change':<38} {read_capture / cost_rows * 1e6:10.1f} µs (read_log, pages of 100)"
        f"   logical decoding {read_logical / cost_rows * 1e6:.1f} µs (pg_logical_slot_get_binary_changes)"
    )
    print("all targets met" if ok else "some targets missed (see above)")
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a short run")
    sys.exit(anyio.run(main, parser.parse_args().quick))
