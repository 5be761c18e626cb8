"""A huge resource must not stall the other watches.

    python bench/large_body.py           # 50 MB body, 10 s of changes
    python bench/large_body.py --quick   # 20 MB body, 4 s

Two memo servers (stdio, one WatchManager). Watch A is on a memo whose state holds one ~50 MB
value; a writer process changes a small key of it every second, so every change of A is a 50 MB
read. Watch B is on the other memo; a second writer process changes it every 100 ms. The figure
is how late B's notices are (arrival minus the writer's clock before its call) while A's big
reads are being processed: the worst delay over the run, and p99.

Baseline, measured in the same run: the same with large bodies handled on the event loop (the
large-body worker switched off by raising the threshold), which is how reads were handled before.

Target: B's notices never delayed by more than 100 ms.
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

import asyncai_watch.runtime.topic as subscriptions
from asyncai_watch import Limits, WatchManager

NOTES = "memo://notes"
IMMEDIATE = Limits(debounce_quiet=0, debounce_max_wait=0)


async def run(megabytes: int, seconds: float, offload: bool) -> tuple[list[float], int]:
    """B's notice delays, and how many big reads A processed meanwhile."""
    saved = subscriptions.LARGE_BODY
    subscriptions.LARGE_BODY = saved if offload else 1 << 62
    try:
        async with AsyncExitStack() as stack:
            # Its reads are larger than the client's default cap of one message (16 MiB).
            big, big_url = await stack.enter_async_context(memo("big", max_message_bytes=None))
            small, small_url = await stack.enter_async_context(memo("small"))
            big_writer = await stack.enter_async_context(writer(big_url))
            small_writer = await stack.enter_async_context(writer(small_url))
            for i in range(megabytes):  # 1 MB per request: HTTP request bodies are capped at 4 MB
                await big_writer.set(f"blob{i}", "x" * 1_000_000)
            # Two managers in one process: one event loop, as in an agent with both watches.
            m_big = await stack.enter_async_context(WatchManager([big], limits=IMMEDIATE))
            m = await stack.enter_async_context(WatchManager([small], limits=IMMEDIATE))
            await m_big.watch_start("a", NOTES)
            await m.watch_start("b", NOTES)
            delays: list[float] = []
            sent: dict[int, float] = {}
            big_done = 0
            stop = time.monotonic() + seconds

            async def drive_big() -> None:
                i = 0
                while time.monotonic() < stop:
                    await big_writer.set("tick", i)
                    i += 1
                    await anyio.sleep(1.0)  # the bench's own pacing of the load, not a wait for a condition

            async def drive_small() -> None:
                i = 0
                while time.monotonic() < stop:
                    sent[i] = await small_writer.set("tick", i)
                    i += 1
                    await anyio.sleep(0.1)

            async def count_big() -> None:
                nonlocal big_done
                async for _ in m_big.notices:
                    big_done += 1

            async with anyio.create_task_group() as tg:
                tg.start_soon(drive_big)
                tg.start_soon(drive_small)
                tg.start_soon(count_big)
                with anyio.move_on_after(seconds + 30):
                    async for notice in m.notices:
                        now = time.monotonic()
                        value = int(notice.text.rsplit("→", 1)[-1].rstrip(")")) if "→" in notice.text else 0
                        if value in sent:
                            delays.append(now - sent[value])
                        if now > stop + 5:
                            break
                tg.cancel_scope.cancel()
    finally:
        subscriptions.LARGE_BODY = saved
    return delays, big_done


async def main(quick: bool) -> int:
    megabytes, seconds = (20, 4.0) if quick else (50, 10.0)
    print(
        f"large-body bench: a {megabytes} MB state changed every 1 s beside a small watch changed every 100 ms"
    )
    delays, big = await run(megabytes, seconds, offload=True)
    bdelays, bbig = await run(megabytes, seconds, offload=False)
    worst, bworst = max(delays) * 1e3, max(bdelays) * 1e3
    print(f"the small watch's notice delay while the big one is read ({big} / {bbig} big reads processed):")
    row("worst delay", worst, bworst, "ms", "(target <= 100 ms)")
    row("p99 delay", pct(delays, 99) * 1e3, pct(bdelays, 99) * 1e3, "ms")
    row("p50 delay", pct(delays, 50) * 1e3, pct(bdelays, 50) * 1e3, "ms")
    print("all targets met" if worst <= 100 else "some targets missed (see above)")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a short run")
    sys.exit(anyio.run(main, parser.parse_args().quick))
