"""Fan-out: N watches on one memo URI, the writer a separate process on its own connection.

    python bench/fanout.py           # 200 changes per N
    python bench/fanout.py --quick   # 50 changes per N

For N = 1, 10 and 50 watches on ``memo://notes`` (memo over stdio, debounce 0), a writer in
another process calls ``memo_set`` over HTTP; each notice's latency is its arrival minus the
writer's clock just before the call (CLOCK_MONOTONIC, shared by all processes). memo counts
the reads it answers (its ``memo_stats`` tool), so "reads per change" is the server's own count.

Baseline, measured in the same run: the same N watches, each in its own WatchManager on the same
connection, so each has its own ``subscriptions/listen`` and its own read per change (what a
watch cost before subscriptions were shared).

Targets: reads per change = 1 for any N; p50 at 50 watches <= 1.5x the p50 of one watch
(issue 20: watches on one URI share the read and the extraction, and differ only from the
filter on), and <= 8 ms.
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _memo import memo, pct, row, writer

from asyncai_watch import Limits, McpResourceSource, Notice, WatchManager
from asyncai_watch._tasks import enter_task_group

NOTES = "memo://notes"
IMMEDIATE = Limits(debounce_quiet=0, debounce_max_wait=0, max_watches=64)


async def run(
    source: McpResourceSource, url: str, n: int, changes: int, shared: bool
) -> tuple[list[float], float]:
    """Latencies of every notice, and memo's reads per change."""
    async with AsyncExitStack() as stack:
        managers = (
            [await stack.enter_async_context(WatchManager([source], limits=IMMEDIATE))]
            if shared
            else [await stack.enter_async_context(WatchManager([source], limits=IMMEDIATE)) for _ in range(n)]
        )
        for i in range(n):
            await managers[i % len(managers)].watch_start(f"w{i}", NOTES)
        send, receive = anyio.create_memory_object_stream[tuple[float, Notice]](1000)
        tg = await enter_task_group(stack)
        for m in managers:

            async def forward(m: WatchManager = m) -> None:
                async for notice in m.notices:
                    await send.send((time.monotonic(), notice))

            tg.start_soon(forward)
        w = await stack.enter_async_context(writer(url))
        latencies: list[float] = []
        for i in range(5):  # warm up
            await w.set("k", -i - 1)
            for _ in range(n):
                await receive.receive()
        reads_before = await w.reads()
        for i in range(changes):
            t0 = await w.set("k", i)
            with anyio.fail_after(30):
                for _ in range(n):
                    arrived, _ = await receive.receive()
                    latencies.append(arrived - t0)
        reads = (await w.reads()) - reads_before
        tg.cancel_scope.cancel()
    return latencies, reads / changes


async def main(quick: bool) -> int:
    changes = 50 if quick else 200
    print(f"fan-out bench: {changes} changes per N; writer in its own process over HTTP; memo over stdio")
    ok = True
    single = 0.0
    async with memo() as (source, url):
        for n in (1, 10, 50):
            lat, reads = await run(source, url, n, changes, shared=True)
            blat, breads = await run(source, url, n, changes, shared=False)
            p50, p99, b50, b99 = (pct(x, q) * 1e3 for x, q in ((lat, 50), (lat, 99), (blat, 50), (blat, 99)))
            print(f"N = {n} watches on one URI (baseline: {n} separate subscriptions):")
            row("p50 per notice", p50, b50, "ms", "(target <= 8 ms at N=50)" if n == 50 else "")
            row("p99 per notice", p99, b99, "ms")
            row("server reads per change", reads, breads, "", "(target 1)")
            if n == 1:
                single = p50
            else:
                print(
                    f"  p50 at N = {n} / at N = 1: {p50 / single:.2f}x"
                    + (" (target <= 1.5x)" if n == 50 else "")
                )
            ok = ok and reads == 1.0 and (n != 50 or (p50 <= 8 and p50 <= 1.5 * single))
    print("all targets met" if ok else "some targets missed (see above)")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a short run")
    sys.exit(anyio.run(main, parser.parse_args().quick))
