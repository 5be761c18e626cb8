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
   sender's retry: it must not become a second event, and it is a POST on top of the 1,000/s), by
   64 concurrent senders (``--senders``), each a kept-alive connection writing GitHub's request
   (all its headers) in one send and waiting for its answer: a lean sender, prepared before the
   clock starts, so that on 2 cores the figure is the server's and not the load generator's
   (httpx2 spent more CPU per POST than the server), with enough of them in flight that the
   senders' own waits do not cap the rate (printed: senders / the mean time of a POST).
   Figures: the delivery rate reached, events delivered of deliveries accepted (none may be lost,
   duplicated or reported in a GAP), the lag of the last notice after the last delivery, the load
   average before and after, and the CPU per POST (user + system, from /proc) of the server
   process and of this one (the senders and the watcher): what the rate costs whatever else the
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
import anyio.abc
import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _memo import pct, row

from asyncai_watch import McpResourceSource, WatchManager
from asyncai_watch.core.limits import Limits

SECRET = b"bench-secret"
PERIOD = 1.0  # the polling client's period, s
RATE = 1000.0  # deliveries per second, sustained
SENDERS = 64
"""Senders in the sustained phase, each waiting for its answer: at most SENDERS / (the time a POST
takes) POSTs a second. A provider sending 1,000 deliveries a second has many in flight, each
waiting for its own commit; 16 (the first version's) capped the rate at 16 / 20-30 ms on a loaded
2-core machine whatever the server could do (--senders 16 shows it)."""
UNCAPPED = Limits(debounce_quiet=0, debounce_max_wait=0, lines_per_notice=1_000_000)
CONFIG = """
[[source]]
name = "github"
kind = "github"
secrets = [{ file = "github.secret" }]
"""


def delivery(run_id: int) -> tuple[bytes, dict[str, str]]:
    """A ``workflow_run`` delivery with the headers GitHub sends, signed as GitHub signs it."""
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
        "Accept": "*/*",
        "User-Agent": "GitHub-Hookshot/044aadd",
        "Content-Type": "application/json",
        "X-GitHub-Event": "workflow_run",
        "X-GitHub-Delivery": f"delivery-{run_id}",
        "X-GitHub-Hook-ID": "292430182",
        "X-GitHub-Hook-Installation-Target-ID": "79929171",
        "X-GitHub-Hook-Installation-Target-Type": "repository",
        "X-Hub-Signature": "sha1=" + hmac.new(SECRET, body, hashlib.sha1).hexdigest(),
        "X-Hub-Signature-256": "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest(),
    }
    return body, headers


def request_bytes(url: str, body: bytes, headers: dict[str, str]) -> bytes:
    """The whole HTTP/1.1 request POSTing ``body`` to ``url``, as a sender writes it (one write)."""
    authority, path = url.split("//", 1)[1].split("/", 1)
    head = [f"POST /{path} HTTP/1.1", f"Host: {authority}", f"Content-Length: {len(body)}"]
    head += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class Sender:
    """A lean webhook sender: one kept-alive HTTP/1.1 connection, a prepared request written in one
    send, the answer read by its status line and ``Content-Length``. A load generator must cost
    little next to the server it measures: httpx2 spends about 0.8 ms of CPU per POST, more than
    the server, which on 2 cores capped the rate at what the client could send."""

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self.stream = stream
        self.buf = b""

    async def post(self, request: bytes) -> int:
        await self.stream.send(request)
        buf = self.buf
        while (end := buf.find(b"\r\n\r\n")) < 0:
            buf += await self.stream.receive()
        head = buf[:end].decode("latin-1").lower().split("\r\n")
        length = next(int(line.split(":", 1)[1]) for line in head if line.startswith("content-length:"))
        rest = buf[end + 4 :]
        while len(rest) < length:
            rest += await self.stream.receive()
        self.buf = rest[length:]
        return int(head[0].split()[1])


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


