"""A server on the official Python MCP SDK 1.x (``mcp`` 1.30, FastMCP), as most Python servers
run today: it negotiates MCP 2025-11-25 (``initialize``) and, though it registers a
``resources/subscribe`` handler, advertises ``resources.subscribe: false`` (the 1.x SDK always
does). Run by the interpreter of its own virtualenv (``scripts/fetch_py_peers.py``), never ours.

One counter, ``peer://counter`` (``{"count": N}``), shared by every session; the tool ``bump``
adds one and sends ``notifications/resources/updated`` to every session subscribed to it.

    python py_v1_server.py [--stdio] [--http HOST:PORT] [--mount] [--ready-file PATH]

``--http`` serves Streamable HTTP and prints ``READY http://HOST:PORT/mcp`` on stderr once
listening (also written to ``--ready-file``, before stdio is served). ``--mount`` serves the
SDK's app the way its docs show for an existing Starlette app, ``Mount("/mcp", app)``, so
``/mcp`` answers ``307`` to ``/mcp/``. With ``--stdio`` and ``--http`` both, they share the counter.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
import uvicorn
from mcp.server.fastmcp import FastMCP
from mcp.server.session import ServerSession
from starlette.applications import Starlette
from starlette.routing import Mount

URI = "peer://counter"
state = {"count": 0}
subscribed: dict[ServerSession, set[str]] = {}

mcp = FastMCP("py-v1-peer")
mcp.settings.streamable_http_path = "/mcp"


@mcp.resource(URI, mime_type="application/json")
def counter() -> str:
    return json.dumps(state)


@mcp.tool()
async def bump() -> str:
    """Add one to peer://counter and notify its subscribers."""
    state["count"] += 1
    for session, uris in list(subscribed.items()):
        if URI in uris:
            try:
                await session.send_resource_updated(URI)  # type: ignore[arg-type]
            except Exception:  # a session that went away
                subscribed.pop(session, None)
    return str(state["count"])


@mcp._mcp_server.subscribe_resource()  # type: ignore[misc, untyped-decorator]
async def subscribe(uri: Any) -> None:
    subscribed.setdefault(mcp._mcp_server.request_context.session, set()).add(str(uri))


@mcp._mcp_server.unsubscribe_resource()  # type: ignore[misc, untyped-decorator]
async def unsubscribe(uri: Any) -> None:
    subscribed.get(mcp._mcp_server.request_context.session, set()).discard(str(uri))


def http_app(mount: bool) -> Any:
    if not mount:
        return mcp.streamable_http_app()
    mcp.settings.streamable_http_path = "/"

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        async with mcp.session_manager.run():
            yield

    inner = mcp.streamable_http_app()
    return Starlette(routes=[Mount("/mcp", app=inner)], lifespan=lifespan)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stdio", action="store_true")
    parser.add_argument("--http")
    parser.add_argument("--mount", action="store_true")
    parser.add_argument("--ready-file")
    args = parser.parse_args()
    async with anyio.create_task_group() as tg:
        if args.http:
            host, _, port = args.http.rpartition(":")
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, int(port)))
            sock.listen(128)  # connections wait in the backlog until uvicorn accepts them
            config = uvicorn.Config(http_app(args.mount), log_level="warning", lifespan="on")
            tg.start_soon(uvicorn.Server(config).serve, [sock])
            ready = f"READY http://{host}:{sock.getsockname()[1]}/mcp"
            if args.ready_file:
                await anyio.Path(args.ready_file).write_text(ready + "\n", encoding="utf-8")
            print(ready, file=sys.stderr, flush=True)
        if args.stdio:
            await mcp.run_stdio_async()
            tg.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(main)
