"""Switchboard benchmark: doorbell latency vs a 5 s pull loop, create throughput, stalled-session cost.

    python bench/switchboard.py           # about a minute
    python bench/switchboard.py --quick   # a few seconds per part

Parts:
1. create -> doorbell latency (p50/p99) over Streamable HTTP on loopback with 1, 10 and 100 attached
   sessions (one MCP client and credential each, in this process), against the pull-only baseline: an agent that
   checks the queue every 5 s (latency uniform in [0, 5) s; 720 idle requests per hour per agent).
2. creates per second over HTTP, SQLite and PostgreSQL (PostgreSQL only if its binaries are installed).
3. todo_create latency with one stalled subscriber vs none (target ratio <= 1.2), in process, so the
   stalled session really stops reading: its 64-doorbell buffer fills and the rest are dropped.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from asyncai_agent.channels import ChannelExtension
from asyncai_servers._http import running_http_server
from asyncai_servers.switchboard.config import parse_credentials
from asyncai_servers.switchboard.core import Switchboard
from asyncai_servers.switchboard.ledger_sqlite import SqliteLedger
from asyncai_watch.core.notice import Notice

ROOT = Path(__file__).resolve().parent.parent
CONFIG = {
    "credentials": [
        {"name": "alice", "token": "alice-token", "queues": ["*"], "attribution": "human", "verified": True},
        {"name": "agent", "token": "agent-token", "queues": ["*"], "attribution": "agent"},
        # One credential per listening session: a credential gets each doorbell once, however many
        # streams it has open, so 100 sessions are 100 agents.
        *(
            {"name": f"agent{i}", "token": f"agent{i}-token", "queues": ["*"], "attribution": "agent"}
            for i in range(100)
        ),
    ]
}
PULL_INTERVAL = 5.0


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def row(label: str, value: float, baseline: float, unit: str) -> None:
    ratio = value / baseline if baseline else float("inf")
    print(f"  {label:<44} {value:10.4g} {unit:<6} baseline {baseline:10.4g} {unit:<6} ratio {ratio:8.4g}")


@asynccontextmanager
async def server(config: Path, store: list[str]) -> AsyncIterator[str]:
    argv = [
        sys.executable,
        "-m",
        "asyncai_servers.switchboard",
        "--config",
        str(config),
        *store,
        "--http",
        "127.0.0.1:0",
    ]
    async with running_http_server(argv, ready_timeout=60) as (url, _proc):
        yield url


@asynccontextmanager
async def client(
    stack: AsyncExitStack, url: str, token: str, extensions: list[Any] | None = None
) -> AsyncIterator[Client]:
    async with AsyncExitStack() as inner:
        http = await inner.enter_async_context(
            create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        )
        c = await inner.enter_async_context(
            Client(streamable_http_client(url, http_client=http), extensions=extensions, cache=None)
        )
        yield c


async def doorbell_latency(config: Path, tmp: Path, sessions: int, creates: int) -> list[float]:
    received: dict[str, list[float]] = {}
    warm, all_in = anyio.Event(), anyio.Event()
    expected = {"n": sessions}

    def on_notice(notice: Notice) -> None:
        received.setdefault(notice.meta["todo_id"], []).append(time.perf_counter())
        if sum(len(v) for v in received.values()) >= expected["n"]:
            (all_in if warm.is_set() else warm).set()

    samples: list[float] = []
    async with server(config, ["--sqlite", str(tmp / f"lat{sessions}.db")]) as url, AsyncExitStack() as stack:
        listeners: list[Client] = []
        for i in range(sessions):
            c = await stack.enter_async_context(
                client(stack, url, f"agent{i}-token", [ChannelExtension("switchboard", on_notice)])
            )
            await stack.enter_async_context(c.listen(tools_list_changed=True))
            listeners.append(c)
        alice = await stack.enter_async_context(client(stack, url, "alice-token"))
        await alice.call_tool("todo_create", {"queue": "warm", "kind": "k", "summary": "warm-up"})
        with anyio.fail_after(60):
            await warm.wait()  # every session got the warm-up doorbell
        received.clear()
        expected["n"] = sessions * creates
        sent: dict[str, float] = {}
        for i in range(creates):
            t0 = time.perf_counter()
            res = await alice.call_tool("todo_create", {"queue": "bench", "kind": "k", "summary": f"n{i}"})
            sent[res.structured_content["todo"]["id"]] = t0
        with anyio.fail_after(60):
            await all_in.wait()
        for todo_id, t0 in sent.items():
            samples += [t - t0 for t in received.get(todo_id, [])]
    return samples


async def create_rate(config: Path, store: list[str], total: int, concurrency: int) -> float:
    async with server(config, store) as url, AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(client(stack, url, "alice-token")) for _ in range(concurrency)
        ]
        await clients[0].call_tool("todo_create", {"queue": "warm", "kind": "k", "summary": "warm-up"})
        per = total // concurrency
        t0 = time.perf_counter()

        async def worker(c: Client, w: int) -> None:
            for i in range(per):
                await c.call_tool(
                    "todo_create",
                    {"queue": "rate", "kind": "k", "summary": "x", "idempotency_key": f"{w}-{i}"},
                )

        async with anyio.create_task_group() as tg:
            for w, c in enumerate(clients):
                tg.start_soon(worker, c, w)
        return per * concurrency / (time.perf_counter() - t0)


async def stalled_cost(tmp: Path, creates: int) -> tuple[float, float, int]:
    creds = parse_credentials(CONFIG)
    alice, agent = creds.by_name("alice"), creds.by_name("agent")
    assert alice is not None
    assert agent is not None

    # Both boards live at once and creates alternate between them, so machine noise hits both alike.
    async with (
        Switchboard(SqliteLedger(tmp / "none.db"), creds) as plain,
        Switchboard(SqliteLedger(tmp / "stalled.db"), creds) as stalled_board,
    ):
        with stalled_board.hub.subscribe(agent) as stalled_sub:  # attached, never read
            lat_plain: list[float] = []
            lat_stalled: list[float] = []
            for i in range(creates):
                for board, lat in ((plain, lat_plain), (stalled_board, lat_stalled)):
                    t0 = time.perf_counter()
                    await board.create(alice, queue="q", kind="k", summary=f"n{i}")
                    lat.append(time.perf_counter() - t0)
            return statistics.median(lat_stalled), statistics.median(lat_plain), stalled_sub.dropped


async def main(quick: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="switchboard-bench-") as d:
        tmp = Path(d)
        config = tmp / "credentials.json"
        config.write_text(json.dumps(CONFIG))
        baseline_p50, baseline_p99 = PULL_INTERVAL * 0.5, PULL_INTERVAL * 0.99
        print("1. create -> doorbell latency, Streamable HTTP loopback (baseline: pull every 5 s)")
        for sessions, creates in (
            (1, 20 if quick else 40),
            (10, 10 if quick else 20),
            (100, 5 if quick else 10),
        ):
            samples = await doorbell_latency(config, tmp, sessions, creates)
            row(f"{sessions:>3} sessions p50 ({len(samples)} doorbells)", pct(samples, 50), baseline_p50, "s")
            row(f"{sessions:>3} sessions p99", pct(samples, 99), baseline_p99, "s")
        print(
            f"  idle requests per hour per agent: doorbell 0 (one open listen), pull-every-5s {3600 / PULL_INTERVAL:.0f}"
        )

        print("2. creates per second over HTTP (8 concurrent clients)")
        total = 80 if quick else 240
        sqlite_rate = await create_rate(config, ["--sqlite", str(tmp / "rate.db")], total, 8)
        pg_rate: float | None = None
        sys.path.insert(0, str(ROOT / "tests"))
        try:
            import pg  # type: ignore[import-not-found]  # the tests' throwaway PostgreSQL

            if pg.find_pg_bindir() is not None:
                pgdir = Path(tempfile.mkdtemp(prefix="switchboard-bench-pg-"))
                srv = pg.start_postgres(pgdir, fsync=True)
                try:
                    pg_rate = await create_rate(config, ["--postgres", srv.create_database()], total, 8)
                finally:
                    srv.stop()
                    import shutil

                    shutil.rmtree(pgdir, ignore_errors=True)
        finally:
            sys.path.pop(0)
        print(f"  {'SQLite (WAL, synchronous=FULL)':<44} {sqlite_rate:10.4g} /s")
        if pg_rate is None:
            print("  PostgreSQL                                   skipped: initdb/pg_ctl not installed")
        else:
            print(
                f"  {'PostgreSQL (fsync on)':<44} {pg_rate:10.4g} /s   SQLite/PostgreSQL ratio {sqlite_rate / pg_rate:.3g}"
            )

        print("3. todo_create latency p50 with one stalled subscriber vs none (target ratio <= 1.2)")
        stalled, base, dropped = await stalled_cost(tmp, 100 if quick else 300)
        row(f"stalled subscriber (dropped {dropped} doorbells)", stalled, base, "s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="short run")
    anyio.run(main, parser.parse_args().quick)
