"""The reference servers' stdio transport (``asyncai_watch.server.stdio``): stdout is written on the event loop.

Each message is written with ``os.write`` onto a private, non-blocking duplicate of fd 1; a full
pipe parks the writing task on writability, never the loop. fd 1 itself points at stderr while
serving, so stray output from handlers and their children misses the wire.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import pytest

from asyncai_watch.server.stdio import _Writer
from tests.support import ROOT, SUPPORT
from tests.support.local_token import local_client

pytestmark = pytest.mark.anyio

WAIT = 30  # seconds: a bound on any one awaited event, never a sleep
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
ECHO = [sys.executable, str(SUPPORT / "stdio_echo_server.py")]
MEMO = [sys.executable, "-m", "asyncai_servers.memo"]
MIB = 1 << 20


def big_text(size: int) -> str:
    """``size`` characters, multi-byte ones among them, each stretch numbered so a torn or
    reordered copy cannot compare equal."""
    pattern = "".join(f"{i:07d}é→" for i in range(size // 9 + 1))
    return pattern[:size]


class Lines:
    """Lines read from a descriptor on the event loop, ``chunk`` bytes per read."""

    def __init__(self, fd: int, chunk: int = 1 << 16) -> None:
        self._fd = fd
        self._chunk = chunk
        self._buf = bytearray()
        self.eof = False

    async def _more(self) -> None:
        await anyio.wait_readable(self._fd)
        data = os.read(self._fd, self._chunk)
        self._buf += data
        self.eof = not data

    async def line(self) -> bytes:
        while b"\n" not in self._buf:
            if self.eof:
                raise EOFError(f"no whole line before EOF: {bytes(self._buf[:200])!r}")
            await self._more()
        line, _, rest = bytes(self._buf).partition(b"\n")
        self._buf = bytearray(rest)
        return line

    async def rest(self) -> bytes:
        while not self.eof:
            await self._more()
        rest, self._buf = bytes(self._buf), bytearray()
        return rest


@asynccontextmanager
async def spawned(argv: list[str], **options: Any) -> AsyncIterator[tuple[anyio.abc.Process, int]]:
    """``argv`` with its stdout on a pipe of ours; yields the process and the pipe's read end."""
    out_r, out_w = os.pipe()
    try:
        process = await anyio.open_process(argv, stdout=out_w, **options)
    finally:
        os.close(out_w)
    try:
        yield process, out_r
    finally:
        if process.returncode is None:
            process.kill()
        with anyio.CancelScope(shield=True):
            await process.aclose()
        os.close(out_r)


def nonblocking_pipe() -> tuple[int, int]:
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)  # as the transport sets its duplicate of fd 1
    return read_fd, write_fd


async def test_a_message_larger_than_the_pipe_arrives_whole_and_in_order_to_a_slow_reader() -> None:
    big, small = big_text(MIB) + "\n", '{"after": "the big one"}\n'
    read_fd, write_fd = nonblocking_pipe()
    try:
        writer = _Writer(write_fd)
        got = bytearray()
        expected = (big + small).encode()
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:

                async def write_both() -> None:
                    await writer.write(big.encode())
                    await writer.write(small.encode())

                tg.start_soon(write_both)
                while len(got) < len(expected):  # a slow reader: 4 KiB at a time, letting others run
                    await anyio.wait_readable(read_fd)
                    got += os.read(read_fd, 4096)
                    await anyio.lowlevel.checkpoint()
        assert got == expected
    finally:
        os.close(read_fd)
        os.close(write_fd)


