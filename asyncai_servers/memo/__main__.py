"""``asyncai-mcp-simple`` / ``python -m asyncai_servers.memo``: serve the memo over stdio or HTTP."""

from __future__ import annotations

import argparse
import contextlib
import hmac
import os
import sys
from collections.abc import Awaitable, Callable
from typing import TextIO

import anyio
from starlette.types import ASGIApp, Receive, Scope, Send

from asyncai_servers.memo.server import MemoState, build_server
from asyncai_watch.cli_help import HelpFormatter, examples
from asyncai_watch.server.http import bind_error, parse_host_port, serve_http
from asyncai_watch.server.resumable import streamable_http_app
from asyncai_watch.server.stdio import stdio_server
from asyncai_watch.server.subscriptions import DEFAULT_MAX_URIS


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="asyncai-mcp-simple",
        description="The memo MCP server: memo://notes (a watchable JSON object) and memo_set/memo_get/memo_delete. "
        "Over stdio the memo is private to the client that started it; over --http every client shares it.",
        epilog=examples(
            "asyncai-mcp-simple --http 127.0.0.1:8765   # http://127.0.0.1:8765/mcp, shared by every client",
            "asyncai-mcp-simple                         # stdio: started by its one client",
        ),
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "--bearer-token",
        metavar="TOKEN",
        help="with --http: answer 401 unless a request carries 'Authorization: Bearer TOKEN' "
        "(default: $ASYNCAI_MEMO_TOKEN; unset = no auth)",
    )
    parser.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve MCP Streamable HTTP at http://HOST:PORT/mcp instead of stdio "
        "(port 0 picks a free port; the URL is printed as 'READY <url>' on stderr)",
    )
    parser.add_argument(
        "--also-http",
        metavar="HOST:PORT",
        help="serve stdio AND Streamable HTTP on one shared memo, so a second client can write while the "
        "stdio client watches; HTTP is up before stdio answers",
    )
    parser.add_argument(
        "--max-uris",
        type=int,
        default=DEFAULT_MAX_URIS,
        metavar="N",
        help=f"URIs one subscriptions/listen (or one 2025-era session) may name (default {DEFAULT_MAX_URIS:,}; "
        "about 190 bytes of server memory each)",
    )
    parser.add_argument(
        "--ready-file",
        metavar="PATH",
        help="with --also-http: write 'READY <url>' to PATH once HTTP is up (before stdio answers)",
    )
    return parser


async def _serve_stdio(state: MemoState) -> None:
    server = build_server(state)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


async def _serve_stdio_and_http(
    memo: MemoState, host: str, port: int, ready_file: str | None, token: str | None
) -> None:
    # One memo and one subscription registry behind both transports.
    app: ASGIApp = streamable_http_app(build_server(memo), host=host)
    if token:
        app = _require_bearer(app, token)
    http_up, stop = anyio.Event(), anyio.Event()
    async with anyio.create_task_group() as tg:

        async def http(ready: TextIO) -> None:
            await serve_http(
                app,
                host,
                port,
                ready=ready,
                on_ready=lambda _url: http_up.set(),
                on_shutdown=memo.close_listeners,
                stop=stop,
            )
            # HTTP shut down: after stdio ended (stop), or on Ctrl-C/SIGTERM, which ends stdio too.
            tg.cancel_scope.cancel()

        with open(ready_file or os.devnull, "w", encoding="utf-8") as ready:  # noqa: ASYNC230 - one tiny write
            tg.start_soon(http, ready)
            await http_up.wait()
        await _serve_stdio(memo)  # the stdio client going away ends the process: HTTP stops too
        stop.set()


def _require_bearer(app: ASGIApp, token: str) -> ASGIApp:
    """Wrap ``app`` so HTTP requests without ``Authorization: Bearer <token>`` get 401."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, expected):
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")],
                    }
                )
                await send({"type": "http.response.body", "body": b'{"error": "invalid_token"}'})
                return
        await app(scope, receive, send)

    return guarded


async def _serve_http(memo: MemoState, host: str, port: int, token: str | None) -> None:
    app: ASGIApp = streamable_http_app(build_server(memo), host=host)
    if token:
        app = _require_bearer(app, token)
    # Open listen streams are ended at shutdown; uvicorn would wait on them forever otherwise.
    await serve_http(app, host, port, on_shutdown=memo.close_listeners)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.max_uris < 1:
        _parser().error(f"--max-uris must be >= 1, got {args.max_uris}")
    memo = MemoState(max_uris=args.max_uris)
    if args.ready_file is not None and args.also_http is None:
        _parser().error("--ready-file needs --also-http")
    if args.also_http is not None:
        if args.http is not None:
            _parser().error("use either --http (HTTP only) or --also-http (stdio and HTTP), not both")
        try:
            host, port = parse_host_port(args.also_http)
        except ValueError as exc:
            _parser().error(str(exc).replace("--http", "--also-http"))
        token = args.bearer_token or os.environ.get("ASYNCAI_MEMO_TOKEN")
        return _run_http(args.also_http, _serve_stdio_and_http, memo, host, port, args.ready_file, token)
    if args.http is None:
        if args.bearer_token is not None:
            _parser().error("--bearer-token needs --http or --also-http (stdio has no auth)")
        with contextlib.suppress(KeyboardInterrupt):
            anyio.run(_serve_stdio, memo)
        return 0
    try:
        host, port = parse_host_port(args.http)
    except ValueError as exc:
        _parser().error(str(exc))
    return _run_http(
        args.http, _serve_http, memo, host, port, args.bearer_token or os.environ.get("ASYNCAI_MEMO_TOKEN")
    )


def _run_http(address: str, serve: Callable[..., Awaitable[None]], *args: object) -> int:
    """Run ``serve``; Ctrl-C is a clean exit, and a bind failure (the port is taken) one line, exit 2."""
    try:
        anyio.run(serve, *args)
    except KeyboardInterrupt:
        return 0
    except (OSError, BaseExceptionGroup) as exc:
        error = bind_error(exc)
        if error is None:
            raise
        print(
            f"asyncai-mcp-simple: cannot serve HTTP on {address}: {error.strerror or error}", file=sys.stderr
        )
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
