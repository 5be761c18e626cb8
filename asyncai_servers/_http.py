"""Serve an ASGI app (an MCP Streamable HTTP endpoint) on a socket we bind ourselves.

Binding first lets ``--http 127.0.0.1:0`` pick a free port, and lets us print
one ready line, ``READY http://HOST:PORT/mcp``, to stderr once the socket
accepts connections: tests and supervisors wait for that line (a signal) rather
than probing the port.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable
from typing import Any, TextIO

import uvicorn

__all__ = ["parse_host_port", "serve_http"]


def parse_host_port(value: str) -> tuple[str, int]:
    """Parse ``HOST:PORT`` (``[::1]:8080`` for IPv6); raise ValueError naming the accepted form."""
    host, sep, port_text = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(
            f"--http expects HOST:PORT (e.g. 127.0.0.1:8765, port 0 = any free port), got {value!r}"
        )
    return host, int(port_text)


async def serve_http(
    app: Any,
    host: str,
    port: int,
    *,
    path: str = "/mcp",
    ready: TextIO | None = None,
    on_shutdown: Callable[[], None] | None = None,
) -> None:
    """Run ``app`` until cancelled, announcing ``READY <url>`` on ``ready`` (stderr by default).

    ``on_shutdown`` runs when uvicorn starts shutting down (SIGTERM/SIGINT), before it waits for open
    connections: a server with long-lived listen streams ends them there, or shutdown would wait forever.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.setblocking(False)
    bound_port = sock.getsockname()[1]
    server = _AnnouncingServer(uvicorn.Config(app, log_level="warning", lifespan="on"))
    shown_host = f"[{host}]" if family == socket.AF_INET6 else host
    server.ready_line = f"READY http://{shown_host}:{bound_port}{path}"
    server.ready_out = ready if ready is not None else sys.stderr
    server.on_shutdown = on_shutdown
    await server.serve([sock])


class _AnnouncingServer(uvicorn.Server):
    """uvicorn has no started event; announce right after its startup returns."""

    ready_line: str = ""
    ready_out: TextIO = sys.stderr
    on_shutdown: Callable[[], None] | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if not self.should_exit:
            print(self.ready_line, file=self.ready_out, flush=True)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.on_shutdown is not None:
            self.on_shutdown()
        await super().shutdown(sockets=sockets)
