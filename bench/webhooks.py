"""Webhooks server benchmark, as a user of the library sees it: every figure goes through ``WatchManager``.

    python bench/webhooks.py           # 200 deliveries one at a time; 10 poll phases; 5 s at 1,000/s
    python bench/webhooks.py --quick   # 50; 4 phases; 2 s

The server (``python -m asyncai_servers.webhooks``) runs over stdio behind a ``WatchManager``
(debounce 0), its SQLite file in a temporary directory (``synchronous=FULL``: each delivery is
on disk before its 2xx, so the figures include the fsync). Deliveries are GitHub
``workflow_run`` payloads signed as GitHub signs them, POSTed over loopback.

1. delivery -> notice: one delivery at a time, the next once the notice of the last has come.
   Latency = the notice's arrival on ``WatchManager.notices`` minus the sender's clock just before
   the POST. Target: p50 <= 10 ms. Baseline, same run: a client polling a mock REST API (the
   shape of GitHub's ``GET /repos/{owner}/{repo}/actions/runs``, served on loopback) every 1 s,
   a new run added at evenly spread phases (k + 0.5) / M of its period.
2. sustained: 1,000 deliveries per second for a bounded time, every tenth also sent again (the
   sender's retry: it must not become a second event), by 16 concurrent senders. Figures: the
   delivery rate reached, events delivered of deliveries accepted (none may be lost, duplicated
   or reported in a GAP), the lag of the last notice after the last delivery, and the server
   process's CPU per delivery (user + system, from /proc): what the rate costs whatever else the
   machine runs (on a busy shared machine the rate reached says more about the machine).

``--sync normal`` runs the server without the fsync per commit (``--sync`` of the server).
``--database DSN`` (or ``$ASYNCAI_WEBHOOKS_DATABASE``) stores in PostgreSQL instead of SQLite
(an empty database: the figures are the server's, PostgreSQL's own CPU is not counted);
``--database throwaway`` starts a throwaway cluster for the run (``tests/support/pg.py``, fsync on).
With PostgreSQL, a second replica on the same database is started for a third figure: delivery
POSTed to replica B -> notice from replica A (heard by ``LISTEN``/``NOTIFY``), p50.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import hmac
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _memo import pct, row

from asyncai_watch import McpResourceSource, WatchManager
from asyncai_watch.core.limits import Limits

SECRET = b"bench-secret"
PERIOD = 1.0  # the polling client's period, s
RATE = 1000.0  # deliveries per second, sustained
SENDERS = 16
UNCAPPED = Limits(debounce_quiet=0, debounce_max_wait=0, lines_per_notice=1_000_000)
CONFIG = """
[[source]]
name = "github"
kind = "github"
secrets = [{ file = "github.secret" }]
"""


def delivery(run_id: int) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(
        {
            "action": "completed",
            "workflow_run": {
                "id": run_id,
                "name": "CI",
                "head_branch": "main",
                "status": "completed",
                "conclusion": "failure",
            },
            "repository": {"full_name": "octo-org/octo-repo"},
            "sender": {"login": "octocat"},
        }
    ).encode()
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": "workflow_run",
        "X-GitHub-Delivery": f"delivery-{run_id}",
        "X-Hub-Signature-256": "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest(),
    }
    return body, headers


def run_ids(text: str) -> list[int]:
    """The run ids of a notice's event lines (``workflow_run.completed 123``); -1 for a GAP line."""
    out = []
    for line in text.splitlines():
        if line.startswith("workflow_run.completed "):
            out.append(int(line.split()[1]))
        elif "GAP" in line:
            out.append(-1)
    return out


async def latency(
    m: WatchManager, http: httpx2.AsyncClient, hooks: str, n: int, posts: list[float], first: int = 1_000_000
) -> list[float]:
    out = []
    for i in range(n):
        body, headers = delivery(first + i)
        t0 = time.monotonic()
        answer = await http.post(hooks, content=body, headers=headers)
        posts.append(time.monotonic() - t0)
        assert answer.status_code == 200, answer.text
        with anyio.fail_after(30):
            while first + i not in run_ids((await m.notices.receive()).text):
                pass
        out.append(time.monotonic() - t0)
    return out


