"""``asyncai-watch serve``: MCP resource watches for Claude Code and any Channels host.

The host starts this as an MCP server (stdio, or Streamable HTTP with ``--http``). It
answers the host at once and connects upstream in the background to the servers the user
names (``--server``, or the ``mcpServers`` of a ``.mcp.json`` with ``--config``), each
retried while it is down; runs a :class:`~asyncai_watch.WatchManager` over them, offers the
watch built-ins as tools, and pushes each notice as a ``notifications/claude/channel``.
Every notice is also kept in a bounded ring that the ``watch_notices`` tool reads, because a
host may drop a push without a word (docs/claude-code.md).

On stdio, SIGINT, SIGTERM or the end of stdin end the process at once (exit 0) once no write of
the ``--watch-state`` file is in flight: Claude Code sends SIGINT, then SIGTERM 100 ms later,
then SIGKILL. The stdio upstream servers get SIGTERM on the way out, not waited for.

Modules: :mod:`.config` (upstreams), :mod:`.upstreams` (their connections), :mod:`.bridge`
(the manager and the notices), :mod:`.ring` (the pull side), :mod:`.channel` (the push's
shape, the instructions), :mod:`.hub` (fan-out), :mod:`.server` (the MCP server).
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import signal
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Final, NoReturn, TextIO

import anyio

from asyncai_watch import log
from asyncai_watch.clock import SystemClock, fail_after
from asyncai_watch.core.limits import Limits
from asyncai_watch.echo import redact
from asyncai_watch.errors import LimitError, WatchError
from asyncai_watch.exception_groups import leaves
from asyncai_watch.log_flags import LogFlagError, add_log_flags, logging_configured
from asyncai_watch.mcp.body_cap import DEFAULT_MAX_MESSAGE_BYTES, add_cap_argument
from asyncai_watch.mcp.client import McpResourceSource
from asyncai_watch.server.policy import (
    HttpPolicy,
    PolicyError,
    add_http_arguments,
    check_bind,
    http_policy_from_args,
    stdio_misuse,
)
from asyncai_watch.state_file import StateFile

from .bridge import Bridge
from .channel import instructions
from .config import ConfigError, Upstream, from_server_args, load_config, select
from .hub import DEFAULT_BUFFER, Hub
from .ring import NoticeRing
from .server import DEFAULT_MAX_RESULT, ConnectionAttach, FirstAnswer, build_server
from .upstreams import DEFAULT_WAIT, UpstreamLink

__all__ = ["DEFAULT_RING", "SERVE_ENV", "add_arguments", "main"]

PROG: Final = "asyncai-watch serve"
DEFAULT_RING: Final = 1000
SERVE_ENV: Final = "ASYNCAI_WATCH_SERVE"
"""Set in the environment of every stdio upstream: a serve started by a serve refuses to run."""
EXIT_SAVE_WAIT: Final = 0.08
"""Seconds an exit waits for a ``--watch-state`` write in flight (one takes a few ms)."""


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
    parser.add_argument(
        "--upstream-wait",
        type=float,
        default=DEFAULT_WAIT,
        metavar="SECONDS",
        help=f"how long a tool call waits for an upstream server that is still connecting "
        f"(default {DEFAULT_WAIT:g}); one that is down is reported at once",
    )
    add_cap_argument(parser)
    parser.add_argument(
        "--max-result-chars",
        type=int,
        default=DEFAULT_MAX_RESULT,
        metavar="N",
        help=f"longest tool result handed to the host, in characters (default {DEFAULT_MAX_RESULT:,}); "
        "a read_resource of a larger resource is a tool error naming this cap",
    )
    # NDJSON on stderr at INFO (each watch.notice) unless told otherwise: docs/cli.md#logging-flags.
    add_log_flags(
        parser,
        default_level="INFO",
        file_level="DEBUG",
        verbose_help="log every NDJSON event on stderr (same as --log-level debug)",
        quiet_help="nothing on stderr below ERROR (--log-file still gets every event)",
        log_file_help="append every NDJSON log event (DEBUG unless --log-level says otherwise), and the "
        "stdio upstream servers' stderr, to PATH instead of stderr (for troubleshooting: a host such "
        "as Claude Code hides serve's stderr)",
    )
    # With --http: one token per bridge. Every holder of the token is the same principal and
    # sees the same watches (docs/http-security.md); a request without it is refused.
    add_http_arguments(parser)


def _fail(message: str) -> int:
    print(f"{PROG}: error: {redact(message)}", file=sys.stderr, flush=True)
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
    given = [u.name for u in found if u.name is not None]
    dupes = sorted({n for n in given if given.count(n) > 1})
    if dupes:
        raise ConfigError(
            f"server name(s) {', '.join(map(repr, dupes))} given more than once; names must be unique"
        )
    names = [u.link_name for u in found]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(
            f"two upstream servers are both named {', '.join(map(repr, dupes))}; names must be unique: "
            "give them names with --server NAME=..."
        )
    return found


def _source(
    upstream: Upstream, errlog: TextIO | None = None, max_message: int = DEFAULT_MAX_MESSAGE_BYTES
) -> McpResourceSource:
    try:
        if upstream.url is not None:
            return McpResourceSource.http(
                upstream.url,
                name=upstream.link_name,
                headers=upstream.headers or None,
                max_message_bytes=max_message,
            )
        return McpResourceSource.stdio(
            list(upstream.argv),
            name=upstream.link_name,
            env={**upstream.env, SERVE_ENV: "1"},
            errlog=errlog,  # a file: the child writes to its descriptor
            max_message_bytes=max_message,
        )
    except ValueError as exc:
        raise ConfigError(f"{upstream.origin}: {exc}") from None


def _links(
    upstreams: list[Upstream], errlog: TextIO | None, wait: float, clock: SystemClock, max_message: int
) -> list[UpstreamLink]:
    return [
        UpstreamLink(
            u.link_name,
            functools.partial(_source, u, errlog, max_message),
            target=_source(u).description,  # also checks the command or URL before anything runs
            clock=clock,
            wait=wait,
        )
        for u in upstreams
    ]


async def _serve(
    args: argparse.Namespace,
    upstreams: list[Upstream],
    limits: Limits,
    errlog: TextIO | None,
    policy: HttpPolicy,
) -> None:
    # Imported before serving starts: nothing is left to load between the host's initialize and the answer.
    from asyncai_watch.server.http import serve_http
    from asyncai_watch.server.resumable import streamable_http_app
    from asyncai_watch.server.stdio import stdio_server

    clock = SystemClock()
    links = _links(upstreams, errlog, args.upstream_wait, clock, args.max_message_bytes)
    http = _address(args.http) if args.http is not None else None
    hub = Hub(exclusive=http is None, buffer=args.push_buffer)
    bridge = Bridge(
        links,
        NoticeRing(args.ring),
        hub,
        limits=limits,
        watch_state=args.watch_state,
        verbose=args.verbose,
        wait=args.upstream_wait,
        clock=clock,
    )
    text = instructions([link.name for link in links], {"max_watches": limits.max_watches})
    server = build_server(
        bridge, instructions=text, version=version("asyncai-watch"), max_result=args.max_result_chars
    )
    log.emit("serve.start", upstreams=[link.name for link in links], http=args.http, pid=os.getpid())
    async with anyio.create_task_group() as tg:
        if http is not None:
            await tg.start(bridge.run)
            server.middleware.append(ConnectionAttach(hub, tg, None, clock=clock))
            host, port = http
            if server.subscriptions is not None:
                policy.limits.apply_to(server.subscriptions)
            app = streamable_http_app(server, host=host, limits=policy.limits)
            await serve_http(app, host, port, on_shutdown=hub.close, policy=policy)
        else:
            initialized = anyio.Event()
            await tg.start(bridge.run, initialized)  # the upstreams connect once initialize is answered
            server.middleware.append(FirstAnswer(initialized))
            with hub.attach("connection") as outlet:
                server.middleware.append(ConnectionAttach(hub, tg, outlet, clock=clock))
                async with stdio_server() as (read, write):
                    # Opened inside the transport, so this handler, not the transport's, gets SIGTERM.
                    tg.start_soon(_exit_on_signal, bridge)
                    await server.run(read, write, server.create_initialization_options())
                await _exit(bridge, "the client closed stdin")
        hub.close()
        tg.cancel_scope.cancel()  # the client left: the pump and the writers go too


async def _exit_on_signal(bridge: Bridge) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            await _exit(bridge, signal.Signals(signum).name)


async def _exit(bridge: Bridge, reason: str) -> NoReturn:
    """End the process now: Claude Code follows SIGINT with SIGTERM 100 ms later (see the module).

    What was acknowledged is on disk already (every start and stop saves before it answers);
    a write still in flight is waited for, so no temp file is left behind. The upstream
    connections are not closed one by one: each stdio server (and the filter engine's worker) gets
    SIGTERM, without waiting for it, and sees its stdin close."""
    log.emit("serve.exit", reason=reason)
    try:
        async with fail_after(bridge.clock, EXIT_SAVE_WAIT):
            await bridge.state_saved()
    except TimeoutError:
        pass  # the write goes on in its thread; the file is replaced whole or not at all
    stopped = _stop_children()
    log.emit("serve.children_stopped", pids=stopped)
    for handler in [*logging.getLogger().handlers, *log.logger.handlers]:
        handler.flush()
    sys.stderr.flush()
    os._exit(0)


def _address(value: str) -> tuple[str, int]:
    from asyncai_watch.server.http import parse_host_port

    try:
        return parse_host_port(value)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _stop_children() -> list[int]:
    """SIGTERM each child process's process group; returns the pids signalled.

    The SDK starts every stdio server in a session of its own, so an exit of ours reaches none
    of them: a server that does not read its stdin (a hung one) would outlive us. The children
    are found in ``/proc`` (Linux); elsewhere they are left to see their stdin close."""
    me = os.getpid()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    stopped = []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after "pid (comm)": state, ppid, pgrp
        except (OSError, IndexError):
            continue  # gone meanwhile, or not ours to read
        pid, ppid, pgrp = int(entry), int(fields[1]), int(fields[2])
        if ppid != me:
            continue
        try:
            if pgrp == pid:
                os.killpg(pgrp, signal.SIGTERM)  # the server and whatever it started
            else:
                os.kill(pid, signal.SIGTERM)
        except OSError:
            continue
        stopped.append(pid)
    return stopped


def main(args: argparse.Namespace) -> int:
    if os.environ.get(SERVE_ENV):
        return _fail(
            "started by another asyncai-watch serve (an upstream server entry runs serve itself); "
            "list the servers to watch, not serve"
        )
    # Called in process (a test, a program), the handlers it attaches to stderr must not outlive it.
    try:
        with logging_configured(args, client=True, stderr_format="ndjson") as errlog:
            return _main(args, errlog)
    except LogFlagError as exc:
        return _fail(str(exc))


def _main(args: argparse.Namespace, errlog: TextIO | None) -> int:
    try:
        if args.ring < 1:
            raise ConfigError(f"--ring must be >= 1, got {args.ring}")
        if args.max_result_chars < 1:
            raise ConfigError(f"--max-result-chars must be >= 1, got {args.max_result_chars}")
        if args.push_buffer < 1:
            raise ConfigError(f"--push-buffer must be >= 1, got {args.push_buffer}")
        if not args.upstream_wait >= 0:
            raise ConfigError(f"--upstream-wait must be a number of seconds >= 0, got {args.upstream_wait}")
        limits = _limits(args)
        upstreams = _upstreams(args)
        for upstream in upstreams:
            _source(upstream)  # a malformed command or URL fails here, before anything starts
        if args.http is None and (misuse := stdio_misuse(args)) is not None:
            raise ConfigError(misuse)
        try:
            policy = http_policy_from_args(args)
        except PolicyError as exc:
            raise ConfigError(str(exc)) from None
        if args.http is not None:
            check_bind(policy, _address(args.http)[0], args.http, PROG)
        if args.watch_state is not None:
            with StateFile(args.watch_state) as state:  # released: the manager takes it for good
                state.load(max_watches=limits.max_watches)  # a bad or owned one stops serve here
    except (ConfigError, WatchError) as exc:
        return _fail(str(exc))
    try:
        anyio.run(functools.partial(_serve, args, upstreams, limits, errlog, policy))
    except KeyboardInterrupt:
        return 0
    except BaseException as exc:
        from asyncai_watch.server.http import bind_error

        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        error = bind_error(exc)
        if error is not None and args.http is not None:
            return _fail(f"cannot serve HTTP on {args.http}: {error.strerror or error}")
        known = [leaf for leaf in leaves(exc) if isinstance(leaf, WatchError)]
        if known:
            return _fail(str(known[0]))
        interrupted = [leaf for leaf in leaves(exc) if isinstance(leaf, KeyboardInterrupt)]
        if interrupted:
            return 0
        raise
    return 0
