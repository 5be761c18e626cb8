"""Shared bench plumbing: memo over stdio for the watcher and HTTP for a separate writer process."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream

from asyncai_watch import McpResourceSource
from asyncai_watch.mcp.body_cap import DEFAULT_MAX_MESSAGE_BYTES

HERE = Path(__file__).resolve().parent


@asynccontextmanager
async def memo(
    name: str = "memo", max_message_bytes: int | None = DEFAULT_MAX_MESSAGE_BYTES
) -> AsyncIterator[tuple[McpResourceSource, str]]:
    """memo as a subprocess: this process speaks stdio to it; its HTTP URL is for other processes."""
    with tempfile.TemporaryDirectory() as tmp:
        ready = Path(tmp) / "ready"
        argv = [
            sys.executable,
            "-m",
            "asyncai_servers.memo",
            "--also-http",
            "127.0.0.1:0",
            "--ready-file",
            str(ready),
        ]
        async with McpResourceSource.stdio(argv, name=name, max_message_bytes=max_message_bytes) as source:
            # --ready-file is written before stdio answers, so it is there once we are connected.
            url = ready.read_text().split()[1]
            yield source, url


class LineProcess:
    """A helper process spoken to by lines (``bench/_writer.py``, ``_pg_writer.py``,
    ``_file_writer.py``): it prints ``ready``, then answers each line it is sent."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        self._buf = b""

    async def line(self, wait: float = 60) -> str:
        assert self.process.stdout is not None
        with anyio.fail_after(wait):
            while b"\n" not in self._buf:
                self._buf += await self.process.stdout.receive()
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode()

    async def ask(self, text: str, wait: float = 60) -> str:
        assert self.process.stdin is not None
        await self.process.stdin.send(text.encode() + b"\n")
        return await self.line(wait)


P = TypeVar("P", bound=LineProcess)


@asynccontextmanager
async def line_process(argv: list[str], make: Callable[[anyio.abc.Process], P]) -> AsyncIterator[P]:
    """Run ``argv`` as a :class:`LineProcess` (``make`` wraps it) from its ``ready`` line until
    the block ends: then its stdin closes, and it is killed if it lingers."""
    async with await anyio.open_process(argv, stderr=None) as proc:
        helper = make(proc)
        assert await helper.line() == "ready"
        try:
            yield helper
        finally:
            assert proc.stdin is not None
            await proc.stdin.aclose()
            with anyio.move_on_after(10):
                await proc.wait()
            if proc.returncode is None:
                proc.kill()


class Writer(LineProcess):
    """A separate process that changes memo on its own HTTP connection (bench/_writer.py)."""

    def __init__(self, process: anyio.abc.Process) -> None:
        super().__init__(process)
        self.calls: list[float] = []
        """The round trip of each ``memo_set`` call, as the writer saw it (s)."""

    async def set(self, key: str, value: Any) -> float:
        """Change memo; returns the writer's clock just before its memo_set call."""
        t0, t1 = map(float, (await self.ask(f"set {key} {json.dumps(value)}")).split())
        self.calls.append(t1 - t0)
        return t0

    async def reads(self) -> int:
        """memo's own count of the resources/read requests it answered."""
        return int(await self.ask("stats"))


def writer(url: str) -> AbstractAsyncContextManager[Writer]:
    return line_process([sys.executable, str(HERE / "_writer.py"), url], Writer)


class Polling(Protocol):
    """A client that reads every ``period`` s from ``start`` and puts the time it saw each
    change on ``detections``."""

    start: float
    period: float
    detections: MemoryObjectReceiveStream[float]


async def poll_latency(
    poller: Polling, change: Callable[[int], Awaitable[float]], phases: int
) -> list[float]:
    """The poller's latency for a change (``change(k)``, which returns the writer's clock before
    its call) made at each phase (k + 0.5) / ``phases`` of its period."""
    latencies: list[float] = []
    ready_after = time.monotonic()
    for k in range(phases):
        # The first period start at which phase k is still ahead (the last change was seen).
        phase = (k + 0.5) / phases * poller.period
        n = int((ready_after - poller.start) // poller.period)
        when = poller.start + n * poller.period + phase
        if when < ready_after + 0.005:
            when += poller.period
        await anyio.sleep(when - time.monotonic())  # pacing the writer: a bench, not a wait on a condition
        t0 = await change(k)
        with anyio.fail_after(10):
            detected = await poller.detections.receive()
        latencies.append(detected - t0)
        ready_after = detected
    return latencies


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def row(
    label: str,
    value: float,
    baseline: float | None,
    unit: str,
    target: str = "",
    *,
    lower_is_better: bool = True,
) -> None:
    """One figure beside its baseline (measured in the same run) and the ratio."""
    ratio = ""
    if baseline and value:
        ratio = f"{(baseline / value if lower_is_better else value / baseline):8.1f}x"
    base = f"{baseline:10.2f} {unit}" if baseline is not None else " " * 13
    print(f"  {label:<38} {value:10.2f} {unit}   baseline {base}   {ratio:>9}   {target}", flush=True)