class MockApi:
    """GitHub's ``GET .../actions/runs`` on loopback: the runs added so far, newest first."""

    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []

    async def serve(self, listener: Any) -> None:
        async def handle(stream: Any) -> None:
            async with stream:
                buf = b""
                while True:
                    while b"\r\n\r\n" not in buf:
                        chunk = await stream.receive()
                        if not chunk:
                            return
                        buf += chunk
                    _, buf = buf.split(b"\r\n\r\n", 1)
                    body = json.dumps(
                        {"total_count": len(self.runs), "workflow_runs": self.runs[::-1]}
                    ).encode()
                    await stream.send(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                        + str(len(body)).encode()
                        + b"\r\n\r\n"
                        + body
                    )

        await listener.serve(handle)


async def poll_baseline(phases: int) -> list[float]:
    api = MockApi()
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    detections = anyio.create_memory_object_stream[tuple[int, float]](100)
    latencies: list[float] = []
    added: dict[int, float] = {}
    async with anyio.create_task_group() as tg, httpx2.AsyncClient(trust_env=False) as http:
        tg.start_soon(api.serve, listener)
        start = time.monotonic()

        async def poller() -> None:
            seen: set[int] = set()
            tick = 0
            while True:
                await anyio.sleep(max(0.0, start + tick * PERIOD - time.monotonic()))  # the poller's period
                tick += 1
                runs = (await http.get(f"http://127.0.0.1:{port}/repos/o/r/actions/runs")).json()[
                    "workflow_runs"
                ]
                now = time.monotonic()
                for r in runs:
                    if r["id"] not in seen:
                        seen.add(r["id"])
                        detections[0].send_nowait((r["id"], now))

        tg.start_soon(poller)
        for k in range(phases):
            when = start + (k + 1) * PERIOD + (k + 0.5) / phases * PERIOD
            await anyio.sleep(max(0.0, when - time.monotonic()))  # pacing the change: a bench, not a wait
            added[k] = time.monotonic()
            api.runs.append({"id": k, "status": "completed", "conclusion": "failure"})
            with anyio.fail_after(10):
                run_id, seen_at = await detections[1].receive()
            latencies.append(seen_at - added[run_id])
        tg.cancel_scope.cancel()
    return latencies


async def sustained(m: WatchManager, http: httpx2.AsyncClient, hooks: str, seconds: float) -> dict[str, Any]:
    total = int(RATE * seconds)
    first = 2_000_000
    heard: list[int] = []
    done = anyio.Event()
    last_notice = 0.0

    async def tally() -> None:
        nonlocal last_notice
        while len({i for i in heard if i >= first}) < total:
            heard.extend(run_ids((await m.notices.receive()).text))
            last_notice = time.monotonic()
        done.set()

    send, receive = anyio.create_memory_object_stream[int](total * 2)
    statuses: list[int] = []
    start = time.monotonic()

    async def sender() -> None:
        async for i in receive:
            body, headers = delivery(first + i)
            statuses.append((await http.post(hooks, content=body, headers=headers)).status_code)

    async with anyio.create_task_group() as tg:
        tg.start_soon(tally)
        async with anyio.create_task_group() as senders:
            for _ in range(SENDERS):
                senders.start_soon(sender)
            for i in range(total):
                await anyio.sleep(max(0.0, start + i / RATE - time.monotonic()))  # the offered rate
                send.send_nowait(i)
                if i % 10 == 9:
                    send.send_nowait(i)  # the sender's retry of the same delivery
            send.close()
        sent_done = time.monotonic()
        with anyio.move_on_after(30):
            await done.wait()
        tg.cancel_scope.cancel()
    got = [i for i in heard if i >= first or i == -1]
    return {
        "total": total,
        "posted": len(statuses),
        "ok": sum(1 for s in statuses if s == 200),
        "rate": total / (sent_done - start),
        "delivered": len(set(got) - {-1}),
        "duplicated": len(got) - len(set(got)),
        "gaps": got.count(-1),
        "tail": max(0.0, last_notice - sent_done),
    }


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's children: the server."""
    total = 0
    for task in Path("/proc/self/task").iterdir():
        for pid in (task / "children").read_text().split():
            with contextlib.suppress(OSError):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def database(dsn: str | None) -> Any:
    """The DSN to store in: ``dsn`` itself, or a throwaway cluster's new database, or None (SQLite)."""
    if dsn != "throwaway":
        yield dsn
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import shutil

    from tests.support.pg import start_postgres

    base = Path(tempfile.mkdtemp(prefix="asyncai-bench-pg-"))
    try:
        server = start_postgres(base, fsync=True)
        try:
            yield server.create_database()
        finally:
            server.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


