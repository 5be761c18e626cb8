"""``asyncai-mcp-kcp`` (read-write, admin kubeconfig) and ``asyncai-mcp-kcp-readonly`` (re-minted token).

Both serve MCP over stdio (or Streamable HTTP with ``--http HOST:PORT``).
``python -m asyncai_servers.kcp`` is the read-write server; add ``--read-only``
for the read-only one.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shlex
import sys

import anyio

from asyncai_servers.kcp.kubectl import Endpoint, Kubectl
from asyncai_servers.kcp.server import KcpServer
from asyncai_servers.kcp.watcher import RING_CHARS, RING_EVENTS, RING_WINDOW, WatcherPool
from asyncai_watch import Backoff
from asyncai_watch.cli_help import HelpFormatter, examples
from asyncai_watch.log_flags import LogFlagError, add_log_flags, configure_logging
from asyncai_watch.server.http import serve_http
from asyncai_watch.server.policy import (
    PolicyError,
    add_http_arguments,
    bind_from_args,
)
from asyncai_watch.server.resumable import streamable_http_app
from asyncai_watch.server.stdio import stdio_server
from asyncai_watch.server.subscriptions import DEFAULT_MAX_URIS

__all__ = ["main", "main_readonly"]


def _parser(prog: str, read_only: bool) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description=(
            "kcp MCP server: kcp-events://watch/{workspace}/{resource} event logs fed by API watches (kubectl get --raw), "
            "kcp-api://{workspace}/resources, and kubectl tools"
            + (" (read-only)." if read_only else " (read-write: apply/delete).")
        ),
        epilog=examples(
            f"{prog} --kubeconfig ~/.kube/kcp.yaml"
            + (" --token-command 'kcp-token mint'" if read_only else ""),
            f"{prog} --kubeconfig ~/.kube/kcp.yaml --http 127.0.0.1:8767"
            + (" --token-command 'kcp-token mint'" if read_only else ""),
        ),
        formatter_class=HelpFormatter,
    )
    p.add_argument("--kubectl", default=os.environ.get("ASYNCAI_KUBECTL", "kubectl"), help="kubectl binary")
    p.add_argument(
        "--kubeconfig",
        default=os.environ.get("KUBECONFIG"),
        help="kubeconfig of the default kcp endpoint (default: $KUBECONFIG, else kubectl's default)",
    )
    p.add_argument(
        "--kcp-host",
        metavar="URL",
        help="kcp base URL, e.g. https://127.0.0.1:6443 (default: the kubeconfig's current cluster server, "
        "with any /clusters/... path removed); workspaces are addressed as URL/clusters/<workspace>",
    )
    p.add_argument(
        "--endpoint",
        action="append",
        default=[],
        metavar="NAME=KUBECONFIG",
        help="an alternate kcp endpoint, selected by the URI query ?kcp=NAME (repeatable)",
    )
    p.add_argument(
        "--token-command",
        default=os.environ.get("ASYNCAI_KCP_TOKEN_COMMAND"),
        metavar="CMD",
        help="command printing a bearer token, run on every (re)connect"
        + (" (required; default $ASYNCAI_KCP_TOKEN_COMMAND)" if read_only else " (optional)"),
    )
    p.add_argument(
        "--backoff",
        default="0.8:30",
        metavar="INITIAL:MAX",
        help="reconnect backoff in seconds, doubling from INITIAL up to MAX (default 0.8:30)",
    )
    p.add_argument(
        "--ring-events",
        type=int,
        default=RING_EVENTS,
        metavar="N",
        help=f"events each watched URI's log keeps for readers that send their position (default {RING_EVENTS})",
    )
    p.add_argument(
        "--ring-bytes",
        type=int,
        default=RING_CHARS,
        metavar="N",
        help=f"...and at most this much JSON text (default {RING_CHARS})",
    )
    p.add_argument(
        "--read-window",
        type=int,
        default=RING_WINDOW,
        metavar="N",
        help=f"events a read without a position returns: the newest N (default {RING_WINDOW})",
    )
    p.add_argument(
        "--max-uris",
        type=int,
        default=DEFAULT_MAX_URIS,
        metavar="N",
        help=f"URIs one subscriptions/listen (or one 2025-era session) may name (default {DEFAULT_MAX_URIS:,})",
    )
    p.add_argument(
        "--http", metavar="HOST:PORT", help="serve Streamable HTTP at http://HOST:PORT/mcp instead of stdio"
    )
    p.add_argument("--read-only", action="store_true", help="serve no mutating tools; needs --token-command")
    add_log_flags(p, default_level=os.environ.get("ASYNCAI_KCP_LOG", "WARNING"))
    add_http_arguments(p)
    return p


def _backoff(text: str, p: argparse.ArgumentParser) -> Backoff:
    try:
        initial, _, maximum = text.partition(":")
        lo, hi = float(initial), float(maximum or initial)
    except ValueError:
        p.error(f"--backoff expects INITIAL:MAX in seconds (e.g. 0.8:30), got {text!r}")
    if not 0 <= lo <= hi < math.inf:  # also refuses nan
        p.error(f"--backoff needs 0 <= INITIAL <= MAX, both finite, got {text!r}")
    return Backoff(initial=lo, cap=hi, attempts=None)


def _run(argv: list[str] | None, *, read_only: bool, prog: str) -> int:
    p = _parser(prog, read_only)
    args = p.parse_args(argv)
    read_only = read_only or args.read_only
    try:
        configure_logging(args)
    except LogFlagError as exc:
        p.error(str(exc))
    token_command = shlex.split(args.token_command) if args.token_command else None
    if read_only and not token_command:
        p.error("the read-only server re-mints its token on every reconnect: pass --token-command CMD")
    endpoints: dict[str | None, Endpoint] = {
        None: Endpoint(kubeconfig=args.kubeconfig, server=args.kcp_host, token_command=token_command)
    }
    for spec in args.endpoint:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            p.error(f"--endpoint expects NAME=KUBECONFIG, got {spec!r}")
        endpoints[name] = Endpoint(kubeconfig=path, token_command=token_command)
    backoff = _backoff(args.backoff, p)
    if args.max_uris < 1:
        p.error(f"--max-uris must be >= 1, got {args.max_uris}")
    if args.ring_events < 1 or args.ring_bytes < 1:
        p.error(f"--ring-events and --ring-bytes must be >= 1, got {args.ring_events} and {args.ring_bytes}")
    try:
        policy, http = bind_from_args(args, prog)
    except PolicyError as exc:
        p.error(str(exc))
    kcp = KcpServer(
        Kubectl(args.kubectl, endpoints), read_write=not read_only, name=prog, max_uris=args.max_uris
    )

    async def serve() -> None:
        async with anyio.create_task_group() as tg:
            kcp.attach_pool(
                WatcherPool(
                    tg,
                    kcp.kubectl,
                    kcp.publish,
                    backoff=backoff,
                    ring_events=args.ring_events,
                    ring_chars=args.ring_bytes,
                    ring_window=args.read_window,
                )
            )
            if http is not None:
                # Open listen streams are ended at shutdown; uvicorn would wait on them forever otherwise.
                policy.limits.apply_to(kcp.subscriptions)
                app = streamable_http_app(kcp.server, host=http[0], limits=policy.limits)
                await serve_http(app, *http, on_shutdown=kcp.close_listeners, policy=policy)
            else:
                async with stdio_server() as (read, write):
                    await kcp.server.run(read, write, kcp.server.create_initialization_options())
            tg.cancel_scope.cancel()  # stdin closed: stop every watcher (and its kubectl)

    with contextlib.suppress(KeyboardInterrupt):
        anyio.run(serve)
    return 0


def main(argv: list[str] | None = None) -> int:
    return _run(argv, read_only=False, prog="asyncai-mcp-kcp")


def main_readonly(argv: list[str] | None = None) -> int:
    return _run(argv, read_only=True, prog="asyncai-mcp-kcp-readonly")


if __name__ == "__main__":
    sys.exit(main())
