"""``asyncai-mcp-webhooks --config FILE --db FILE``: receive signed webhooks, serve them over MCP
(stdio, or Streamable HTTP with ``--http``)."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import sys
from collections.abc import Sequence
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


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "MCP server (stdio, or Streamable HTTP with --http) for signed webhook deliveries: POST /hooks/SOURCE "
            "on --receive, verified per source (GitHub, Stripe, Standard Webhooks, HMAC), stored once in a SQLite "
            "file before the 2xx, and served as webhook-events://SOURCE/EVENT logs and webhook-state:// objects."
        ),
        epilog=examples(
            "asyncai-mcp-webhooks --config hooks.toml --db hooks.sqlite3 --receive 127.0.0.1:8790",
            "asyncai-mcp-webhooks --config hooks.toml --db hooks.sqlite3 --http 127.0.0.1:8769",
        ),
        formatter_class=HelpFormatter,
    )
    p.add_argument(
        "--config", required=True, type=Path, help="TOML file naming the sources and their secrets"
    )
    p.add_argument(
        "--db", required=True, type=Path, help="the SQLite file deliveries are stored in (made if missing)"
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
        help="full (default): each delivery is on disk (fsync) before its 2xx, so it survives a power loss; "
        "normal: it survives a crash of the server, not of the machine, and commits cost no fsync",
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


def main(argv: Sequence[str] | None = None) -> int:
    p = _parser()
    args = p.parse_args(argv)
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

    from asyncai_servers.webhooks.receiver import DEFAULT_MAX_BODY
    from asyncai_servers.webhooks.server import WebhooksServer
    from asyncai_servers.webhooks.store import Retention
    from asyncai_watch.server.subscriptions import DEFAULT_MAX_URIS

    try:
        server = WebhooksServer(
            config,
            args.db,
            retention=Retention(max_age=retain_age, max_count=args.retain_count),
            max_body=args.max_body or DEFAULT_MAX_BODY,
            max_uris=args.max_uris or DEFAULT_MAX_URIS,
            sync=args.sync,
        )
    except sqlite3.Error as exc:
        print(f"{PROG}: cannot open the database {args.db}: {exc}", file=sys.stderr)
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
    from asyncai_watch.server.http import bind_error, serve_http

    assert isinstance(server, WebhooksServer)
    # Deliveries authenticate by their signatures, not by the MCP endpoint's tokens; Host checks
    # and the limits (header timeout, connections) still apply (--allow-host for a proxy's name).
    receiver_policy = attrs.evolve(policy, verifier=None, authorization_servers=(), required_scopes=())

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

    try:
        anyio.run(run)
    except KeyboardInterrupt:
        return 0
    except (OSError, BaseExceptionGroup) as exc:
        error = bind_error(exc)
        if error is None:
            raise
        print(f"{PROG}: cannot serve HTTP: {error.strerror or error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
