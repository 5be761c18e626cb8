"""``asyncai-watch`` run as a subprocess: `cli` (a running command, stdout by `Lines`), `run_cli` (one that ends)."""

from __future__ import annotations

import shlex
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.abc

CLI = [sys.executable, "-m", "asyncai_watch"]
MEMO = f"{shlex.quote(sys.executable)} -m asyncai_servers.memo"
WAIT = 60  # seconds: generous, the CLI starts a Python and a server on 2 shared cores


class Lines:
    """A process's stdout, line by line, awaited (never polled)."""

    def __init__(self, stream: anyio.abc.ByteReceiveStream) -> None:
        self._stream = stream
        self._buf = b""

    async def next(self) -> str:
        with anyio.fail_after(WAIT):
            while b"\n" not in self._buf:
                self._buf += await self._stream.receive()
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode()


@asynccontextmanager
async def cli(
    *args: str, env: dict[str, str] | None = None
) -> AsyncIterator[tuple[anyio.abc.Process, Lines]]:
    async with await anyio.open_process([*CLI, *args], env=env) as proc:
        assert proc.stdout is not None
        try:
            yield proc, Lines(proc.stdout)
        finally:
            if proc.returncode is None:
                proc.kill()


async def stderr_of(proc: anyio.abc.Process) -> str:
    assert proc.stderr is not None
    chunks = []
    with anyio.fail_after(WAIT):
        async for chunk in proc.stderr:
            chunks.append(chunk)
    return b"".join(chunks).decode()


async def wait_until_watching(proc: anyio.abc.Process) -> None:
    """The CLI says "watching ..." on stderr once the watch is up (its baseline is taken)."""
    assert proc.stderr is not None
    buf = b""
    with anyio.fail_after(WAIT):
        while b"watching" not in buf:
            buf += await proc.stderr.receive()


async def run_cli(*args: str) -> tuple[int, str, str]:
    with anyio.fail_after(WAIT):
        done = await anyio.run_process([*CLI, *args], check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()
