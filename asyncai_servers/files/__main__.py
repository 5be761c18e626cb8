"""``asyncai-mcp-files ROOT...``: serve files under ROOT(s) over MCP stdio or HTTP, watched through inotify."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from asyncai_servers.files.change_source import InotifyUnavailable, NotifyTiming, check_inotify
from asyncai_servers.files.content import DEFAULT_MAX_BYTES
from asyncai_servers.files.paths import RootError, Roots
from asyncai_watch.cli_help import HelpFormatter, examples
from asyncai_watch.log_flags import LogFlagError, add_log_flags, configure_logging
from asyncai_watch.server.policy import (
    HttpPolicy,
    PolicyError,
    add_http_arguments,
    bind_from_args,
)

if TYPE_CHECKING:
    from asyncai_servers.files.server import FilesServer

PROG = "asyncai-mcp-files"

__all__ = ["main", "serve_http", "serve_stdio"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="asyncai-mcp-files",
        description="MCP server (stdio, or Streamable HTTP with --http) for files under ROOT...: file://{+path} state and "
        "dir-events://{+path}{?recursive,glob,exclude} event logs, pushed through inotify (never polling).",
        epilog=examples(
            "asyncai-mcp-files .                          # stdio, for one client",
            "asyncai-mcp-files /srv/app --http 127.0.0.1:8766   # Streamable HTTP, shared",
        ),
        formatter_class=HelpFormatter,
    )
    p.add_argument("roots", nargs="+", metavar="ROOT", help="an existing directory to serve (one or more)")
    p.add_argument(
        "--debounce-ms",
        type=int,
        default=0,
        help="hold a batch of changes open this long after its first change, to group a burst "
        "(default 0: handle each change at once; bursts still group while a batch is handled)",
    )
    p.add_argument(
        "--max-bytes", type=int, default=DEFAULT_MAX_BYTES, help="largest file file:// serves (default 4 MiB)"
    )
    p.add_argument(
        "--max-uris",
        type=int,
        metavar="N",
        help="URIs one subscriptions/listen (or one 2025-era session) may name (default 100,000)",
    )
    p.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve MCP Streamable HTTP at http://HOST:PORT/mcp instead of stdio "
        "(port 0 picks a free port; the URL is printed as 'READY <url>' on stderr)",
    )
    add_http_arguments(p)
    add_log_flags(p)
    return p


async def serve_stdio(server: FilesServer) -> None:
    from asyncai_watch.server.stdio import stdio_server

    async with server.running(), stdio_server() as (read, write):
        await server.server.run(read, write, server.server.create_initialization_options())


async def serve_http(server: FilesServer, host: str, port: int, policy: HttpPolicy | None = None) -> None:
    """Serve ``server`` at ``http://HOST:PORT/mcp`` until SIGTERM/SIGINT, announcing ``READY <url>``."""
    from asyncai_watch.server.http import serve_http as serve_asgi
    from asyncai_watch.server.resumable import streamable_http_app

    policy = policy if policy is not None else HttpPolicy()
    policy.limits.apply_to(server.subscriptions)
    async with server.running():
        # Open listen streams are ended at shutdown; uvicorn would wait on them forever otherwise.
        app = streamable_http_app(server.server, host=host, limits=policy.limits)
        await serve_asgi(app, host, port, on_shutdown=server.close_listeners, policy=policy)


def main(argv: Sequence[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        configure_logging(args)
    except LogFlagError as exc:
        parser.error(str(exc))
    if args.debounce_ms < 0 or args.max_bytes < 1:
        parser.error(
            f"--debounce-ms must be >= 0 and --max-bytes >= 1 (got {args.debounce_ms}, {args.max_bytes})"
        )
    if args.max_uris is not None and args.max_uris < 1:
        parser.error(f"--max-uris must be >= 1, got {args.max_uris}")
    try:
        policy, http = bind_from_args(args, PROG)
    except PolicyError as exc:
        parser.error(str(exc))
    try:
        roots = Roots.from_args(args.roots)
        timing = NotifyTiming(debounce_ms=args.debounce_ms)
        check_inotify()
    except (RootError, InotifyUnavailable) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        raise SystemExit(2 if isinstance(exc, RootError) else 1) from None
    # Imported only now so that bad arguments fail fast, before the MCP SDK loads.
    import anyio

    from asyncai_servers.files.server import FilesServer
    from asyncai_watch.server.subscriptions import DEFAULT_MAX_URIS

    max_uris = DEFAULT_MAX_URIS if args.max_uris is None else args.max_uris
    server = FilesServer(roots, timing=timing, max_bytes=args.max_bytes, max_uris=max_uris)
    if http is None:
        with contextlib.suppress(KeyboardInterrupt):
            anyio.run(serve_stdio, server)
        return
    try:
        anyio.run(serve_http, server, *http, policy)
    except KeyboardInterrupt:
        return
    except (OSError, BaseExceptionGroup) as exc:
        from asyncai_watch.server.http import bind_error as only_os_error

        bind_error = only_os_error(exc)
        if bind_error is None:
            raise
        # e.g. the port is taken: say so instead of a traceback
        print(
            f"{PROG}: cannot serve HTTP on {args.http}: {bind_error.strerror or bind_error}",
            file=sys.stderr,
        )
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