async def test_a_full_pipe_parks_only_the_writing_task() -> None:
    message = big_text(MIB) + "\n"
    read_fd, write_fd = nonblocking_pipe()
    try:
        writer = _Writer(write_fd)
        written = anyio.Event()
        other_ran = anyio.Event()
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:

                async def write() -> None:
                    await writer.write(message.encode())
                    written.set()

                async def other() -> None:  # another task on the same loop, e.g. an HTTP client's
                    for _ in range(3):
                        await anyio.lowlevel.checkpoint()
                    other_ran.set()

                tg.start_soon(write)
                tg.start_soon(other)
                await other_ran.wait()
                await anyio.wait_all_tasks_blocked()  # the writer is waiting, not spinning
                assert not written.is_set()  # nobody read: the message cannot all be in the pipe
                got = bytearray()
                while not written.is_set() or len(got) < len(message.encode()):
                    await anyio.wait_readable(read_fd)
                    got += os.read(read_fd, 1 << 16)
        assert got == message.encode()
    finally:
        os.close(read_fd)
        os.close(write_fd)


async def test_stray_output_while_serving_misses_the_wire_and_fd_1_is_restored() -> None:
    messages = [{"jsonrpc": "2.0", "id": i, "method": "ping"} for i in (1, 2)]
    # sys.stdout on a pipe is block-buffered, as a server's is, unless PYTHONUNBUFFERED says otherwise
    env = {name: value for name, value in ENV.items() if name != "PYTHONUNBUFFERED"}
    stderr = bytearray()
    async with spawned(ECHO, env=env) as (process, out_r):
        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:

                async def drain() -> None:
                    assert process.stderr is not None
                    async for chunk in process.stderr:
                        stderr.extend(chunk)

                tg.start_soon(drain)
                assert process.stdin is not None
                wire = Lines(out_r)
                for message in messages:
                    await process.stdin.send(json.dumps(message).encode() + b"\n")
                    assert json.loads(await wire.line()) == message  # the echo, and nothing before it
                await process.stdin.aclose()
                rest = await wire.rest()
                assert await process.wait() == 0
    text = stderr.decode(errors="replace")
    # After serving, fd 1 is the wire again, blocking as it was; the print still buffered at the
    # end of serving went to stderr, not out here after the last message.
    assert rest == b"after serving, blocking=True\n", text
    for stray in ("stray print", "stray flushed print", "stray os.write", "stray child"):
        assert text.count(stray + "\n") == len(messages), text
    assert "Traceback" not in text, text


async def test_a_stalled_stdio_client_does_not_stop_http_clients(tmp_path: Path) -> None:
    """memo --also-http: its stdio client stops reading mid-response; HTTP is still answered."""
    big = big_text(MIB)
    ready = tmp_path / "ready"
    os.mkfifo(ready)  # reading it waits for the server's READY line: a signal, not a probe
    argv = [*MEMO, "--also-http", "127.0.0.1:0", "--ready-file", str(ready)]
    async with spawned(argv, env=ENV, stdin=subprocess.PIPE, stderr=None) as (process, out_r):
        assert process.stdin is not None
        wire = Lines(out_r)

        async def send(message: dict[str, Any]) -> None:
            assert process.stdin is not None
            await process.stdin.send(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")

        with anyio.fail_after(WAIT):
            url = (await anyio.to_thread.run_sync(ready.read_text)).split(" ", 1)[1].strip()
            params = {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            }
            await send({"id": 1, "method": "initialize", "params": params})
            assert "result" in json.loads(await wire.line())
            await send({"method": "notifications/initialized"})
        async with local_client(url, cache=None) as http:
            with anyio.fail_after(WAIT):
                assert not (await http.call_tool("memo_set", {"key": "big", "value": big})).is_error
                await send({"id": 2, "method": "resources/read", "params": {"uri": "memo://notes"}})
                # The answer (over 1 MiB) has begun; nobody reads it, so the pipe is full and stays so.
                await anyio.wait_readable(out_r)
                for n in range(3):
                    result = await http.call_tool("memo_set", {"key": "n", "value": n})
                    assert not result.is_error, result
                answer = json.loads(await wire.line())  # the stdio client reads again: all of it arrives
        assert answer["id"] == 2, answer
        (content,) = answer["result"]["contents"]
        assert json.loads(content["text"]) == {"big": big}
        with anyio.fail_after(WAIT):
            await process.stdin.aclose()
            assert await process.wait() == 0
