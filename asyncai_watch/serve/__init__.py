"""``asyncai-watch serve``: MCP resource watches for Claude Code and any Channels host.

The host starts this as an MCP server (stdio, or Streamable HTTP with ``--http``). It
connects upstream to the servers the user names (``--server``, or the ``mcpServers`` of a
``.mcp.json`` with ``--config``), runs a :class:`~asyncai_watch.WatchManager` over them,
offers the watch built-ins as tools, and pushes each notice as a
``notifications/claude/channel``. Every notice is also kept in a bounded ring that the
``watch_notices`` tool reads, because a host may drop a push without a word
(docs/claude-code.md).

Modules: :mod:`.config` (upstreams), :mod:`.ring` (the pull side), :mod:`.channel` (the push's
shape, the instructions), :mod:`.hub` (fan-out), :mod:`.server` (the MCP server).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Final

import anyio

from asyncai_watch import log
from asyncai_watch.core.limits import Limits
from asyncai_watch.errors import LimitError, WatchError
from asyncai_watch.mcp.client import McpResourceSource
from asyncai_watch.runtime.manager import WatchManager

from .channel import instructions
from .config import ConfigError, Upstream, from_server_args, load_config, select
from .hub import DEFAULT_BUFFER, Hub
from .ring import NoticeRing
from .server import ConnectionAttach, build_server

__all__ = ["DEFAULT_RING", "SERVE_ENV", "add_arguments", "main"]

PROG: Final = "asyncai-watch serve"
DEFAULT_RING: Final = 1000
SERVE_ENV: Final = "ASYNCAI_WATCH_SERVE"
"""Set in the environment of every stdio upstream: a serve started by a serve refuses to run."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``serve`` subcommand's options."""
    parser.description = (
        "Serve MCP resource watches to a Channels host such as Claude Code: tools to list, read and "
        "watch the upstream servers' resources; each change is pushed as notifications/claude/channel "
        "and kept for the watch_notices tool."
    )
    up = parser.add_argument_group("upstream servers")
    up.add_argument(
        "--server",
        action="append",
        default=[],
        metavar="[NAME=]COMMAND|URL",
        help="an MCP server to watch: a command line (stdio) or an http(s) URL (repeatable), "
        "e.g. --server files='asyncai-mcp-files /srv' --server memo=http://127.0.0.1:8765/mcp",
    )
    up.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="read the servers from the mcpServers object of a .mcp.json-style file "
        "(command/args/env or type/url/headers; an entry that runs asyncai-watch serve is skipped)",
    )
    up.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help="with --config: use only this mcpServers entry (repeatable)",
    )
    parser.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve MCP Streamable HTTP at http://HOST:PORT/mcp instead of stdio "
        "(port 0 picks a free port; the URL is printed as 'READY <url>' on stderr)",
    )
    parser.add_argument(
        "--watch-state", type=Path, metavar="PATH", help="save watches here and restore them at start"
    )
    parser.add_argument(
        "--debounce",
        type=float,
        metavar="SECONDS",
        help="quiet time before a notice is sent (default 3; 0 sends each change at once)",
    )
    parser.add_argument(
        "--max-wait",
        type=float,
        metavar="SECONDS",
        help="longest a burst is held back (default 15, and at least --debounce)",
    )
    parser.add_argument("--max-watches", type=int, metavar="N", help="watches at once (default 5)")
    parser.add_argument(
        "--ring",
        type=int,
        default=DEFAULT_RING,
        metavar="N",
        help=f"notices kept for watch_notices (default {DEFAULT_RING}); older ones are reported as a gap",
    )
    parser.add_argument(
        "--push-buffer",
        type=int,
        default=DEFAULT_BUFFER,
        metavar="N",
        help=f"pushes queued per client before they are dropped (default {DEFAULT_BUFFER}; "
        "watch_notices still has them)",
    )
    parser.add_argument("--verbose", action="store_true", help="log every NDJSON event on stderr")


def _fail(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)
    return 2


def _limits(args: argparse.Namespace) -> Limits:
    base = Limits()
    quiet = base.debounce_quiet if args.debounce is None else args.debounce
    max_wait = max(base.debounce_max_wait, quiet) if args.max_wait is None else args.max_wait
    try:
        return Limits(
            debounce_quiet=quiet,
            debounce_max_wait=max_wait,
            max_watches=base.max_watches if args.max_watches is None else args.max_watches,
        )
    except LimitError as exc:
        text = str(exc).replace("Limits.", "")
        for field, option in (
            ("debounce_max_wait", "--max-wait"),
            ("debounce_quiet", "--debounce"),
            ("max_watches", "--max-watches"),
        ):
            text = text.replace(field, option)
        raise ConfigError(text) from None


