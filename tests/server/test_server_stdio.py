"""Servers over real stdio (the memo server and the ``asyncai-watch serve`` bridge, both on
``asyncai_watch.server.stdio``): large requests answered, and every line that is not a JSON-RPC
message answered with its JSON-RPC error and id, the server carrying on."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from tests.support import ROOT

pytestmark = pytest.mark.anyio

WAIT = 60  # seconds: a bound on any one awaited answer (a large request on a busy machine), never a sleep
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
MEMO = [sys.executable, "-m", "asyncai_servers.memo"]
BRIDGE = [sys.executable, "-m", "asyncai_watch", "serve", "--server", "memo=" + shlex.join(MEMO)]
SERVERS = pytest.mark.parametrize("argv", [MEMO, BRIDGE], ids=["memo", "bridge"])
MIB = 1 << 20


class Wire:
    """A server process spoken to in raw JSON-RPC lines."""

    def __init__(self, process: anyio.abc.Process) -> None:
        assert process.stdin is not None
        assert process.stdout is not None
        self._stdin = process.stdin
        self._stdout = BufferedByteReceiveStream(process.stdout)

    async def send_line(self, line: bytes) -> None:
        await self._stdin.send(line + b"\n")

    async def send(self, message: dict[str, Any]) -> None:
        await self.send_line(json.dumps({"jsonrpc": "2.0", **message}).encode())

    async def answer(self) -> dict[str, Any]:
        """The next message the server writes that is a response (notifications skipped)."""
        with anyio.fail_after(WAIT):
            while True:
                message: dict[str, Any] = json.loads(await self._stdout.receive_until(b"\n", 64 * MIB))
                if "id" in message:
                    return message

    async def initialize(self) -> None:
        client = {"name": "raw", "version": "0"}
        params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client}
        await self.send({"id": 0, "method": "initialize", "params": params})
        assert "result" in await self.answer()
        await self.send({"method": "notifications/initialized"})


@asynccontextmanager
async def spoken_to(argv: list[str]) -> AsyncIterator[Wire]:
    async with await anyio.open_process(argv, env=ENV, stderr=subprocess.DEVNULL) as process:
        wire = Wire(process)
        with anyio.fail_after(WAIT):
            await wire.initialize()
        yield wire
        assert process.stdin is not None
        await process.stdin.aclose()  # a closed stdin ends the server, which exits 0
        with anyio.fail_after(WAIT):
            assert await process.wait() == 0


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@SERVERS
async def test_every_bad_line_gets_its_jsonrpc_error_with_its_id_and_the_server_goes_on(
    argv: list[str],
) -> None:
    bad: list[tuple[str, int, int | str | None]] = [
        # (line, the error code, the id the answer carries)
        ('{"jsonrpc": "2.0", "id": 10, "method": "ping", "params": {', -32700, 10),
        (f'{{"jsonrpc": "2.0", "id": 11, "method": "ping", "params": {{"x": {nested(1000)}}}}}', -32700, 11),
        (
            f'{{"jsonrpc": "2.0", "id": 12, "method": "ping", "params": {{"x": {nested(100_000)}}}}}',
            -32700,
            12,
        ),
        ("hello, server", -32700, None),
        ('{"jsonrpc": "2.0", "id": "thirteen", "params": {}}', -32600, "thirteen"),
        ("[1, 2]", -32600, None),
    ]
    async with spoken_to(argv) as wire:
        for line, _, _ in bad:
            await wire.send_line(line.encode())
        await wire.send({"id": 20, "method": "ping"})
        for _, code, request_id in bad:
            answer = await wire.answer()
            assert answer["id"] == request_id, answer
            assert answer["error"]["code"] == code, answer
            assert len(answer["error"]["message"]) < 300, answer  # says why, never quotes the line
        assert await wire.answer() == {"jsonrpc": "2.0", "id": 20, "result": {}}


@SERVERS
async def test_a_large_request_is_answered_and_so_is_the_one_after_it(argv: list[str]) -> None:
    pad = "é→x" * (2 * MIB)  # 12 MiB of UTF-8 on one line: the stepped decode
    async with spoken_to(argv) as wire:
        await wire.send({"id": 2, "method": "ping", "params": {"_meta": {"pad": pad}}})
        await wire.send({"id": 3, "method": "ping"})
        answers = [await wire.answer(), await wire.answer()]
    assert sorted(a["id"] for a in answers) == [2, 3]
    assert all(a["result"] == {} for a in answers), answers


async def test_a_large_value_reaches_the_memo_whole() -> None:
    value = "".join(f'{i:07d}é→\\"' for i in range(MIB // 2))  # numbered, so a torn copy cannot match
    async with spoken_to(MEMO) as wire:
        call = {"name": "memo_set", "arguments": {"key": "big", "value": value}}
        await wire.send({"id": 5, "method": "tools/call", "params": call})
        assert "result" in await wire.answer()
        await wire.send({"id": 6, "method": "resources/read", "params": {"uri": "memo://notes"}})
        (content,) = (await wire.answer())["result"]["contents"]
    assert json.loads(content["text"]) == {"big": value}
