"""``asyncai-mcp-simple`` / ``python -m asyncai_servers.memo``: serve the memo over stdio or HTTP."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import TextIO

import anyio

from asyncai_servers.memo.server import MemoState, build_server
from asyncai_watch.cli_help import HelpFormatter, examples
from asyncai_watch.log_flags import LogFlagError, add_log_flags, configure_logging
from asyncai_watch.server.http import parse_host_port, run_server, serve_http
from asyncai_watch.server.policy import (
    TOKEN_ENV,
    HttpPolicy,
    PolicyError,
    add_http_arguments,
    check_bind,
    http_policy_from_args,
    stdio_misuse,
)
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
        help="removed: a token on the command line shows in /proc/*/cmdline; use --token-file PATH",
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
    add_http_arguments(parser)
    add_log_flags(parser)
    return parser


async def _serve_stdio(state: MemoState) -> None:
    server = build_server(state)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


async def _serve_stdio_and_http(
    memo: MemoState, host: str, port: int, ready_file: str | None, policy: HttpPolicy
) -> None:
    # One memo and one subscription registry behind both transports.
    app = streamable_http_app(build_server(memo), host=host, limits=policy.limits)
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
                policy=policy,
            )
            # HTTP shut down: after stdio ended (stop), or on Ctrl-C/SIGTERM, which ends stdio too.
            tg.cancel_scope.cancel()

        with open(ready_file or os.devnull, "w", encoding="utf-8") as ready:  # noqa: ASYNC230 - one tiny write
            tg.start_soon(http, ready)
            await http_up.wait()
        await _serve_stdio(memo)  # the stdio client going away ends the process: HTTP stops too
        stop.set()


async def _serve_http(memo: MemoState, host: str, port: int, policy: HttpPolicy) -> None:
    app = streamable_http_app(build_server(memo), host=host, limits=policy.limits)
    # Open listen streams are ended at shutdown; uvicorn would wait on them forever otherwise.
    await serve_http(app, host, port, on_shutdown=memo.close_listeners, policy=policy)


PROG = "asyncai-mcp-simple"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        configure_logging(args)
    except LogFlagError as exc:
        _parser().error(str(exc))
    if args.max_uris < 1:
        _parser().error(f"--max-uris must be >= 1, got {args.max_uris}")
    if args.bearer_token is not None:
        _parser().error(
            "--bearer-token was removed: a token on the command line is visible to every local user in "
            f"/proc/*/cmdline; put it in a file (chmod 600) and pass --token-file PATH, or set ${TOKEN_ENV}"
        )
    if args.http is None and args.also_http is None and (misuse := stdio_misuse(args)) is not None:
        _parser().error(misuse)
    try:
        policy = http_policy_from_args(args, extra_token_env="ASYNCAI_MEMO_TOKEN")
    except PolicyError as exc:
        _parser().error(str(exc))
    memo = MemoState(max_uris=args.max_uris)
    policy.limits.apply_to(memo.subscriptions)
    if args.ready_file is not None and args.also_http is None:
        _parser().error("--ready-file needs --also-http")
    if args.also_http is not None:
        if args.http is not None:
            _parser().error("use either --http (HTTP only) or --also-http (stdio and HTTP), not both")
        try:
            host, port = parse_host_port(args.also_http)
        except ValueError as exc:
            _parser().error(str(exc).replace("--http", "--also-http"))
        check_bind(policy, host, args.also_http, PROG)
        return run_server(
            PROG, args.also_http, _serve_stdio_and_http, memo, host, port, args.ready_file, policy
        )
    if args.http is None:
        with contextlib.suppress(KeyboardInterrupt):
            anyio.run(_serve_stdio, memo)
        return 0
    try:
        host, port = parse_host_port(args.http)
    except ValueError as exc:
        _parser().error(str(exc))
    check_bind(policy, host, args.http, PROG)
    return run_server(PROG, args.http, _serve_http, memo, host, port, policy)


if __name__ == "__main__":
    sys.exit(main())
