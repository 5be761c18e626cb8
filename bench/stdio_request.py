"""A 50 MB request to a server over stdio is answered in about the time its parse takes.

    python bench/stdio_request.py            # 50 MB
    python bench/stdio_request.py --quick    # 20 MB

The client writes one ``ping`` whose ``_meta`` carries the given size of text, then a plain
``ping``, to ``asyncai-watch serve`` (and to the memo server), both over stdio with the server
kit's transport (``asyncai_watch.server.stdio``). The figures are how long after the first byte
was written each answer arrives.

Baseline, measured in the same run: parsing the same line alone in this process, the way the
transport does it (``read_message``: the stepped decode, then the SDK's model) and the way the
SDK's own reader does (``validate_json``, one call). Before the shared line reader, the servers'
stdio re-copied the partial line on every 64 KiB read: a 20 MB request was answered after 12 s,
a 50 MB one after 78 s, and the ping after it no sooner.

Target: the large request answered within 3x the parse alone (the rest is the pipe: the client
writes 50 MB through it while the server reads), the ping right after it.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
from anyio.streams.buffered import BufferedByteReceiveStream

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from asyncai_watch.jsonrpc_framing import read_message

MEMO = [sys.executable, "-m", "asyncai_servers.memo"]
SERVERS = {
    "asyncai-watch serve": [
        sys.executable,
        "-m",
        "asyncai_watch",
        "serve",
        "--server",
        "memo=" + shlex.join(MEMO),
    ],
    "memo server": MEMO,
}
TARGET = 3.0


def request_line(megabytes: int) -> bytes:
    pad = "x" * (megabytes * 1_000_000)
    message = {"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {"_meta": {"pad": pad}}}
    return json.dumps(message).encode() + b"\n"


async def answered(argv: list[str], line: bytes) -> tuple[float, float]:
    """Seconds from the first byte written to the large request's answer, and to the ping's."""
    async with await anyio.open_process(argv, stderr=subprocess.DEVNULL) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        stdin = process.stdin
        stdout = BufferedByteReceiveStream(process.stdout)

        async def answer() -> dict[str, Any]:
            while True:
                message: dict[str, Any] = json.loads(await stdout.receive_until(b"\n", 1 << 20))
                if "id" in message:
                    return message

        client = {"name": "bench", "version": "0"}
        params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client}
        with anyio.fail_after(60):
            await stdin.send(
                json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}).encode()
                + b"\n"
            )
            await answer()
            await stdin.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        times: dict[int, float] = {}
        with anyio.fail_after(600):
            async with anyio.create_task_group() as tg:
                start = time.perf_counter()

                async def send() -> None:
                    await stdin.send(line)
                    await stdin.send(b'{"jsonrpc": "2.0", "id": 3, "method": "ping"}\n')

                tg.start_soon(send)
                while len(times) < 2:
                    got = await answer()
                    assert got.get("result") == {}, str(got)[:300]
                    times[got["id"]] = time.perf_counter() - start
        await stdin.aclose()
        with anyio.fail_after(60):
            await process.wait()
    return times[2], times[3]


def parse_alone(line: bytes) -> tuple[float, float]:
    """Seconds to parse ``line`` as the transport does, and as the SDK's reader does (best of 3)."""
    ours, sdk = [], []

    async def parse() -> None:  # returns nothing: asyncio would repr a 50 MB result
        await read_message(line[:-1])

    for _ in range(3):
        start = time.perf_counter()
        anyio.run(parse)
        ours.append(time.perf_counter() - start)
        start = time.perf_counter()
        types.jsonrpc_message_adapter.validate_json(line[:-1], by_name=False)
        sdk.append(time.perf_counter() - start)
    return min(ours), min(sdk)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--mb", type=int, default=50, help="request size in MB (default 50)")
    parser.add_argument("--quick", action="store_true", help="a 20 MB request")
    args = parser.parse_args()
    if args.quick:
        args.mb = 20
    line = request_line(args.mb)
    ours, sdk = parse_alone(line)
    print(
        f"stdio request of {args.mb} MB: answered vs parsing the line alone (target <= {TARGET:g}x the parse)"
    )
    print(f"  {'parse alone: read_message (the transport)':<44} {ours:8.2f} s")
    print(f"  {'parse alone: validate_json (the SDK reader)':<44} {sdk:8.2f} s")
    for name, argv in SERVERS.items():
        big, ping = anyio.run(answered, argv, line)
        verdict = "ok" if big <= TARGET * ours else "MISSED"
        print(
            f"  {name + ': request answered':<44} {big:8.2f} s   {big / ours:6.1f}x the parse   {verdict}",
            flush=True,
        )
        print(f"  {name + ': the ping after it':<44} {ping:8.2f} s", flush=True)
    print(f"  load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
