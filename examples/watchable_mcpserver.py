"""An ordinary decorator-style `MCPServer` (the `mcp` SDK 2.3), made watchable by one line.

    python watchable_mcpserver.py                        # stdio
    python watchable_mcpserver.py --http 127.0.0.1:8765  # http://127.0.0.1:8765/mcp
    python watchable_mcpserver.py --stdio --http 127.0.0.1:0 [--ready-file PATH]   # both, one store

Clients of both MCP eras can watch `notes://index` and `notes://{name}`: 2026-07-28 ones with
`subscriptions/listen`, 2025-era ones with `resources/subscribe`. `note_set` changes them.
"""

from __future__ import annotations

import argparse
import contextlib
import json

import anyio
from mcp.server.mcpserver import MCPServer

from asyncai_watch.server import watchable
from asyncai_watch.server.http import parse_host_port, serve_http

notes: dict[str, str] = {}
mcp = MCPServer("notes")
watch = watchable(mcp, changes={"note_set": ["notes://index", "notes://{name}"]})  # the one line


@mcp.resource("notes://index", mime_type="application/json")
def index() -> str:
    return json.dumps(sorted(notes))


@mcp.resource("notes://{name}", mime_type="application/json")
def note(name: str) -> str:
    return json.dumps({"name": name, "text": notes.get(name)})


@mcp.tool()
def note_set(name: str, text: str) -> str:
    """Write a note."""
    notes[name] = text
    return "ok"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stdio", action="store_true", help="serve stdio (the default without --http)")
    parser.add_argument("--http", metavar="HOST:PORT", help="serve Streamable HTTP at http://HOST:PORT/mcp")
    parser.add_argument("--ready-file", metavar="PATH", help="with --http: write 'READY <url>' to PATH")
    args = parser.parse_args()
    if not args.http:
        await mcp.run_stdio_async()
        return
    host, port = parse_host_port(args.http)
    app = mcp.streamable_http_app(host=host)
    up, stop = anyio.Event(), anyio.Event()

    def announced(url: str) -> None:
        if args.ready_file:
            with open(args.ready_file, "w", encoding="utf-8") as out:
                out.write(f"READY {url}\n")
        up.set()

    async with anyio.create_task_group() as tg:

        async def http() -> None:
            # Open listen streams end at shutdown (uvicorn would wait on them), then stdio ends too.
            await serve_http(app, host, port, on_ready=announced, on_shutdown=watch.registry.close, stop=stop)
            tg.cancel_scope.cancel()

        tg.start_soon(http)
        await up.wait()  # HTTP is up before stdio answers
        if args.stdio:
            await mcp.run_stdio_async()
            stop.set()  # the stdio client went away: stop HTTP gracefully


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C on stdio alone
        anyio.run(main)
