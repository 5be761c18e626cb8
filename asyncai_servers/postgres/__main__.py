"""``asyncai-mcp-postgres --config FILE``: serve PostgreSQL tables and queries over MCP stdio or HTTP.

``--install-triggers`` / ``--remove-triggers`` set up (or take away) the database side and exit.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from asyncai_watch.cli_help import HelpFormatter, examples
from asyncai_watch.extras import MissingExtraError, require
from asyncai_watch.log_flags import LogFlagError, add_log_flags, configure_logging
from asyncai_watch.server.policy import (
    HttpPolicy,
    PolicyError,
    add_http_arguments,
    bind_from_args,
)

if TYPE_CHECKING:
    from asyncai_servers.postgres.capture import Retention
    from asyncai_servers.postgres.config import Config
    from asyncai_servers.postgres.server import PostgresServer

__all__ = ["main"]

PROG = "asyncai-mcp-postgres"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "MCP server (stdio, or Streamable HTTP with --http) for the PostgreSQL tables and named queries a "
            "config file names: pg://SCHEMA/TABLE (rows by primary key), pg-events://SCHEMA/TABLE (row changes) "
            "and pg-query://NAME, pushed by LISTEN/NOTIFY triggers (never polling)."
        ),
        epilog=examples(
            "asyncai-mcp-postgres --config pg.toml --dsn 'dbname=shop' --install-triggers   # once, as the owner",
            "asyncai-mcp-postgres --config pg.toml --dsn 'dbname=shop' --http 127.0.0.1:8768",
        ),
        formatter_class=HelpFormatter,
    )
    p.add_argument(
        "--config", required=True, type=Path, help="TOML (or .json) file naming the tables and queries"
    )
    p.add_argument(
        "--dsn",
        default=os.environ.get("DATABASE_URL", ""),
        help="libpq connection string or URI (default: $DATABASE_URL, else libpq's PG* variables)",
    )
    setup = p.add_mutually_exclusive_group()
    setup.add_argument(
        "--install-triggers",
        action="store_true",
        help="install (or refresh) the NOTIFY triggers on the config's tables, then exit; idempotent. "
        "Run as the tables' owner; as a superuser it also installs the DDL event triggers",
    )
    p.add_argument(
        "--retain-age",
        default="7d",
        metavar="AGE",
        help="with --install-triggers: how long each table's durable change log keeps a change "
        "(s, m, h or d; default 7d); a reader further behind gets a GAP naming the retention",
    )
    p.add_argument(
        "--retain-size",
        default="256MB",
        metavar="SIZE",
        help="with --install-triggers: the most each table's change log may hold (B, kB, MB or GB; "
        "default 256MB); past it the oldest changes are dropped",
    )
    setup.add_argument(
        "--remove-triggers",
        action="store_true",
        help="remove the triggers from the config's tables, then exit",
    )
    p.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve MCP Streamable HTTP at http://HOST:PORT/mcp instead of stdio "
        "(port 0 picks a free port; the URL is printed as 'READY <url>' on stderr)",
    )
    p.add_argument(
        "--statement-timeout",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="longest a read may run (default 5)",
    )
    p.add_argument("--pool", type=int, default=4, metavar="N", help="reading connections at most (default 4)")
    p.add_argument(
        "--reconnect",
        default="1:16",
        metavar="INITIAL:MAX",
        help="LISTEN reconnect backoff in seconds, doubling from INITIAL up to MAX (default 1:16)",
    )
    p.add_argument(
        "--idle-grace",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long a table stays watched after its last listener leaves (default 60)",
    )
    p.add_argument(
        "--max-uris",
        type=int,
        default=None,
        metavar="N",
        help="URIs one subscriptions/listen (or one 2025-era session) may name (default 100,000)",
    )
    p.add_argument(
        "--max-sources",
        type=int,
        default=None,
        metavar="N",
        help="distinct targets (tables, filtered views, queries) watched at once, all clients together "
        "(default 20,000): a listen or read past it is refused naming this flag",
    )
    p.add_argument(
        "--max-sources-per-client",
        type=int,
        default=None,
        metavar="N",
        help="distinct targets one client's listens hold at once (default 10,000), so one client cannot "
        "take all of --max-sources: a listen past it is refused naming this flag",
    )
    add_log_flags(p, default_level=os.environ.get("ASYNCAI_PG_LOG", "WARNING"))
    add_http_arguments(p)
    return p


def _fail(message: str, code: int) -> SystemExit:
    print(f"{PROG}: {message}", file=sys.stderr)
    return SystemExit(code)


def _backoff_arg(text: str, p: argparse.ArgumentParser) -> tuple[float, float]:
    try:
        initial, _, maximum = text.partition(":")
        lo, hi = float(initial), float(maximum or initial)
    except ValueError:
        p.error(f"--reconnect expects INITIAL:MAX in seconds (e.g. 1:16), got {text!r}")
    if not 0 <= lo <= hi < math.inf:
        p.error(f"--reconnect needs 0 <= INITIAL <= MAX, both finite, got {text!r}")
    return lo, hi


def main(argv: Sequence[str] | None = None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    if not 0 < args.statement_timeout < math.inf or args.pool < 1 or not 0 <= args.idle_grace < math.inf:
        p.error("--statement-timeout must be > 0, --pool >= 1 and --idle-grace >= 0")
    if args.max_sources_per_client is not None and args.max_sources_per_client < 1:
        p.error(f"--max-sources-per-client must be >= 1, got {args.max_sources_per_client}")
    if args.max_uris is not None and args.max_uris < 1:
        p.error(f"--max-uris must be >= 1, got {args.max_uris}")
    if args.max_sources is not None and args.max_sources < 1:
        p.error(f"--max-sources must be >= 1, got {args.max_sources}")
    reconnect = _backoff_arg(args.reconnect, p)
    try:
        policy, http = bind_from_args(args, PROG)
    except PolicyError as exc:
        p.error(str(exc))
    try:  # before anything starts: a missing driver is a one-line install hint
        require("postgres", feature="this server")
    except MissingExtraError as exc:
        raise _fail(str(exc), 2) from None
    from asyncai_servers.postgres.capture import Retention, parse_age, parse_size  # needs psycopg

    try:
        retention = Retention(max_age=parse_age(args.retain_age), max_bytes=parse_size(args.retain_size))
    except ValueError as exc:
        p.error(str(exc))
    try:
        configure_logging(args)
    except LogFlagError as exc:
        p.error(str(exc))
    from asyncai_servers.postgres.config import ConfigError, load_config

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        raise _fail(str(exc), 2) from None
    if args.install_triggers or args.remove_triggers:
        return _triggers(config, args.dsn, install=args.install_triggers, retention=retention)

    from asyncai_servers.postgres.server import MAX_SOURCES, MAX_SOURCES_PER_CLIENT, PostgresServer
    from asyncai_watch import Backoff
    from asyncai_watch.server.subscriptions import DEFAULT_MAX_URIS

    server = PostgresServer(
        config,
        args.dsn,
        statement_timeout=args.statement_timeout,
        pool_size=args.pool,
        reconnect=Backoff(initial=reconnect[0], cap=reconnect[1], attempts=None),
        idle_grace=args.idle_grace,
        max_uris=DEFAULT_MAX_URIS if args.max_uris is None else args.max_uris,
        max_sources=MAX_SOURCES if args.max_sources is None else args.max_sources,
        max_sources_per_client=(
            MAX_SOURCES_PER_CLIENT if args.max_sources_per_client is None else args.max_sources_per_client
        ),
    )
    return _serve(server, http, args.http, policy)


def _triggers(config: Config, dsn: str, *, install: bool, retention: Retention) -> int:
    import psycopg

    from asyncai_servers.postgres.triggers import install_triggers, remove_triggers

    tables = config.trigger_tables()
    try:
        report = install_triggers(dsn, tables, retention) if install else remove_triggers(dsn, tables)
    except (psycopg.Error, ValueError) as exc:
        detail = " ".join(str(exc).split())
        verb = "installing" if install else "removing"
        raise _fail(f"{verb} the triggers failed: {detail}", 1) from None
    print(report.text("installed" if install else "removed"))
    return 0


def _serve(
    server: PostgresServer, http: tuple[str, int] | None, http_arg: str | None, policy: HttpPolicy
) -> int:
    import anyio

    async def serve_stdio() -> None:
        from asyncai_watch.server.stdio import stdio_server

        async with server.running(), stdio_server() as (read, write):
            await server.server.run(read, write, server.server.create_initialization_options())

    async def serve_http(host: str, port: int) -> None:
        from asyncai_watch.server.http import serve_http as serve_asgi
        from asyncai_watch.server.resumable import streamable_http_app

        policy.limits.apply_to(server.subscriptions)
        async with server.running():
            app = streamable_http_app(server.server, host=host, limits=policy.limits)
            await serve_asgi(app, host, port, on_shutdown=server.close_listeners, policy=policy)

    if http is None:
        with contextlib.suppress(KeyboardInterrupt):
            anyio.run(serve_stdio)
        return 0
    try:
        anyio.run(serve_http, *http)
    except KeyboardInterrupt:
        return 0
    except (OSError, BaseExceptionGroup) as exc:
        from asyncai_watch.server.http import bind_error as only_os_error

        bind_error = only_os_error(exc)
        if bind_error is None:
            raise
        raise _fail(f"cannot serve HTTP on {http_arg}: {bind_error.strerror or bind_error}", 2) from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