def _upstreams(args: argparse.Namespace) -> list[Upstream]:
    if args.only and args.config is None:
        raise ConfigError("--only selects entries of --config FILE; give --config too")
    found = from_server_args(args.server)
    if args.config is not None:
        found += select(load_config(args.config), args.only)
    if not found:
        raise ConfigError(
            "name the servers to watch: --server [NAME=]COMMAND|URL (repeatable) or --config .mcp.json"
        )
    names = [u.name for u in found if u.name is not None]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(
            f"server name(s) {', '.join(map(repr, dupes))} given more than once; names must be unique"
        )
    return found


def _source(upstream: Upstream) -> McpResourceSource:
    try:
        if upstream.url is not None:
            return McpResourceSource.http(upstream.url, name=upstream.name, headers=upstream.headers or None)
        return McpResourceSource.stdio(
            list(upstream.argv), name=upstream.name, env={**upstream.env, SERVE_ENV: "1"}
        )
    except ValueError as exc:
        raise ConfigError(f"{upstream.origin}: {exc}") from None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


async def _pump(manager: WatchManager, ring: NoticeRing, hub: Hub) -> None:
    """Every notice into the ring (pull), then out to whoever can hear a push."""
    async for notice in manager.notices:
        entry = ring.add(notice, _now())
        hub.publish(entry)
        log.emit(
            "serve.notice",
            notice_id=entry.id,
            source=notice.source,
            watch=notice.meta.get("name"),
            outlets=len(hub.outlets),
            push_dropped=hub.dropped,
        )


async def _serve(args: argparse.Namespace, upstreams: list[Upstream], limits: Limits) -> None:
    sources = [_source(u) for u in upstreams]
    http = _address(args.http) if args.http is not None else None
    async with AsyncExitStack() as stack:
        # Connected one by one: a server that cannot start fails serve before the host is answered.
        for source in sources:
            await stack.enter_async_context(source)
        names = [s.name for s in sources]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ConfigError(
                f"two upstream servers are both named {', '.join(map(repr, dupes))}; "
                "give them names with --server NAME=..."
            )
        manager = await stack.enter_async_context(
            WatchManager(sources, limits=limits, watch_state=args.watch_state, verbose=args.verbose)
        )
        ring = NoticeRing(args.ring)
        hub = Hub(exclusive=http is None, buffer=args.push_buffer)
        text = instructions(names, {"max_watches": limits.max_watches})
        server = build_server(manager, ring, hub, instructions=text, version=version("asyncai-watch"))
        async with anyio.create_task_group() as tg:
            tg.start_soon(_pump, manager, ring, hub)
            if http is not None:
                from asyncai_servers._http import serve_http

                server.middleware.append(ConnectionAttach(hub, tg, None))
                host, port = http
                await serve_http(server.streamable_http_app(host=host), host, port, on_shutdown=hub.close)
            else:
                from asyncai_servers._stdio import stdio_server

                with hub.attach("connection") as outlet:
                    server.middleware.append(ConnectionAttach(hub, tg, outlet))
                    async with stdio_server() as (read, write):
                        await server.run(read, write, server.create_initialization_options())
            hub.close()
            tg.cancel_scope.cancel()  # the client left: the pump and the writers go too


def _address(value: str) -> tuple[str, int]:
    from asyncai_servers._http import parse_host_port

    try:
        return parse_host_port(value)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def main(args: argparse.Namespace) -> int:
    if os.environ.get(SERVE_ENV):
        return _fail(
            "started by another asyncai-watch serve (an upstream server entry runs serve itself); "
            "list the servers to watch, not serve"
        )
    with log.ndjson_logging(sys.stderr, verbose=args.verbose):
        return _main(args)


def _main(args: argparse.Namespace) -> int:
    try:
        if args.ring < 1:
            raise ConfigError(f"--ring must be >= 1, got {args.ring}")
        if args.push_buffer < 1:
            raise ConfigError(f"--push-buffer must be >= 1, got {args.push_buffer}")
        limits = _limits(args)
        upstreams = _upstreams(args)
        if args.http is not None:
            _address(args.http)
    except ConfigError as exc:
        return _fail(str(exc))
    try:
        anyio.run(functools.partial(_serve, args, upstreams, limits))
    except KeyboardInterrupt:
        return 0
    except BaseException as exc:
        from asyncai_servers._http import bind_error

        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        error = bind_error(exc)
        if error is not None and args.http is not None:
            return _fail(f"cannot serve HTTP on {args.http}: {error.strerror or error}")
        known = [leaf for leaf in _leaves(exc) if isinstance(leaf, WatchError)]
        if known:
            return _fail(str(known[0]))
        interrupted = [leaf for leaf in _leaves(exc) if isinstance(leaf, KeyboardInterrupt)]
        if interrupted:
            return 0
        raise
    return 0
