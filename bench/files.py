"""Files server: write -> notice-ready latency, beside a 1 s polling loop.

    python bench/files.py [--quick]

Watch: WatchManager -> McpResourceSource -> asyncai-mcp-files (stdio, inotify) with the
notice debounce at 0, so the figure is the push path itself: inotify -> watchfiles batch
-> ResourceUpdated -> re-read -> diff -> notice. Each sample replaces the file atomically
and waits for its notice.

Baseline: what users write without the library, a loop that reads the same file through
the same MCP connection every 1 s and compares. A change is seen on the next tick, so its
latency is spread over 0..1 s.

Also printed: reads made by each side during an idle stretch (watch: 0), and the files
server's CPU while idle (watchfiles' waiting thread wakes every --step-ms, see the docs).
Ends by itself in well under a minute (--quick: a few seconds plus the baseline).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from asyncai_watch.core.limits import Limits
from asyncai_watch.manager import WatchManager
from asyncai_watch.mcp_source import McpResourceSource
from asyncai_watch.source import ReadResult


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _server_pid(name: str) -> int | None:
    """Our child process running the files server (for its CPU counters)."""
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if int(fields[1]) == me and name.encode() in cmd:
            return int(entry)
    return None


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _watch_latencies(source: McpResourceSource, path: Path, samples: int) -> list[float]:
    uri = f"file://{path}"
    limits = Limits(debounce_quiet=0.0, debounce_max_wait=0.0)
    out: list[float] = []
    async with WatchManager([source], limits=limits) as m:
        await m.watch_start(name="bench", uri=uri)
        for i in range(samples):
            t0 = time.perf_counter()
            await anyio.to_thread.run_sync(_replace, path, json.dumps({"n": i}))
            with anyio.fail_after(10):
                notice = await m.notices.receive()
            out.append(time.perf_counter() - t0)
            assert f"→{i})" in notice.text, notice.text
        await m.watch_stop("bench")
    return out


async def _poll_latencies(source: McpResourceSource, path: Path, samples: int) -> list[float]:
    uri = f"file://{path}"
    out: list[float] = []
    changed_at: dict[str, float] = {}
    seen = anyio.Event()

    async def poller() -> None:
        nonlocal seen
        last = (await source.read(uri)).text
        while True:  # the baseline: a 1 s polling loop (the thing this library removes)
            await anyio.sleep(1.0)
            text = (await source.read(uri)).text
            if text != last:
                last = text
                if text in changed_at:
                    out.append(time.perf_counter() - changed_at[text])
                    seen.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(poller)
        for i in range(samples):
            await anyio.sleep(random.uniform(0.0, 1.0))  # benchmark pacing: writes at random phases
            seen = anyio.Event()
            text = json.dumps({"poll": i})
            changed_at[text] = time.perf_counter()
            await anyio.to_thread.run_sync(_replace, path, text)
            with anyio.fail_after(10):
                await seen.wait()
        tg.cancel_scope.cancel()
    return out


class _CountingSource:
    """A ResourceSource that counts reads (the watch's requests while idle)."""

    def __init__(self, inner: McpResourceSource) -> None:
        self.inner = inner
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def read(self, uri: str) -> ReadResult:
        self.reads += 1
        return await self.inner.read(uri)


async def _idle(source: McpResourceSource, path: Path, seconds: float) -> tuple[float | None, int, int]:
    """Server CPU per idle second with one watch open; reads by the watch and by a 1 s poller meanwhile."""
    uri = f"file://{path}"
    pid = _server_pid("asyncai_servers.files")
    counting = _CountingSource(source)
    polls = 0

    async def poller() -> None:
        nonlocal polls
        while True:  # the baseline's idle cost: one read per second, change or not
            await anyio.sleep(1.0)
            await source.read(uri)
            polls += 1

    async with WatchManager([counting]) as m:  # type: ignore[list-item]
        await m.watch_start(name="idle", uri=uri)
        counting.reads = 0  # the baseline read is not idle cost
        before = _cpu_seconds(pid) if pid else None
        await anyio.sleep(seconds)  # benchmark: what an idle watch costs, nothing else running
        after = _cpu_seconds(pid) if pid else None
        with anyio.move_on_after(seconds):  # then the poller's idle cost, same length
            await poller()
    cpu = None if before is None or after is None else (after - before) / seconds
    return cpu, counting.reads, polls


async def main(quick: bool) -> None:
    samples, poll_samples, idle = (30, 5, 3.0) if quick else (300, 20, 10.0)
    with tempfile.TemporaryDirectory(prefix="bench-files-") as tmp:
        root = Path(tmp)
        path = root / "state.json"
        path.write_text(json.dumps({"n": -1}))
        argv = [sys.executable, "-m", "asyncai_servers.files", str(root), "--debounce-ms", "0"]
        async with McpResourceSource.stdio(argv, name="files") as source:
            watch = await _watch_latencies(source, path, samples)
            poll = await _poll_latencies(source, path, poll_samples)
            cpu, watch_reads, poll_reads = await _idle(source, path, idle)
    w50, w99 = _pct(watch, 50) * 1000, _pct(watch, 99) * 1000
    p50, p99 = _pct(poll, 50) * 1000, _pct(poll, 99) * 1000
    print(f"files: write -> notice ready, {len(watch)} watch samples, {len(poll)} polling samples")
    print(f"  p50   watch {w50:8.1f} ms   1 s polling {p50:8.1f} ms   ratio {p50 / w50:6.1f}x faster")
    print(f"  p99   watch {w99:8.1f} ms   1 s polling {p99:8.1f} ms   ratio {p99 / w99:6.1f}x faster")
    print(f"  mean  watch {statistics.mean(watch) * 1000:8.1f} ms")
    print(f"  idle {idle:.0f} s: reads by the watch {watch_reads}, by the 1 s poller {poll_reads}")
    if cpu is not None:
        print(f"  files server CPU while idle with one watch: {cpu * 1000:.2f} ms per second (step wake-ups)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples (a few seconds)")
    anyio.run(main, parser.parse_args().quick)
