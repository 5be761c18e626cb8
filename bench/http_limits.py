"""A legitimate client's tools/list while the memo server is attacked (docs/http-security.md).

    python bench/http_limits.py           # 1,100 half-open connections, 10,000 session attempts
    python bench/http_limits.py --quick   # 1,100 half-open connections, 1,000 session attempts

The memo server runs as a real subprocess (``--http 127.0.0.1:0 --header-timeout 5``, the
default connection cap: half of ``ulimit -n``, at most 1,000). Figures, each against the
baseline measured first in the same run (the idle server), as p50 of ``tools/list`` on a fresh
connection per request (connect, request, close: what a new client pays):

1. slowloris: 1,100 connections held, each having sent half a request's headers. Also: the
   seconds until the server has closed every one of them (target: within the header timeout;
   the ones beyond the connection cap are closed at once to make room).
2. session flood: 10,000 ``initialize`` attempts from one client (source address 127.0.0.2), 16
   at a time; sessions admitted and refused (``--max-sessions-per-client``, 64) are printed,
   then a client at 127.0.0.1 opens a session and runs tools/list.

Target: each p50 under attack <= 2x the idle p50.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
from pathlib import Path

import anyio
import anyio.abc
import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from http_keepalive import fresh, host_port, ms

from asyncai_watch.http_auth.local import local_headers
from asyncai_watch.server.http import running_http_server

HEADER_TIMEOUT = 5.0
HALF_OPEN = 1100
SAMPLES = 200
INITIALIZE = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "b", "version": "1"},
        },
    }
).encode()
HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


def p50(samples: list[float]) -> float:
    return statistics.median(samples)


def line(label: str, figure: float, baseline: float) -> None:
    print(
        f"{label:<52} {ms(figure)}   baseline {ms(baseline)}   ratio {figure / baseline:5.2f}x (target <= 2x)"
    )


async def drained(stream: anyio.abc.SocketStream) -> None:
    try:
        while await stream.receive():
            pass
    except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
        pass


async def slowloris(url: str, baseline: float) -> None:
    host, port = host_port(url)
    held: list[anyio.abc.SocketStream] = []
    try:
        for _ in range(HALF_OPEN):
            stream = await anyio.connect_tcp(host, port)
            await stream.send(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            held.append(stream)
        started = anyio.current_time()
        under = p50(await fresh(url, None, SAMPLES))
        line(f"tools/list p50, {HALF_OPEN:,} half-open connections held", under, baseline)
        with anyio.fail_after(HEADER_TIMEOUT + 60):
            async with anyio.create_task_group() as tg:
                for stream in held:
                    tg.start_soon(drained, stream)
        took = anyio.current_time() - started
        print(
            f"{'all half-open connections closed by the server after':<52} {took:8.2f} s    "
            f"header timeout {HEADER_TIMEOUT:g} s   ratio {took / HEADER_TIMEOUT:5.2f}x (target <= 1x + the requests)"
        )
    finally:
        for stream in held:
            await stream.aclose()


async def session_flood(url: str, attempts: int, baseline: float) -> None:
    codes: dict[int, int] = {}
    authed = {**HEADERS, **(local_headers(url, None, has_auth=False) or {})}  # a client holding the token
    limiter = anyio.CapacityLimiter(16)
    transport = httpx2.AsyncHTTPTransport(local_address="127.0.0.2", limits=httpx2.Limits(max_connections=16))
    async with httpx2.AsyncClient(transport=transport, timeout=60) as attacker:

        async def attempt() -> None:
            async with limiter:
                response = await attacker.post(url, content=INITIALIZE, headers=authed)
                codes[response.status_code] = codes.get(response.status_code, 0) + 1

        async with anyio.create_task_group() as tg:
            for _ in range(attempts):
                tg.start_soon(attempt)
    print(
        f"session flood from 127.0.0.2: {attempts:,} attempts -> HTTP status counts {dict(sorted(codes.items()))}"
    )
    async with httpx2.AsyncClient(timeout=60) as client:
        opened = await client.post(url, content=INITIALIZE, headers=authed)
    print(f"another client's initialize after the flood: HTTP {opened.status_code}")
    under = p50(await fresh(url, None, SAMPLES))
    line(f"tools/list p50 after {attempts:,} session attempts", under, baseline)


async def main(quick: bool) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < HALF_OPEN + 256 <= hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (HALF_OPEN + 256, hard))
    argv = [sys.executable, "-m", "asyncai_servers.memo", "--http", "127.0.0.1:0"]
    argv += ["--header-timeout", str(HEADER_TIMEOUT)]
    async with running_http_server(argv) as (url, _proc):
        await fresh(url, None, 20)  # warm up
        baseline = p50(await fresh(url, None, SAMPLES))
        print(f"{'tools/list p50, idle server (fresh connection each)':<52} {ms(baseline)}")
        await slowloris(url, baseline)
        await session_flood(url, 1000 if quick else 10_000, baseline)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    anyio.run(main, parser.parse_args().quick)