async def sustained(m: WatchManager, hooks: str, seconds: float, senders: int, rate: float) -> dict[str, Any]:
    total = int(rate * seconds)
    first = 2_000_000
    # Signed before the clock starts: what the senders spend is theirs, not the server's.
    requests = [request_bytes(hooks, *delivery(first + i)) for i in range(total)]
    host, port = hooks.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
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
    took: list[float] = []

    async def sender(stream: anyio.abc.ByteStream) -> None:
        client = Sender(stream)
        async for i in receive:
            t0 = time.monotonic()
            statuses.append(await client.post(requests[i]))
            took.append(time.monotonic() - t0)

    async with contextlib.AsyncExitStack() as connections:
        streams = [
            await connections.enter_async_context(await anyio.connect_tcp(host, int(port)))
            for _ in range(senders)
        ]
        load0, cpu0, own0 = os.getloadavg()[0], children_cpu(), time.process_time()
        start = time.monotonic()
        async with anyio.create_task_group() as tg:
            tg.start_soon(tally)
            async with anyio.create_task_group() as pool:
                for stream in streams:
                    pool.start_soon(sender, stream)
                i = 0
                while i < total:
                    due = min(total, int((time.monotonic() - start) * rate) + 1)
                    for j in range(i, due):
                        send.send_nowait(j)
                        if j % 10 == 9:
                            send.send_nowait(j)  # the sender's retry of the same delivery
                    i = due
                    await anyio.sleep(max(0.0, start + i / rate - time.monotonic()))  # the offered rate
                send.close()
            sent_done = time.monotonic()
            with anyio.move_on_after(30):
                await done.wait()
            tg.cancel_scope.cancel()
        cpu, own = children_cpu() - cpu0, time.process_time() - own0
    got = [i for i in heard if i >= first or i == -1]
    return {
        "total": total,
        "posted": len(statuses),
        "ok": sum(1 for s in statuses if s == 200),
        "rate": total / (sent_done - start),
        "post_rate": len(statuses) / (sent_done - start),
        "delivered": len(set(got) - {-1}),
        "duplicated": len(got) - len(set(got)),
        "gaps": got.count(-1),
        "tail": max(0.0, last_notice - sent_done),
        "cpu": cpu / len(statuses),
        "own_cpu": own / len(statuses),
        "load": (load0, os.getloadavg()[0]),
        "post_p50": pct(took, 50),
        "post_mean": statistics.fmean(took),
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


async def main(quick: bool, sync: str, dsn: str | None, senders: int, rate: float) -> int:
    with database(dsn) as db:
        return await run(quick, sync, db, senders, rate)


async def run(quick: bool, sync: str, dsn: str | None, senders: int, rate: float) -> int:
    n, phases, seconds = (50, 4, 2.0) if quick else (200, 10, 5.0)
    where = "PostgreSQL" if dsn is not None else f"SQLite, --sync {sync}"
    print(
        f"webhooks server ({where}): {n} deliveries one at a time; {phases} poll phases; "
        f"{seconds:g} s at {rate:,.0f}/s by {senders} senders; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
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
            load = await sustained(m, hooks, seconds, senders, rate)
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
    row("sustained rate reached", load["rate"], rate, "/s", "target 1,000/s", lower_is_better=False)
    print(
        f"  sustained: {load['delivered']:,} of {load['total']:,} deliveries heard once ({load['posted']:,} POSTs with "
        f"the retries, {load['ok']:,} answered 200), {load['duplicated']} duplicated, {load['gaps']} GAPs; "
        f"last notice {load['tail'] * ms:.0f} ms after the last delivery",
        flush=True,
    )
    print(
        f"  CPU per POST: the server {load['cpu'] * ms:.2f} ms (verified, committed, notified, read); the senders "
        f"and the watcher (this process) {load['own_cpu'] * ms:.2f} ms; {load['post_rate']:,.0f} POSTs/s; "
        f"load average {load['load'][0]:.1f} -> {load['load'][1]:.1f}",
        flush=True,
    )
    print(
        f"  a POST (verified, committed, answered) took {load['post_p50'] * ms:.1f} ms p50, "
        f"{load['post_mean'] * ms:.1f} ms mean: {senders} senders that wait for their answers send at most "
        f"{senders / load['post_mean']:,.0f} POSTs/s",
        flush=True,
    )
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
    p.add_argument(
        "--senders",
        type=int,
        default=SENDERS,
        help=f"concurrent senders in the sustained phase (default {SENDERS}): each waits for its answer, so "
        "the rate is at most senders / the time a POST takes",
    )
    p.add_argument(
        "--rate",
        type=float,
        default=RATE,
        help=f"deliveries per second offered in the sustained phase (default {RATE:,.0f}); above what the "
        "machine can take, the rate reached is its ceiling",
    )
    args = p.parse_args()
    sys.exit(anyio.run(main, args.quick, args.sync, args.database, args.senders, args.rate))
