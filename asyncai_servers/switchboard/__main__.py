"""``asyncai-switchboard``: the durable todo queue with channel doorbells, over Streamable HTTP or stdio."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import anyio

from asyncai_watch.cli_help import HelpFormatter, examples
from asyncai_watch.extras import MissingExtraError, require
from asyncai_watch.log_flags import LogFlagError, add_log_flags, configure_logging
from asyncai_watch.server.http import parse_host_port, serve_http
from asyncai_watch.server.policy import PolicyError, add_http_arguments, check_bind, http_policy_from_args
from asyncai_watch.server.resumable import streamable_http_app

from .config import ConfigError, Credential, Credentials, load_credentials
from .core import DEFAULT_LEASE_SECONDS, Switchboard
from .hub import DEFAULT_BUFFER
from .ledger import Ledger, LedgerError
from .server import CredentialsVerifier, LegacyStdioAttach, build_server

__all__ = ["SEND_BUFFER", "main"]

SEND_BUFFER = 64 * 1024
"""Kernel send buffer per connection: with the hub's doorbell buffer and uvicorn's 64 KiB write
buffer, all a stalled listener can hold (doorbells beyond it are dropped and counted)."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="asyncai-switchboard",
        description="Durable todo queue over MCP; verified-human todos ring notifications/claude/channel doorbells.",
        epilog=examples(
            "asyncai-switchboard --config credentials.json --sqlite switchboard.db --http 127.0.0.1:8765",
            "asyncai-switchboard --config credentials.json --sqlite switchboard.db --token-file ~/.switchboard-token",
        ),
        formatter_class=HelpFormatter,
    )
    p.add_argument(
        "--config", required=True, type=Path, help="credentials JSON file (tokens, queue scopes, attribution)"
    )
    store = p.add_mutually_exclusive_group()
    store.add_argument("--sqlite", type=Path, help="SQLite ledger file (default: ./switchboard.db)")
    store.add_argument(
        "--postgres", metavar="DSN", help="PostgreSQL DSN; replicas sharing it ring each other's sessions"
    )
    p.add_argument(
        "--http", metavar="HOST:PORT", help="serve Streamable HTTP at http://HOST:PORT/mcp (port 0 = any)"
    )
    p.add_argument(
        "--token-file",
        type=Path,
        help="stdio: file holding this session's bearer token (or SWITCHBOARD_TOKEN)",
    )
    p.add_argument(
        "--lease-seconds", type=float, default=DEFAULT_LEASE_SECONDS, help="claim lease length (default 300)"
    )
    p.add_argument(
        "--buffer", type=int, default=DEFAULT_BUFFER, help="doorbells buffered per session (default 64)"
    )
    p.add_argument("--source", default="switchboard", help="the doorbell's meta source (default switchboard)")
    add_log_flags(p)  # -v/--verbose (was INFO, now DEBUG), -q, --log-level, --log-file
    add_http_arguments(p, tokens=False)  # HTTP callers authenticate with the --config credentials
    return p


def _stdio_credential(args: argparse.Namespace, creds: Credentials) -> Credential:
    if args.token_file is not None:
        try:
            token = args.token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise SystemExit(
                f"asyncai-switchboard: cannot read --token-file {str(args.token_file)!r}: {exc.strerror}"
            ) from None
    else:
        token = os.environ.get("SWITCHBOARD_TOKEN", "").strip()
    if not token:
        raise SystemExit(
            "asyncai-switchboard: stdio needs a credential: --token-file FILE or SWITCHBOARD_TOKEN"
        )
    cred = creds.lookup(token)
    if cred is None:
        raise SystemExit(f"asyncai-switchboard: the stdio token is not in --config {str(args.config)!r}")
    return cred


def _ledger(args: argparse.Namespace) -> Ledger:
    if args.postgres:
        from .ledger_pg import PostgresLedger

        return PostgresLedger(args.postgres)
    from .ledger_sqlite import SqliteLedger

    return SqliteLedger(args.sqlite or Path("switchboard.db"))


async def _run(args: argparse.Namespace) -> None:
    creds = load_credentials(args.config)
    stdio_cred = None if args.http else _stdio_credential(args, creds)
    address = parse_host_port(args.http) if args.http else None  # bad input fails before any file is made
    policy = http_policy_from_args(
        args, verifier=CredentialsVerifier(creds), auth_hint="the tokens of --config's credentials"
    )
    if address is not None:
        check_bind(policy, address[0], args.http, "asyncai-switchboard")
    board = Switchboard(
        _ledger(args), creds, lease_seconds=args.lease_seconds, buffer=args.buffer, source=args.source
    )
    server = build_server(board, stdio_credential=stdio_cred)
    async with board:
        if address is not None:
            host, port = address
            policy.limits.apply_to(board.hub.subscriptions)
            app = streamable_http_app(server, host=host, limits=policy.limits)
            await serve_http(
                app, host, port, on_shutdown=board.hub.close, send_buffer=SEND_BUFFER, policy=policy
            )
        else:
            from asyncai_watch.server.stdio import stdio_server

            async with stdio_server() as (read, write), anyio.create_task_group() as tg:
                assert stdio_cred is not None
                server.middleware.append(LegacyStdioAttach(board, stdio_cred, tg))
                await server.run(read, write, server.create_initialization_options())
                tg.cancel_scope.cancel()  # stdin closed: the connection's doorbell writer goes too


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if args.postgres:
        try:  # before anything starts: a missing driver is a one-line install hint
            require("postgres", feature="--postgres")
        except MissingExtraError as exc:
            print(f"asyncai-switchboard: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
    try:
        configure_logging(args)
    except LogFlagError as exc:
        _parser().error(str(exc))
    try:
        anyio.run(_run, args)
    except (ConfigError, LedgerError, PolicyError, ValueError) as exc:
        raise SystemExit(f"asyncai-switchboard: {exc}") from None
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
