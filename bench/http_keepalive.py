"""Streamable HTTP request latency of our servers on a kept-alive connection.

    python bench/http_keepalive.py           # 400 requests per figure
    python bench/http_keepalive.py --quick   # 100

Every server runs as a real subprocess (``--http 127.0.0.1:0``). Figures:

1. ``tools/list`` p50 / p99 per request on ONE kept-alive connection, from a lean HTTP/1.1 client
   (h11 over a TCP socket, as curl would send it) to each of our servers: memo, files, kcp,
   switchboard (target p50 <= 2 ms). Baselines in the same run: the same request on a fresh
   connection each time (connect + request + close), and the old listener, toggled: the memo
   server whose listening socket is created without ``IPPROTO_TCP``, so asyncio leaves Nagle on
   and the response body waits for the client's delayed ACK (the 43 ms stall).
2. ``McpResourceSource.http(url).call_tool("memo_get")`` p50: the library's own client (the SDK over
   httpx2), against the fixed server and against the old listener.

The lean client writes each request in one send, so it never waits on Nagle itself; httpx2
(anyio) sets TCP_NODELAY on the client side anyway. What remains after the fix is CPU: the MCP
server's request handling and, for figure 2, the SDK client's own.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import h11

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from asyncai_watch.http_auth.local import find_token
from asyncai_watch.mcp.client import McpResourceSource
from asyncai_watch.server.http import running_http_server

ROOT = Path(__file__).resolve().parent.parent
PROTOCOL = "2026-07-28"
TARGET_P50 = 0.002

# The pre-fix listener, toggled for the baseline: serve_http's socket() without IPPROTO_TCP.
OLD_LISTENER = """
import runpy, socket, sys, types
import asyncai_watch.server.http as http
plain = types.ModuleType("socket")
plain.__dict__.update(socket.__dict__)
plain.socket = lambda family, kind, proto=0: socket.socket(family, kind)
http.socket = plain
sys.argv = ["asyncai-mcp-simple", *sys.argv[1:]]
runpy.run_module("asyncai_servers.memo", run_name="__main__")
"""


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.3f} ms"


class LeanClient:
    """HTTP/1.1 over one TCP connection with h11: a request is one write, the response read whole."""

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self.stream = stream
        self.conn = h11.Connection(h11.CLIENT)

    async def post(self, host: str, headers: list[tuple[str, str]], body: bytes) -> tuple[int, bytes]:
        req = h11.Request(
            method="POST",
            target="/mcp",
            headers=[("host", host), ("content-length", str(len(body))), *headers],
        )
        await self.stream.send(
            self.conn.send(req)
            + (self.conn.send(h11.Data(data=body)) or b"")
            + (self.conn.send(h11.EndOfMessage()) or b"")
        )
        status, chunks = 0, []
        while True:
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                self.conn.receive_data(await self.stream.receive())
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                self.conn.start_next_cycle()
                return status, b"".join(chunks)
            elif isinstance(event, h11.ConnectionClosed):
                raise RuntimeError("server closed the connection")


def tools_list_request(token: str | None) -> tuple[list[tuple[str, str]], bytes]:
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/list",
            "params": {
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": PROTOCOL,
                    "io.modelcontextprotocol/clientCapabilities": {},
                }
            },
        }
    ).encode()
    headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", PROTOCOL),
        ("mcp-method", "tools/list"),
    ]
    if token:
        headers.append(("authorization", f"Bearer {token}"))
    return headers, body


def host_port(url: str) -> tuple[str, int]:
    hostport = url.split("//", 1)[1].split("/", 1)[0]
    host, _, port = hostport.rpartition(":")
    return host, int(port)


async def kept_alive(url: str, token: str | None, n: int) -> list[float]:
    host, port = host_port(url)
    token = token or find_token(url)  # a loopback server with no token of its own published one
    headers, body = tools_list_request(token)
    samples: list[float] = []
    async with await anyio.connect_tcp(host, port) as stream:
        client = LeanClient(stream)
        for i in range(n + 20):  # 20 warm-up requests
            t0 = time.perf_counter()
            status, answer = await client.post(f"{host}:{port}", headers, body)
            elapsed = time.perf_counter() - t0
            if status != 200 or b'"tools"' not in answer:
                raise RuntimeError(f"{url}: tools/list answered {status}: {answer[:200]!r}")
            if i >= 20:
                samples.append(elapsed)
    return samples


async def fresh(url: str, token: str | None, n: int) -> list[float]:
    host, port = host_port(url)
    token = token or find_token(url)  # a loopback server with no token of its own published one
    headers, body = tools_list_request(token)
    samples: list[float] = []
    for _ in range(n):
        t0 = time.perf_counter()
        async with await anyio.connect_tcp(host, port) as stream:
            status, _answer = await LeanClient(stream).post(f"{host}:{port}", headers, body)
        samples.append(time.perf_counter() - t0)
        if status != 200:
            raise RuntimeError(f"{url}: tools/list answered {status}")
    return samples


async def library_client(url: str, n: int) -> list[float]:
    samples: list[float] = []
    async with McpResourceSource.http(url) as source:
        await source.call_tool("memo_set", {"key": "k", "value": "v"})
        for i in range(n + 20):
            t0 = time.perf_counter()
            await source.call_tool("memo_get", {"key": "k"})
            if i >= 20:
                samples.append(time.perf_counter() - t0)
    return samples


@asynccontextmanager
async def serve(argv: list[str], env: dict[str, str] | None = None) -> AsyncIterator[str]:
    async with running_http_server(argv, env=env, ready_timeout=60) as (url, _proc):
        yield url


async def main(quick: bool) -> None:
    n = 100 if quick else 400
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="http-bench-") as d:
        tmp = Path(d)
        (tmp / "files").mkdir()
        config = tmp / "switchboard.json"
        config.write_text(
            json.dumps(
                {
                    "credentials": [
                        {"name": "a", "token": "bench-token", "queues": ["*"], "attribution": "agent"}
                    ]
                }
            )
        )
        kubeconfig = tmp / "kubeconfig.json"  # tools/list never runs kubectl
        kubeconfig.write_text("{}")
        servers: list[tuple[str, list[str], str | None]] = [
            ("memo", [py, "-m", "asyncai_servers.memo", "--http", "127.0.0.1:0"], None),
            ("files", [py, "-m", "asyncai_servers.files", str(tmp / "files"), "--http", "127.0.0.1:0"], None),
            (
                "kcp",
                [
                    *(py, "-m", "asyncai_servers.kcp", "--kubectl", "false", "--kubeconfig", str(kubeconfig)),
                    *("--http", "127.0.0.1:0"),
                ],
                None,
            ),
            (
                "switchboard",
                [
                    *(py, "-m", "asyncai_servers.switchboard", "--config", str(config)),
                    *("--sqlite", str(tmp / "sb.db"), "--http", "127.0.0.1:0"),
                ],
                "bench-token",
            ),
        ]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        print(f"1. tools/list per request, lean HTTP/1.1 client, {n} requests (target p50 <= 2 ms)")
        print(f"  {'server':<12} {'kept-alive p50':>16} {'p99':>12} {'fresh conn p50':>16} {'ratio':>7}")
        for name, argv, token in servers:
            async with serve(argv, env) as url:
                kept = await kept_alive(url, token, n)
                new = await fresh(url, token, n)
            p50 = statistics.median(kept)
            met = "met" if p50 <= TARGET_P50 else "MISSED"
            print(
                f"  {name:<12} {ms(p50):>16} {ms(pct(kept, 99)):>12} {ms(statistics.median(new)):>16}"
                f" {p50 / statistics.median(new):7.3f}  {met}"
            )
        async with serve([py, "-c", OLD_LISTENER, "--http", "127.0.0.1:0"], env) as url:
            old = await kept_alive(url, None, max(20, n // 8))
            old_lib = await library_client(url, max(20, n // 8))
        async with serve(servers[0][1], env) as url:
            lib = await library_client(url, n)
        print(
            f"  {'memo, old listener (Nagle on)':<30} kept-alive p50 {ms(statistics.median(old))}"
            f"  p99 {ms(pct(old, 99))}"
        )
        print("2. McpResourceSource.http call_tool(memo_get) p50, kept-alive (SDK client over httpx2)")
        print(
            f"  fixed server {ms(statistics.median(lib))}  p99 {ms(pct(lib, 99))}   "
            f"old listener {ms(statistics.median(old_lib))}   ratio {statistics.median(lib) / statistics.median(old_lib):.3f}"
        )
        print(f"  load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="short run")
    anyio.run(main, parser.parse_args().quick)