async def main(quick: bool, sync: str, dsn: str | None) -> int:
    with database(dsn) as db:
        return await run(quick, sync, db)


async def run(quick: bool, sync: str, dsn: str | None) -> int:
    n, phases, seconds = (50, 4, 2.0) if quick else (200, 10, 5.0)
    where = "PostgreSQL" if dsn is not None else f"SQLite, --sync {sync}"
    print(
        f"webhooks server ({where}): {n} deliveries one at a time; {phases} poll phases; "
        f"{seconds:g} s at {RATE:,.0f}/s; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        (base / "github.secret").write_text(SECRET.decode())
        (base / "hooks.toml").write_text(CONFIG)
        argv = [sys.executable, "-m", "asyncai_servers.webhooks", "--config", str(base / "hooks.toml")]
        argv += ["--receive", "127.0.0.1:0"]
        env = dict(os.environ)
        if dsn is not None:  # by the environment: the DSN may carry a password
            env["ASYNCAI_WEBHOOKS_DATABASE"] = dsn
        else:
            env.pop("ASYNCAI_WEBHOOKS_DATABASE", None)
            argv += ["--db", str(base / "hooks.sqlite3"), "--sync", sync]
        limits = httpx2.Limits(max_connections=SENDERS, max_keepalive_connections=SENDERS)
        async with (
            McpResourceSource.stdio(argv, name="hooks", env=env) as source,
            WatchManager([source], limits=UNCAPPED) as m,
            httpx2.AsyncClient(trust_env=False, timeout=30, limits=limits) as http,
        ):
            listed = json.loads((await source.read("webhooks://sources")).text)
            hooks = listed["sources"]["github"]["endpoint"]
            await m.watch_start("runs", "webhook-events://github/workflow_run")
            posts: list[float] = []
            lat = await latency(m, http, hooks, n, posts)
            across: list[float] = []
            if dsn is not None:  # a second replica on the database receives; the watch is on the first
                async with McpResourceSource.stdio(argv, name="replica-b", env=env) as b:
                    other = json.loads((await b.read("webhooks://sources")).text)
                    hooks_b = other["sources"]["github"]["endpoint"]
                    across = await latency(m, http, hooks_b, n, [], first=1_500_000)
            cpu0 = children_cpu()
            load = await sustained(m, http, hooks, seconds)
            load["cpu"] = (children_cpu() - cpu0) / load["posted"]
    polled = await poll_baseline(phases)
    ms = 1000.0
    row(
        "delivery -> notice p50",
        pct(lat, 50) * ms,
        statistics.median(polled) * ms,
        "ms",
        "target p50 <= 10 ms",
    )
    row("  of which the POST (verified, committed)", pct(posts, 50) * ms, None, "ms")
    if across:
        row(
            "delivery to replica B -> notice at A p50",
            pct(across, 50) * ms,
            statistics.median(polled) * ms,
            "ms",
            "via NOTIFY",
        )
    row("delivery -> notice p99", pct(lat, 99) * ms, pct(polled, 99) * ms, "ms")
    row("sustained rate reached", load["rate"], RATE, "/s", "target 1,000/s", lower_is_better=False)
    print(
        f"  sustained: {load['delivered']:,} of {load['total']:,} deliveries heard once ({load['posted']:,} POSTs with "
        f"the retries, {load['ok']:,} answered 200), {load['duplicated']} duplicated, {load['gaps']} GAPs; "
        f"last notice {load['tail'] * ms:.0f} ms after the last delivery",
        flush=True,
    )
    print(f"  server CPU per delivery (POST verified, committed, notified, read): {load['cpu'] * ms:.2f} ms")
    ok = load["delivered"] == load["total"] and load["duplicated"] == 0 and load["gaps"] == 0
    print(f"  none lost or duplicated: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--sync", choices=("full", "normal"), default="full")
    p.add_argument(
        "--database",
        metavar="DSN",
        default=os.environ.get("ASYNCAI_WEBHOOKS_DATABASE"),
        help="PostgreSQL instead of SQLite ('throwaway': a cluster of the run's own)",
    )
    args = p.parse_args()
    sys.exit(anyio.run(main, args.quick, args.sync, args.database))
