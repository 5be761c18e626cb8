"""Files server: write -> notice latency from a writer process, and wake-ups while idle.

    python bench/files.py [--quick]

1. Latency. A watch through WatchManager -> McpResourceSource -> asyncai-mcp-files
   (stdio, inotify, ``--debounce-ms 0``) with the notice debounce at 0. The writer is a
   separate process (what every user has): on each cue it writes a temp file, reads
   CLOCK_MONOTONIC and renames the file over the watched one, and reports that time.
   The figure is that time -> the notice arriving on ``WatchManager.notices`` (inotify ->
   ResourceUpdated -> re-read -> diff -> notice). Target: p50 <= 5 ms.
2. Baseline for latency: what users write without the library, a loop that reads the same
   file through the same MCP connection every 1 s and compares, timed from the same writer
   process, with writes at random phases of the poll period.
   Also printed: write -> ResourceUpdated at a stock ``mcp`` client on its own server
   process (the server's part, without the re-read and the diff).
3. Wake-ups while idle. With a ``file://`` and a recursive ``dir-events://`` watch open and
   nothing changing, the server process's context switches (voluntary + involuntary, summed
   over all its threads from /proc/PID/task/*/status) and CPU time over the idle window
   (10 s). Target: 0. Beside it, in the same window: the previous change source (watchfiles'
   RustNotify.watch with the step of 10 ms the server used, in a process of its own on the
   same directory, when watchfiles is installed), and the server while a client polls it
   every 1 s.

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
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
from mcp import Client, StdioServerParameters

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from asyncai_watch.core.limits import Limits
from asyncai_watch.mcp.client import McpResourceSource
from asyncai_watch.runtime.manager import WatchManager

# The writer process: one line in ("text") -> write a temp file, read the clock, rename it over.
WRITER = r"""
import os, sys, time
path = sys.argv[1]
tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
for line in sys.stdin:
    with open(tmp, "w") as f:
        f.write(line.rstrip("\n"))
    t0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    os.replace(tmp, path)
    print(t0, flush=True)
"""

# The previous change source, as the server ran it: watchfiles' Rust notify loop, step 10 ms.
OLD_SOURCE = r"""
import sys, threading
from watchfiles._rust_notify import RustNotify
notify = RustNotify([sys.argv[1]], False, False, 0, True, False)
print("ready", flush=True)
notify.watch(0, 10, 0, threading.Event())
"""


def _now() -> float:
    """CLOCK_MONOTONIC in seconds: the same clock the writer process reads."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) / 1e9


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def _server_pid(name: str) -> int | None:
    """Our child process running ``name`` (for its /proc counters)."""
    me = os.getpid()
    for entry in filter(str.isdigit, os.listdir("/proc")):
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


def _switches(pid: int) -> dict[str, int]:
    """Voluntary + involuntary context switches of each thread of ``pid``, by thread id."""
    out: dict[str, int] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                out[tid] = sum(
                    int(line.split()[1])
                    for line in f
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"))
                )
        except OSError:
            continue  # a thread that just ended
    return out


def _switches_since(pid: int, before: dict[str, int]) -> tuple[int, int]:
    """Context switches of ``pid`` since ``before``, and how many threads ended meanwhile.

    A thread that ended took its count with it, so with ended threads the figure is a lower bound.
    """
    now = _switches(pid)
    return sum(n - before.get(tid, 0) for tid, n in now.items()), len(set(before) - set(now))


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


class Writer:
    """The writer process: ``await write(text)`` returns the CLOCK_MONOTONIC time of its rename."""

    def __init__(self, process: anyio.abc.Process) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self.process = process
        self._stdin = process.stdin
        self._lines = process.stdout
        self._buffer = b""

    async def write(self, text: str) -> float:
        await self._stdin.send(text.encode() + b"\n")
        while b"\n" not in self._buffer:
            self._buffer += await self._lines.receive()
        line, self._buffer = self._buffer.split(b"\n", 1)
        return int(line) / 1e9


