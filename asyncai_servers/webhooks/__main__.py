"""``asyncai-mcp-webhooks --config FILE --db FILE`` (or ``--database postgresql://...`` for several
replicas): receive signed webhooks, serve them over MCP (stdio, or Streamable HTTP with ``--http``)."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

from asyncai_watch.cli_help import HelpFormatter, examples
from asyncai_watch.log_flags import LogFlagError, add_log_flags, configure_logging
from asyncai_watch.server.policy import (
    HttpPolicy,
    PolicyError,
    add_http_arguments,
    bind_from_args,
    parse_host_port,
)

__all__ = ["main"]

PROG = "asyncai-mcp-webhooks"
_AGE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*", re.IGNORECASE)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DATABASE_ENV = "ASYNCAI_WEBHOOKS_DATABASE"
MAX_DSN_FILE = 4096


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "MCP server (stdio, or Streamable HTTP with --http) for signed webhook deliveries: POST /hooks/SOURCE "
            "on --receive, verified per source (GitHub, Stripe, Standard Webhooks, HMAC), stored once in a SQLite "
            "file (or PostgreSQL, shared by several replicas) before the 2xx, and served as "
            "webhook-events://SOURCE/EVENT logs and webhook-state:// objects."
        ),
        epilog=examples(
            "asyncai-mcp-webhooks --config hooks.toml --db hooks.sqlite3 --receive 127.0.0.1:8790",
            "asyncai-mcp-webhooks --config hooks.toml --db hooks.sqlite3 --http 127.0.0.1:8769",
            "asyncai-mcp-webhooks --config hooks.toml --database postgresql://hooks@db.internal/hooks   # replicas",
        ),
        formatter_class=HelpFormatter,
    )
    p.add_argument(
        "--config", required=True, type=Path, help="TOML file naming the sources and their secrets"
    )
    store = p.add_mutually_exclusive_group()
    store.add_argument("--db", type=Path, help="the SQLite file deliveries are stored in (made if missing)")
    store.add_argument(
        "--database",
        metavar="DSN",
        help="PostgreSQL instead (postgresql://USER@HOST/DB or key=value; no password here: every user "
        "sees a command line; use --database-file, $" + DATABASE_ENV + ", ~/.pgpass or PGPASSWORD); several "
        "replicas on one database share the logs and hear each other's deliveries",
    )
    store.add_argument(
        "--database-file",
        type=Path,
        metavar="FILE",
        help=f"a file holding the PostgreSQL DSN (it may carry a password); default: ${DATABASE_ENV}",
    )
    p.add_argument(
        "--receive",
        default="127.0.0.1:8790",
        metavar="HOST:PORT",
        help="where deliveries are POSTed (default 127.0.0.1:8790; port 0 picks one); put a reverse proxy "
        "or a tunnel in front of it to reach it from the internet",
    )
    p.add_argument(
        "--max-body",
        type=int,
        default=None,
        metavar="BYTES",
        help="the largest delivery body accepted (default 1 MiB); a bigger one is refused with 413",
    )
    p.add_argument(
        "--retain-age",
        default="7d",
        metavar="AGE",
        help="how long a delivery is kept (s, m, h or d; default 7d); a reader further behind gets a GAP",
    )
    p.add_argument(
        "--retain-count",
        type=int,
        default=100_000,
        metavar="N",
        help="deliveries kept per source at most (default 100,000)",
    )
    p.add_argument(
        "--sync",
        choices=("full", "normal"),
        default="full",
        help="SQLite only. full (default): each delivery is on disk (fsync) before its 2xx, so it survives a "
        "power loss; normal: it survives a crash of the server, not of the machine, and commits cost no fsync "
        "(PostgreSQL: its own synchronous_commit decides)",
    )
    p.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve MCP Streamable HTTP at http://HOST:PORT/mcp instead of stdio "
        "(port 0 picks a free port; the URL is printed as 'READY <url>' on stderr)",
    )
    p.add_argument(
        "--max-uris",
        type=int,
        default=None,
        metavar="N",
        help="URIs one subscriptions/listen (or one 2025-era session) may name (default 100,000)",
    )
    add_log_flags(p, default_level=os.environ.get("ASYNCAI_WEBHOOKS_LOG", "WARNING"))
    add_http_arguments(p)
    return p


def _age(text: str) -> float:
    m = _AGE.fullmatch(text)
    if m is None or float(m[1]) <= 0:
        raise ValueError(
            f"--retain-age expects a positive number with s, m, h or d (e.g. 7d, 12h), got {text!r}"
        )
    return float(m[1]) * _UNITS[(m[2] or "s").lower()]


def _dsn(args: argparse.Namespace, env: Mapping[str, str]) -> str | None:
    """The PostgreSQL DSN named by the arguments or the environment, or None (SQLite: --db)."""
    if args.database is not None:
        dsn: str = args.database.strip()
        where = "--database"
    elif args.database_file is not None:
        where = f"--database-file {args.database_file}"
        try:
            with args.database_file.open("rb") as f:
                raw = f.read(MAX_DSN_FILE + 1)
        except OSError as exc:
            raise ValueError(f"{where}: cannot read it: {exc.strerror or exc}") from None
        if len(raw) > MAX_DSN_FILE:
            raise ValueError(f"{where}: longer than {MAX_DSN_FILE} bytes; it holds one DSN")
        dsn = raw.decode("utf-8", "replace").strip()
    elif args.db is None and env.get(DATABASE_ENV):
        dsn, where = env[DATABASE_ENV].strip(), f"${DATABASE_ENV}"
    else:
        return None
    from asyncai_watch.extras import require

    require("postgres", feature=where.split()[0])
    from asyncai_servers.webhooks.store_pg import password_in

    try:
        has_password = password_in(dsn)
    except Exception as exc:  # psycopg.ProgrammingError: not a DSN
        raise ValueError(
            f"{where}: not a PostgreSQL DSN ({exc}); expected postgresql://USER@HOST:PORT/DB or "
            "'host=... dbname=...'"
        ) from None
    if has_password and where == "--database":
        raise ValueError(
            "--database: the DSN carries a password, which every user of this machine can read on the "
            f"command line; put the DSN in --database-file FILE or ${DATABASE_ENV}, or the password in "
            "~/.pgpass or PGPASSWORD"
        )
    return dsn


def main(argv: Sequence[str] | None = None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    from asyncai_watch.extras import MissingExtraError

    try:
        dsn = _dsn(args, os.environ)
    except ValueError as exc:
        p.error(str(exc))
    except MissingExtraError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    if dsn is None and args.db is None:
        p.error(
            f"where to store deliveries: --db FILE (SQLite), or PostgreSQL by --database DSN, "
            f"--database-file FILE or ${DATABASE_ENV}"
        )
    try:
        retain_age = _age(args.retain_age)
    except ValueError as exc:
        p.error(str(exc))
    if args.retain_count < 1:
        p.error(f"--retain-count must be >= 1, got {args.retain_count}")
    if args.max_body is not None and args.max_body < 1:
        p.error(f"--max-body must be >= 1, got {args.max_body}")
    if args.max_uris is not None and args.max_uris < 1:
        p.error(f"--max-uris must be >= 1, got {args.max_uris}")
    try:
        receive = parse_host_port(args.receive)
    except ValueError as exc:
        p.error(str(exc).replace("--http", "--receive"))
    try:
        policy, http = bind_from_args(args, PROG)
    except PolicyError as exc:
        p.error(str(exc))
    try:
        configure_logging(args)
    except LogFlagError as exc:
        p.error(str(exc))
    from asyncai_servers.webhooks.config import ConfigError, load_config

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    if any(spec.kind == "standard" for spec in config.sources.values()):
        from asyncai_watch.extras import MissingExtraError, require

        try:
            require("webhooks", feature="kind = 'standard'")
        except MissingExtraError as exc:
            print(f"{PROG}: {exc}", file=sys.stderr)
            return 2
    import sqlite3

    pg_errors: tuple[type[Exception], ...] = ()
    if dsn is not None:  # psycopg is an extra: imported only when PostgreSQL is asked for
        import psycopg

        pg_errors = (psycopg.Error,)
    from asyncai_servers.webhooks.receiver import DEFAULT_MAX_BODY
    from asyncai_servers.webhooks.server import WebhooksServer
    from asyncai_servers.webhooks.store import Retention
    from asyncai_watch.server.subscriptions import DEFAULT_MAX_URIS

    try:
        server = WebhooksServer(
            config,
            None if dsn is not None else args.db,
            dsn=dsn,
            retention=Retention(max_age=retain_age, max_count=args.retain_count),
            max_body=args.max_body or DEFAULT_MAX_BODY,
            max_uris=args.max_uris or DEFAULT_MAX_URIS,
            sync=args.sync,
        )
    except sqlite3.Error as exc:
        print(f"{PROG}: cannot open the database {args.db}: {exc}", file=sys.stderr)
        return 2
    except pg_errors as exc:
        print(f"{PROG}: cannot open the PostgreSQL database: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    try:
        return _serve(server, receive, http, policy, args)
    finally:
        server.close()


def _serve(
    server: object,
    receive: tuple[str, int],
    http: tuple[str, int] | None,
    policy: HttpPolicy,
    args: argparse.Namespace,
) -> int:
    import anyio

    from asyncai_servers.webhooks.server import WebhooksServer
    from asyncai_watch.server.http import run_server, serve_http

    assert isinstance(server, WebhooksServer)
    # Deliveries authenticate by their signatures, not by the MCP endpoint's tokens; Host checks
    # and the limits (header timeout, connections) still apply (--allow-host for a proxy's name).
    # (insecure_no_auth here only means "no bearer token": every delivery is verified by signature.)
    receiver_policy = attrs.evolve(
        policy, verifier=None, insecure_no_auth=True, authorization_servers=(), required_scopes=()
    )

    async def run() -> None:
        receiving = anyio.Event()
        stop = anyio.Event()

        def announce(url: str) -> None:
            server.endpoint = url.removesuffix("hooks") + "hooks/"
            print(f"RECEIVING {server.endpoint}", file=sys.stderr, flush=True)
            receiving.set()

        async with server.running(), anyio.create_task_group() as tg:

            async def receiver() -> None:
                await serve_http(
                    server.receiver,
                    *receive,
                    path="/hooks",
                    ready=io.StringIO(),
                    on_ready=announce,
                    stop=stop,
                    policy=receiver_policy,
                )
                tg.cancel_scope.cancel()  # a signal stopped the receiver: stop everything

            tg.start_soon(receiver)
            await receiving.wait()
            if http is None:
                from asyncai_watch.server.stdio import stdio_server

                async with stdio_server() as (read, write):
                    await server.server.run(read, write, server.server.create_initialization_options())
            else:
                from asyncai_watch.server.resumable import streamable_http_app

                policy.limits.apply_to(server.subscriptions)
                app = streamable_http_app(server.server, host=http[0], limits=policy.limits)
                await serve_http(app, *http, on_shutdown=server.close_listeners, policy=policy)
            stop.set()

    return run_server(PROG, args.http or args.receive, run)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
