"""Watch latency and idle cost vs a polling client; filter throughput.

    python bench/latency.py           # 1,000 changes, 10 s idle window
    python bench/latency.py --quick   # 200 changes, 3 s idle window

1. memo_set -> notice ready, over stdio (the real memo server as a subprocess,
   McpResourceSource, WatchManager with debounce 0): p50 / p99 over N changes,
   measured from just before the memo_set call to the notice arriving on
   ``WatchManager.notices`` (so it includes the tool call's own round trip).
2. The baseline: a client that reads memo://notes every 1 s and diffs (what users
   write without this library). Its latency is measured over real changes made at
   random phases of its poll period.
3. Requests made while idle: counted on the client side of the connection for the
   watch and for the poller over the same window, scaled to one minute.
4. Filter throughput: events/s through a RestrictedPython ``on_event`` in its
   worker process, in batches of 100 (the per-update batch size).

Targets: p50 <= 5 ms, p99 <= 25 ms, 0 idle requests for watches, >= 10,000 filter events/s.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from asyncai_watch.clock import SystemClock
from asyncai_watch.core.diff import diff_state, parse_state
from asyncai_watch.core.limits import Limits
from asyncai_watch.manager import WatchManager
from asyncai_watch.mcp_source import McpResourceSource
from asyncai_watch.source import ListedResource, ListedTemplate, ReadResult, ToolInfo, ToolResult

MEMO = [sys.executable, "-m", "asyncai_servers.memo"]
NOTES = "memo://notes"


class Counting:
    """A ResourceSource wrapper that counts the requests this side sends."""

    def __init__(self, inner: McpResourceSource) -> None:
        self.inner = inner
        self.requests = 0

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def protocol_version(self) -> str:
        return self.inner.protocol_version

    @property
    def subscribable(self) -> bool:
        return self.inner.watchable

    async def list_resources(self) -> list[ListedResource]:
        self.requests += 1
        return await self.inner.list_resources()

    async def list_templates(self) -> list[ListedTemplate]:
        self.requests += 1
        return await self.inner.list_templates()

    async def read(self, uri: str) -> ReadResult:
        self.requests += 1
        return await self.inner.read(uri)

    def listen(self, uri: str) -> AbstractAsyncContextManager[AsyncIterator[None]]:
        self.requests += 1
        return self.inner.listen(uri)

    async def list_tools(self) -> list[ToolInfo]:
        self.requests += 1
        return await self.inner.list_tools()

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> ToolResult:
        return await self.inner.call_tool(name, arguments)  # the writer's calls are not the watcher's cost


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def row(label: str, value: float, baseline: float | None, unit: str, target: str = "") -> None:
    ratio = f"{baseline / value:8.1f}x better" if baseline and value else " " * 15
    base = f"{baseline:10.1f} {unit}" if baseline is not None else " " * 13
    print(f"  {label:<34} {value:10.2f} {unit}   baseline {base}   {ratio}   {target}")


async def watch_latency(changes: int, idle: float) -> tuple[list[float], list[float], int]:
    async with McpResourceSource.stdio(MEMO, name="memo") as real:
        src = Counting(real)
        limits = Limits(debounce_quiet=0, debounce_max_wait=0)
        async with WatchManager([src], limits=limits, clock=SystemClock()) as m:
            await m.watch_start("notes", NOTES)
            for i in range(20):  # warm up the connection and the code paths
                await real.call_tool("memo_set", {"key": "k", "value": -i - 1})
                await m.notices.receive()
            latencies: list[float] = []
            calls: list[float] = []
            for i in range(changes):
                t0 = time.perf_counter()
                await real.call_tool("memo_set", {"key": "k", "value": i})
                calls.append(time.perf_counter() - t0)
                with anyio.fail_after(10):
                    await m.notices.receive()
                latencies.append(time.perf_counter() - t0)
            before = src.requests
            await anyio.sleep(idle)  # the bench measures time: an idle window on purpose
            idle_requests = src.requests - before
    return latencies, calls, idle_requests


async def polling_latency(changes: int, idle: float, period: float = 1.0) -> tuple[list[float], int]:
    async with McpResourceSource.stdio(MEMO, name="memo") as real:
        src = Counting(real)
        changed = anyio.Event()
        detected: list[float] = []
        stop = anyio.Event()

        async def poller() -> None:
            nonlocal changed
            previous = parse_state((await src.read(NOTES)).text)
            while not stop.is_set():
                await anyio.sleep(period)  # this is the baseline being measured: a polling client
                current = parse_state((await src.read(NOTES)).text)
                if diff_state(previous, current):
                    detected.append(time.perf_counter())
                    changed.set()
                previous = current

        latencies: list[float] = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(poller)
            rng = random.Random(3)
            for i in range(changes):
                await anyio.sleep(rng.uniform(0, period))  # change at a random phase of the poll period
                changed = anyio.Event()
                t0 = time.perf_counter()
                await real.call_tool("memo_set", {"key": "k", "value": i})
                with anyio.fail_after(10):
                    await changed.wait()
                latencies.append(detected[-1] - t0)
            before = src.requests
            await anyio.sleep(idle)
            idle_requests = src.requests - before
            stop.set()
            tg.cancel_scope.cancel()
    return latencies, idle_requests


async def filter_throughput(seconds: float) -> float | str:
    try:
        from asyncai_watch.filters import EmptyCatalog, default_engine
    except ImportError as exc:
        return f"filter engine not available: {exc}"
    engine = default_engine(Limits())
    source = "f\"{event['type']} {event['key']}\" if event[\"new\"] % 3 else None"
    session = await engine.open(source, catalog=EmptyCatalog())
    try:
        batch = [
            {
                "watch": "w",
                "uri": "u",
                "type": "MODIFIED",
                "key": f"k{i}",
                "new": i,
                "old": i - 1,
                "changed": [],
            }
            for i in range(100)
        ]
        with anyio.fail_after(30):
            await session.run(batch)  # warm-up
        n = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            with anyio.fail_after(30):
                outcomes = await session.run(batch)
            if any(o.error for o in outcomes):
                return f"filter errors: {next(o.error for o in outcomes if o.error)}"
            n += len(batch)
        return n / (time.perf_counter() - t0)
    except TimeoutError:
        return "filter worker did not answer within 30 s"
    finally:
        await session.aclose()


async def main(quick: bool) -> int:
    changes = 200 if quick else 1000
    idle = 3.0 if quick else 10.0
    poll_changes = 5 if quick else 15
    print(f"asyncai-watch latency bench ({'quick' if quick else 'full'}): {changes} changes over stdio")
    lat, calls, watch_idle = await watch_latency(changes, idle)
    plat, poll_idle = await polling_latency(poll_changes, idle)
    p50, p99 = pct(lat, 50) * 1e3, pct(lat, 99) * 1e3
    b50, b99 = pct(plat, 50) * 1e3, pct(plat, 99) * 1e3
    print("memo_set -> notice ready (debounce 0), vs a client polling every 1 s:")
    row("p50 latency", p50, b50, "ms", "(target <= 5 ms)")
    row("p99 latency", p99, b99, "ms", "(target <= 25 ms)")
    row("mean latency", statistics.fmean(lat) * 1e3, statistics.fmean(plat) * 1e3, "ms")
    print(f"  (of which the memo_set call's own round trip: p50 {pct(calls, 50) * 1e3:.2f} ms)")
    per_min_watch = watch_idle * 60 / idle
    per_min_poll = poll_idle * 60 / idle
    print(f"requests while idle (measured over {idle:g} s, scaled to 1 min):")
    print(
        f"  {'watch':<34} {per_min_watch:10.1f} /min   baseline {per_min_poll:10.1f} /min   "
        f"{'0 vs ' + format(per_min_poll, '.0f') if per_min_watch == 0 else ''}   (target 0)"
    )
    tput = await filter_throughput(1.0 if quick else 3.0)
    print("filter throughput (RestrictedPython worker, batches of 100):")
    if isinstance(tput, str):
        print(f"  FAILED: {tput}")
    else:
        print(f"  {'events/s':<34} {tput:10.0f}        baseline    10000 /s (target)   {tput / 10000:8.2f}x")
    ok = p50 <= 5 and p99 <= 25 and per_min_watch == 0 and not isinstance(tput, str) and tput >= 10_000
    print("all targets met" if ok else "some targets missed (see above)")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a short run")
    args = parser.parse_args()
    sys.exit(anyio.run(main, args.quick))