@asynccontextmanager
async def writer_process(path: Path) -> AsyncIterator[Writer]:
    async with await anyio.open_process([sys.executable, "-c", WRITER, str(path)]) as process:
        try:
            yield Writer(process)
        finally:
            process.kill()


async def _notice_time(m: WatchManager, expect: str, into: list[float]) -> None:
    with anyio.fail_after(10):
        notice = await m.notices.receive()
    into.append(_now())
    assert expect in notice.text, notice.text


async def _watch_latencies(
    source: McpResourceSource, writer: Writer, path: Path, samples: int
) -> list[float]:
    uri = f"file://{path}"
    limits = Limits(debounce_quiet=0.0, debounce_max_wait=0.0)
    out: list[float] = []
    async with WatchManager([source], limits=limits) as m:
        await m.watch_start(name="bench", uri=uri)
        for i in range(samples):
            await anyio.sleep(
                random.uniform(0.0, 0.005)
            )  # benchmark pacing: decorrelate from the last notice
            received: list[float] = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(_notice_time, m, f"→{i})", received)
                written = await writer.write(json.dumps({"n": i}))
            out.append(received[0] - written)
        await m.watch_stop("bench")
    return out


async def _update_latencies(root: Path, writer: Writer, path: Path, samples: int) -> list[float]:
    """The server's part alone: write -> ResourceUpdated at a stock ``mcp`` client (no read, no diff)."""
    uri = f"file://{path}"
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "asyncai_servers.files", str(root), "--debounce-ms", "0"]
    )
    out: list[float] = []
    async with Client(params) as client, client.listen(resource_subscriptions=[uri]) as sub:
        await client.read_resource(uri)
        for i in range(samples):
            await anyio.sleep(random.uniform(0.0, 0.005))  # benchmark pacing, as above
            written = await writer.write(json.dumps({"u": i}))
            with anyio.fail_after(10):
                await sub.__anext__()
            out.append(_now() - written)
            await client.read_resource(uri)  # re-arms the server's level trigger
    return out


async def _poll_latencies(source: McpResourceSource, writer: Writer, path: Path, samples: int) -> list[float]:
    uri = f"file://{path}"
    out: list[float] = []
    seen_at: dict[str, float] = {}  # text -> when the poller first read it
    seen = anyio.Event()

    async def poller() -> None:
        last = (await source.read(uri)).text
        while True:  # the baseline: a 1 s polling loop (the thing this library removes)
            await anyio.sleep(1.0)
            text = (await source.read(uri)).text
            if text != last:
                last = text
                seen_at[text] = _now()
                seen.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(poller)
        for i in range(samples):
            await anyio.sleep(random.uniform(0.0, 1.0))  # benchmark pacing: writes at random phases
            seen = anyio.Event()
            text = json.dumps({"poll": i})
            written = await writer.write(text)  # the poller may read it before this returns
            with anyio.fail_after(10):
                while text not in seen_at:
                    await seen.wait()
                    seen = anyio.Event()
            out.append(seen_at[text] - written)
        tg.cancel_scope.cancel()
    return out


async def _old_source_idle(root: Path, seconds: float) -> int | None:
    """Context switches of the previous change source (watchfiles, step 10 ms) idle on ``root``."""
    try:
        import watchfiles  # noqa: F401
    except ImportError:
        return None
    async with await anyio.open_process([sys.executable, "-c", OLD_SOURCE, str(root)]) as process:
        try:
            assert process.stdout is not None
            with anyio.fail_after(30):
                await process.stdout.receive()  # "ready": its inotify watches exist
            await anyio.sleep(0.5)  # let the thread settle into its loop
            before = _switches(process.pid)
            await anyio.sleep(seconds)  # benchmark: an idle window, nothing else to wait for
            return _switches_since(process.pid, before)[0]
        finally:
            process.kill()


