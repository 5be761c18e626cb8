"""Every connection our HTTP servers accept has TCP_NODELAY set.

Without it, h11 writes a response's headers and body as two segments and Nagle holds the body
until the client's delayed ACK (40 ms on Linux), on every request of a kept-alive connection:
the 43 ms per request that capped the switchboard at ~130 creates/s. asyncio sets TCP_NODELAY
on an accepted connection only when the listening socket says it is TCP, so this checks the
accepted socket itself (found by its addresses among this process's file descriptors), while a
real request is in flight through :func:`serve_http`.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

import anyio
import pytest

from asyncai_watch.server.http import serve_http
from asyncai_watch.server.policy import HttpPolicy

OPEN = HttpPolicy(insecure_no_auth=True)
"""These tests speak raw HTTP about sockets and timers, not authentication."""

pytestmark = pytest.mark.anyio


def _accepted_socket_nodelay(local: tuple[str, int], peer: tuple[str, int]) -> int | None:
    """TCP_NODELAY of this process's socket bound to ``local`` and connected to ``peer``."""
    for name in os.listdir("/proc/self/fd"):
        try:
            dup = os.dup(int(name))
        except OSError:
            continue
        try:
            sock = socket.socket(fileno=dup)
        except OSError:  # not a socket
            os.close(dup)
            continue
        with sock:
            try:
                if sock.getsockname()[:2] == local and sock.getpeername()[:2] == peer:
                    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            except OSError:  # not a connected inet socket
                continue
    return None


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    while (await receive()).get("more_body"):
        pass
    server, client = tuple(scope["server"]), tuple(scope["client"])
    body = json.dumps({"nodelay": _accepted_socket_nodelay(server, client)}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def request(port: int) -> Any:
    """Two requests on one kept-alive connection (the second is where the stall showed)."""
    answers = []
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        for _ in range(2):
            await stream.send(b"GET /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
            data = b""
            while b"}" not in data:
                data += await stream.receive()
            answers.append(json.loads(data.partition(b"\r\n\r\n")[2]))
    return answers


async def test_accepted_connections_have_tcp_nodelay() -> None:
    ready, stop = anyio.Event(), anyio.Event()
    urls: list[str] = []
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:

            def on_ready(url: str) -> None:
                urls.append(url)
                ready.set()

            with open(os.devnull, "w") as quiet:  # noqa: ASYNC230 - the READY line, once
                tg.start_soon(
                    lambda: serve_http(
                        app, "127.0.0.1", 0, ready=quiet, on_ready=on_ready, stop=stop, policy=OPEN
                    )
                )
                await ready.wait()
                port = int(urls[0].rsplit(":", 1)[1].split("/")[0])
                answers = await request(port)
                stop.set()
    assert answers == [{"nodelay": 1}, {"nodelay": 1}]


async def test_an_idle_http_server_has_no_timer_and_stops_on_its_exit_signal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """uvicorn's own main loop wakes every 100 ms to look for an exit (polling); ours waits for
    it. Any sleep in uvicorn's server module would be that tick: it fails the test. The server
    still serves, and the exit uvicorn's signal handler asks for (``should_exit``, set on SIGTERM)
    ends it."""
    import uvicorn.server

    serving = True
    real_sleep = uvicorn.server.asyncio.sleep

    async def no_tick(delay: float, *args: Any) -> None:
        # While serving; uvicorn's shutdown still waits for open connections in its own steps.
        assert not serving, f"uvicorn's main loop slept {delay} s: an idle server must not tick"
        await real_sleep(delay, *args)

    monkeypatch.setattr(uvicorn.server.asyncio, "sleep", no_tick)
    servers: list[uvicorn.Server] = []
    real_init = uvicorn.Server.__init__

    def remember(self: uvicorn.Server, config: uvicorn.Config) -> None:
        real_init(self, config)
        servers.append(self)

    monkeypatch.setattr(uvicorn.Server, "__init__", remember)
    ready = anyio.Event()
    urls: list[str] = []

    def on_ready(url: str) -> None:
        urls.append(url)
        ready.set()

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            with open(os.devnull, "w") as quiet:  # noqa: ASYNC230 - the READY line, once
                tg.start_soon(
                    lambda: serve_http(app, "127.0.0.1", 0, ready=quiet, on_ready=on_ready, policy=OPEN)
                )
                await ready.wait()
                port = int(urls[0].rsplit(":", 1)[1].split("/")[0])
                assert await request(port) == [{"nodelay": 1}, {"nodelay": 1}]
                (server,) = servers
                serving = False
                server.should_exit = True  # what uvicorn's SIGTERM handler sets
    # The task group ended: serve_http returned after the exit, with no tick.
