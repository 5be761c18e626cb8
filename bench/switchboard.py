"""Switchboard benchmark: doorbell fan-out latency, creates/s with separate client processes, a stalled session.

    python bench/switchboard.py           # a few minutes
    python bench/switchboard.py --quick   # well under a minute per part

The server is always a real subprocess on Streamable HTTP (loopback); every client is a separate
process on its own connection. Parts:

1. create -> doorbell latency (p50/p99) with 1, 10, 100 and 1,000 attached sessions (one credential
   and one ``subscriptions/listen`` stream each), held by lean listener processes
   (``_switchboard_listeners.py``, up to 4 processes) that timestamp each doorbell as its bytes
   arrive. The creator is this process (the MCP SDK client); creates are one at a time, each after
   the previous one's doorbells all arrived. ``time.perf_counter`` is CLOCK_MONOTONIC, so
   timestamps compare across processes. Targets: p50 <= 10 ms at 100 sessions, <= 50 ms at 1,000.
   Baselines in the same run: 1 session (the fan-out's own cost is the difference), and the
   ``todo_create`` round trip at each size (the creator's path must not grow with the sessions).
   The pull-only alternative (an agent checking every 5 s) is computed, uniform phase: 2.5 s p50.
2. creates/s over HTTP with 8 client processes (``_switchboard_creator.py``, the MCP SDK client), on
   SQLite and on PostgreSQL (fsync on; only if its binaries are installed), with the CPU each create
   costs in the server and in the clients (from /proc), and the storage floor measured in the same
   run: ``pg_test_fsync`` (one fdatasync'd 8 kB write) and ``pgbench`` running the same INSERT from
   8 clients. Target >= 1,500/s on PostgreSQL, or the measured floor.
3. A stalled subscriber over real HTTP: a listener process that opens its stream (with a 4 kB
   receive buffer) and never reads it. Two servers: one with the stalled session, one with a
   healthy one; creates alternate between them so machine noise hits both alike. Figures:
   ``todo_create`` p50 ratio (target <= 1.2), doorbells dropped, the server's RSS growth, and the
   stalled session's todos still listed by ``todo_pull``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from asyncai_watch.server.http import running_http_server

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MAX_SESSIONS = 1000
CONFIG = {
    "credentials": [
        {"name": "alice", "token": "alice-token", "queues": ["*"], "attribution": "human", "verified": True},
        # One credential per listening session: a credential gets each doorbell once, however many
        # streams it has open, so 1,000 sessions are 1,000 agents.
        *(
            {"name": f"agent{i}", "token": f"agent{i}-token", "queues": ["*"], "attribution": "agent"}
            for i in range(MAX_SESSIONS)
        ),
    ]
}
PULL_INTERVAL = 5.0
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int) -> int:
    match = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    return int(match.group(1)) if match else 0


@asynccontextmanager
async def server(config: Path, store: list[str], *extra: str) -> AsyncIterator[tuple[str, int]]:
    argv = [sys.executable, "-m", "asyncai_servers.switchboard", "--config", str(config), *store]
    # 1,000 attached sessions hold 1,000 connections and listens: above the defaults of the HTTP
    # policy (docs/http-security.md), which a deployment of this size raises the same way.
    argv += ["--http", "127.0.0.1:0", "--max-connections", "2000", "--max-listens", "2000", *extra]
    async with running_http_server(argv, env=ENV, ready_timeout=60) as (url, proc):
        yield url, proc.pid


@asynccontextmanager
async def client(url: str, token: str) -> AsyncIterator[Client]:
    async with (
        create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http,
        Client(streamable_http_client(url, http_client=http), cache=None) as c,
    ):
        yield c


class Helper:
    """A helper process speaking lines on stdin/stdout."""

    def __init__(self, proc: anyio.abc.Process) -> None:
        assert proc.stdout is not None
        assert proc.stdin is not None
        self.proc = proc
        self.lines = BufferedByteReceiveStream(proc.stdout)

    async def line(self) -> str:
        return (await self.lines.receive_until(b"\n", 1 << 26)).decode()

    async def say(self, text: str) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.send(text.encode() + b"\n")


@asynccontextmanager
async def helpers(argvs: list[list[str]]) -> AsyncIterator[list[Helper]]:
    async with AsyncExitStack() as stack:
        out = []
        for argv in argvs:
            proc = await stack.enter_async_context(
                await anyio.open_process(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=ENV)
            )
            out.append(Helper(proc))
        try:
            yield out
        finally:
            for h in out:
                if h.proc.returncode is None:
                    h.proc.kill()


def listener_argvs(url: str, sessions: int, stall: bool = False, first: int = 0) -> list[list[str]]:
    procs = 1 if sessions <= 10 else 4
    per = -(-sessions // procs)
    script = str(HERE / "_switchboard_listeners.py")
    argvs = []
    for start in range(first, first + sessions, per):
        count = min(per, first + sessions - start)
        argvs.append(
            [sys.executable, script, url, "agent", str(start), str(count), *(["--stall"] if stall else [])]
        )
    return argvs


async def create(c: Client, queue: str, summary: str, kind: str = "k") -> str:
    result = await c.call_tool("todo_create", {"queue": queue, "kind": kind, "summary": summary})
    if result.is_error or result.structured_content is None:
        raise RuntimeError(f"todo_create failed: {result.content}")
    return str(result.structured_content["todo"]["id"])


async def fanout(
    config: Path, tmp: Path, sessions: int, creates: int
) -> tuple[list[float], list[float], float]:
    """Doorbell latencies (every session, every create), the creator's todo_create round trips, and
    the server's CPU seconds per doorbell delivered (the fan-out's cost per session)."""
    async with (
        server(config, ["--sqlite", str(tmp / f"fan{sessions}.db")]) as (url, pid),
        helpers(listener_argvs(url, sessions)) as listeners,
        client(url, "alice-token") as alice,
    ):
        with anyio.fail_after(120):
            for h in listeners:
                if (await h.line()).strip() != "ready":
                    raise RuntimeError("listener did not get ready")
        sent: dict[str, float] = {}
        round_trips: list[float] = []
        cpu0 = 0.0
        for i in range(creates + 1):  # the first is a warm-up
            if i == 1:
                cpu0 = cpu_seconds(pid)
            t0 = time.perf_counter()
            todo_id = await create(alice, "bench", f"n{i}")
            round_trips.append(time.perf_counter() - t0)
            sent[todo_id] = t0
            with anyio.fail_after(60):
                for h in listeners:
                    if (await h.line()).strip() != f"all {todo_id}":
                        raise RuntimeError("listener out of step")
        cpu = cpu_seconds(pid) - cpu0
        received: dict[str, list[float]] = {}
        for h in listeners:
            await h.say("report")
            for todo_id, times in json.loads(await h.line()).items():
                received.setdefault(todo_id, []).extend(times)
    warm = next(iter(sent))
    samples = [t - t0 for todo_id, t0 in sent.items() if todo_id != warm for t in received[todo_id]]
    return samples, round_trips[1:], cpu / (creates * sessions)


async def create_rate(config: Path, store: list[str], total: int, workers: int) -> tuple[float, float, float]:
    """creates/s, server CPU ms per create, client CPU ms per create."""
    per = total // workers
    async with server(config, store) as (url, pid):
        script = str(HERE / "_switchboard_creator.py")
        argvs = [[sys.executable, script, url, "alice-token", str(w), str(per)] for w in range(workers)]
        async with helpers(argvs) as creators:
            with anyio.fail_after(120):
                for h in creators:
                    if (await h.line()).strip() != "ready":
                        raise RuntimeError("creator did not get ready")
            server0 = cpu_seconds(pid)
            clients0 = sum(cpu_seconds(h.proc.pid) for h in creators)
            t0 = time.perf_counter()
            for h in creators:
                await h.say("go")
            with anyio.fail_after(600):
                for h in creators:
                    float(await h.line())
            elapsed = time.perf_counter() - t0
            server_cpu = cpu_seconds(pid) - server0
            clients_cpu = sum(cpu_seconds(h.proc.pid) for h in creators) - clients0
    n = per * workers
    return n / elapsed, server_cpu / n * 1000, clients_cpu / n * 1000


def pg_tool(name: str, bindir: Path) -> Path | None:
    """A PostgreSQL client tool: next to the server's binaries, on PATH, or in Debian's versioned dirs."""
    for candidate in (
        bindir / name,
        shutil.which(name),
        *sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}")),
    ):
        if candidate and Path(candidate).exists():
            return Path(candidate)
    return None


def fsync_floor(srv: Any, dsn: str, tmp: Path) -> tuple[float | None, float | None]:
    """fdatasync'd 8 kB writes/s (pg_test_fsync) and the same INSERT's TPS from 8 pgbench clients."""
    fsync_rate = pgbench_tps = None
    test_fsync = pg_tool("pg_test_fsync", srv.bindir)
    if test_fsync is not None:
        out = subprocess.run(
            [str(test_fsync), "-s", "2", "-f", str(tmp / "fsync.test")],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        match = re.search(r"^\s+fdatasync\s+([\d.]+) ops/sec", out, re.MULTILINE)
        fsync_rate = float(match.group(1)) if match else None
    pgbench = pg_tool("pgbench", srv.bindir)
    if pgbench is not None:
        script = tmp / "insert.sql"
        script.write_text(
            "INSERT INTO todos (queue, kind, summary, payload, creator, creator_attribution, creator_verified,"
            " push, idempotency_key, created_at, updated_at) VALUES ('rate', 'k', 'x', 'null', 'alice', 'human',"
            " true, true, NULL, 0, 0) RETURNING *;\n"
        )
        dbname = dsn.rsplit("dbname=", 1)[1]
        out = subprocess.run(
            [
                *(str(pgbench), "-n", "-f", str(script), "-c", "8", "-j", "2", "-T", "5"),
                *("-h", "127.0.0.1", "-p", str(srv.port), "-U", "postgres", dbname),
            ],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        match = re.search(r"tps = ([\d.]+)", out)
        pgbench_tps = float(match.group(1)) if match else None
    return fsync_rate, pgbench_tps


async def stalled(config: Path, tmp: Path, creates: int) -> dict[str, Any]:
    summary, kind = "s" * 200, "k" * 60  # full-size doorbells, so the stalled stream's buffers fill sooner
    async with (
        server(config, ["--sqlite", str(tmp / "healthy.db")]) as (healthy_url, _),
        server(config, ["--sqlite", str(tmp / "stalled.db")]) as (stalled_url, stalled_pid),
        helpers(listener_argvs(healthy_url, 1) + listener_argvs(stalled_url, 1, stall=True)) as listeners,
        client(healthy_url, "alice-token") as to_healthy,
        client(stalled_url, "alice-token") as to_stalled,
        client(stalled_url, "agent0-token") as stalled_agent,
    ):
        with anyio.fail_after(60):
            for h in listeners:
                if (await h.line()).strip() != "ready":
                    raise RuntimeError("listener did not get ready")
        await create(to_stalled, "q", summary, kind)  # warm-up both
        await create(to_healthy, "q", summary, kind)
        await listeners[0].line()
        rss0 = rss_kib(stalled_pid)
        lat_healthy: list[float] = []
        lat_stalled: list[float] = []
        for _ in range(creates):
            for c, lat in ((to_healthy, lat_healthy), (to_stalled, lat_stalled)):
                t0 = time.perf_counter()
                await create(c, "q", summary, kind)
                lat.append(time.perf_counter() - t0)
            with anyio.fail_after(60):
                await listeners[0].line()  # the healthy session read its doorbell
        rss1 = rss_kib(stalled_pid)
        stats = (await stalled_agent.call_tool("switchboard_stats", {})).structured_content or {}
        pulled, after = 0, None
        while True:
            args: dict[str, Any] = {"queue": "q", "limit": 200, **({"after": after} if after else {})}
            page = (await stalled_agent.call_tool("todo_pull", args)).structured_content or {}
            pulled += len(page.get("todos", []))
            if not (after := page.get("next_after")):
                break
    return {
        "stalled_p50": statistics.median(lat_stalled),
        "healthy_p50": statistics.median(lat_healthy),
        "dropped": stats.get("dropped"),
        "rss_growth_kib": rss1 - rss0,
        "pulled": pulled,
        "created": creates + 1,
    }


async def main(quick: bool) -> None:
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="switchboard-bench-") as d:
        tmp = Path(d)
        config = tmp / "credentials.json"
        config.write_text(json.dumps(CONFIG))

        print(
            "1. create -> doorbell, Streamable HTTP loopback, lean listener processes, creator in another process"
        )
        base_p50: float | None = None
        plan = (
            ((1, 20), (10, 10), (100, 10), (1000, 3)) if quick else ((1, 60), (10, 40), (100, 30), (1000, 10))
        )
        targets = {100: 0.010, 1000: 0.050}
        for sessions, creates in plan:
            samples, trips, cpu = await fanout(config, tmp, sessions, creates)
            p50 = statistics.median(samples)
            base_p50 = base_p50 or p50
            target = targets.get(sessions)
            verdict = (
                "" if target is None else f"  target <= {ms(target)}: {'met' if p50 <= target else 'MISSED'}"
            )
            print(
                f"  {sessions:>5} sessions: p50 {ms(p50):>9}  p99 {ms(pct(samples, 99)):>9}"
                f"  ({len(samples)} doorbells; vs 1 session x{p50 / base_p50:.2f})"
                f"  todo_create round trip p50 {ms(statistics.median(trips))}"
                f"  server CPU per doorbell {cpu * 1e6:.0f} us{verdict}"
            )
        print(
            f"  pull-only alternative (every {PULL_INTERVAL:.0f} s, computed): p50 {PULL_INTERVAL / 2:.1f} s,"
            f" {3600 / PULL_INTERVAL:.0f} idle requests per hour per agent; doorbell: 0 (one open listen)"
        )

        print("2. creates per second over HTTP, 8 client processes (MCP SDK client)")
        total = 400 if quick else 1600
        rate, server_ms, clients_ms = await create_rate(config, ["--sqlite", str(tmp / "rate.db")], total, 8)
        print(
            f"  {'SQLite (WAL, synchronous=FULL)':<32} {rate:8.0f} /s   CPU per create: server {server_ms:.2f} ms,"
            f" clients {clients_ms:.2f} ms"
        )
        sys.path.insert(0, str(ROOT))
        try:
            import pg  # type: ignore[import-not-found]  # the tests' throwaway PostgreSQL

            if pg.find_pg_bindir() is None:
                print("  PostgreSQL                       skipped: initdb/pg_ctl not installed")
            else:
                pgdir = Path(tempfile.mkdtemp(prefix="switchboard-bench-pg-"))
                srv = pg.start_postgres(pgdir, fsync=True)
                try:
                    dsn = srv.create_database()
                    rate, server_ms, clients_ms = await create_rate(config, ["--postgres", dsn], total, 8)
                    fsync_rate, pgbench_tps = fsync_floor(srv, dsn, tmp)
                finally:
                    srv.stop()
                    shutil.rmtree(pgdir, ignore_errors=True)
                met = "met" if rate >= 1500 else "MISSED"
                print(
                    f"  {'PostgreSQL (fsync on)':<32} {rate:8.0f} /s   CPU per create: server {server_ms:.2f} ms,"
                    f" clients {clients_ms:.2f} ms   target >= 1,500/s: {met}"
                )
                print(
                    f"  storage floor, same run: fdatasync 8 kB {fsync_rate or float('nan'):.0f} /s (pg_test_fsync);"
                    f" the same INSERT from 8 pgbench clients {pgbench_tps or float('nan'):.0f} /s"
                )
                cores = os.cpu_count() or 1
                print(
                    f"  CPU ceiling on this machine ({cores} cores shared by server and clients):"
                    f" {cores * 1000 / (server_ms + clients_ms):.0f} creates/s;"
                    f" the server alone (one process, one core): {1000 / server_ms:.0f} /s"
                )
        finally:
            sys.path.pop(0)

        print("3. todo_create p50 with a stalled subscriber (stops reading its HTTP stream) vs a healthy one")
        r = await stalled(config, tmp, 600 if quick else 1500)
        ratio = r["stalled_p50"] / r["healthy_p50"]
        print(
            f"  stalled {ms(r['stalled_p50'])} vs healthy {ms(r['healthy_p50'])}: ratio {ratio:.3f}"
            f" (target <= 1.2: {'met' if ratio <= 1.2 else 'MISSED'}); {r['dropped']} doorbells dropped;"
            f" server RSS growth {r['rss_growth_kib']} KiB; todo_pull lists {r['pulled']} of {r['created']} todos"
        )
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="short run")
    anyio.run(main, parser.parse_args().quick)