async def _idle(source: McpResourceSource, root: Path, path: Path, seconds: float) -> dict[str, float | None]:
    pid = _server_pid("asyncai_servers.files")
    assert pid is not None, "files server process not found"
    out: dict[str, float | None] = {}

    async def server_idle() -> None:
        async with WatchManager([source]) as m:
            await m.watch_start(name="file", uri=f"file://{path}")
            await m.watch_start(name="tree", uri=f"dir-events://{root}?recursive=true")
            await anyio.sleep(0.5)  # let the startup reads' replies drain
            switches, cpu = _switches(pid), _cpu_seconds(pid)
            await anyio.sleep(seconds)  # benchmark: what idle watches cost, nothing else running
            out["switches"], out["ended"] = _switches_since(pid, switches)
            out["cpu_ms"] = (_cpu_seconds(pid) - cpu) * 1000
            out["threads"] = _threads(pid)

    async def old_idle() -> None:
        out["old_switches"] = await _old_source_idle(root, seconds)

    async with anyio.create_task_group() as tg:  # the same window for both
        tg.start_soon(server_idle)
        tg.start_soon(old_idle)

    # Then the server while a client polls it every 1 s (same length).
    uri = f"file://{path}"
    switches = _switches(pid)
    polls = 0
    with anyio.move_on_after(seconds):
        while True:
            await anyio.sleep(1.0)
            await source.read(uri)
            polls += 1
    out["poll_switches"], out["poll_ended"] = _switches_since(pid, switches)
    out["polls"] = polls
    return out


def _ended(threads: float | None) -> str:
    return f" (at least: {threads:.0f} threads ended in the window)" if threads else ""


async def main(quick: bool) -> None:
    samples, poll_samples, idle = (50, 5, 3.0) if quick else (300, 20, 10.0)
    with tempfile.TemporaryDirectory(prefix="bench-files-") as tmp:
        root = Path(tmp)
        path = root / "state.json"
        path.write_text(json.dumps({"n": -1}))
        argv = [sys.executable, "-m", "asyncai_servers.files", str(root), "--debounce-ms", "0"]
        async with McpResourceSource.stdio(argv, name="files") as source, writer_process(path) as writer:
            watch = await _watch_latencies(source, writer, path, samples)
            updates = await _update_latencies(root, writer, path, samples)
            poll = await _poll_latencies(source, writer, path, poll_samples)
            idle_figures = await _idle(source, root, path, idle)
    w50, w99 = _pct(watch, 50) * 1000, _pct(watch, 99) * 1000
    p50, p99 = _pct(poll, 50) * 1000, _pct(poll, 99) * 1000
    print(
        f"files: write (another process) -> notice, {len(watch)} watch samples, {len(poll)} polling samples"
    )
    print(
        f"  p50   watch {w50:8.2f} ms   1 s polling {p50:8.1f} ms   ratio {p50 / w50:6.1f}x   (target <= 5 ms)"
    )
    print(f"  p99   watch {w99:8.2f} ms   1 s polling {p99:8.1f} ms   ratio {p99 / w99:6.1f}x")
    print(
        f"  mean  watch {statistics.mean(watch) * 1000:8.2f} ms   1 s polling {statistics.mean(poll) * 1000:8.1f} ms"
    )
    print(
        f"  the server's part, write -> ResourceUpdated at a stock mcp client: p50 {_pct(updates, 50) * 1000:.2f} ms, "
        f"p99 {_pct(updates, 99) * 1000:.2f} ms"
    )
    switches, cpu = idle_figures["switches"], idle_figures["cpu_ms"]
    print(
        f"  idle {idle:.0f} s, a file:// and a recursive dir-events:// watch open: files server "
        f"{switches:.0f} context switches, {cpu:.0f} ms CPU, {idle_figures['threads']:.0f} threads (target 0 switches)"
        + _ended(idle_figures["ended"])
    )
    old = idle_figures["old_switches"]
    if old is not None:
        print(
            f"    same window, the previous source (watchfiles RustNotify, step 10 ms): {old:.0f} context switches"
        )
    else:
        print("    (watchfiles not installed: the previous source's figure is not measured)")
    print(
        f"    next {idle:.0f} s, a client polling every 1 s ({idle_figures['polls']:.0f} reads): "
        f"files server {idle_figures['poll_switches']:.0f} context switches"
        + _ended(idle_figures["poll_ended"])
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples (a few seconds)")
    anyio.run(main, parser.parse_args().quick)
