"""``python -m asyncai_agent`` / ``asyncai-agent``: the interactive agent and the offline demo.

Replies go to stdout; NDJSON events go to stderr. A bad argument, a server
that will not start or a missing key prints one ``asyncai-agent: error: ...``
line and exits non-zero (2 for bad arguments, including a ``--watch-state``
file that cannot be used; 1 for failures at run time).
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Final, TextIO

import anyio

from asyncai_agent.backends import BackendError, make_backend
from asyncai_agent.backends.base import Backend
from asyncai_agent.exits import PROG, fail, known_error, warn
from asyncai_agent.orchestrator import Input
from asyncai_agent.session import PendingSources, SessionConfig, make_sources, open_session
from asyncai_watch import StateFileError
from asyncai_watch.cli_help import HelpFormatter, examples
from asyncai_watch.http_auth import add_http_auth_arguments, http_auth_from_args
from asyncai_watch.log import logger, ndjson_logging
from asyncai_watch.mcp.server_spec import parse_server
from asyncai_watch.signals import sigterm_cancels

__all__ = ["TerminalChannel", "build_parser", "main", "stdin_lines"]

EXIT_SIGTERM: Final = 128 + 15
"""The exit status after SIGTERM, as a shell reports a process the signal ended."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "A reference agent with MCP watches: it connects to MCP servers, answers lines from stdin "
            "and turns watch notices into turns. Try --demo (no key, no network)."
        ),
        epilog=examples(
            "asyncai-agent --demo   # offline: memo server + scripted model",
            "asyncai-agent --model openai:gpt-4.1 --server asyncai-mcp-simple",
            "asyncai-agent --model anthropic:claude-sonnet-4-5 --mcp-http http://127.0.0.1:8765/mcp --verbose",
        ),
        formatter_class=HelpFormatter,
    )
    p.add_argument(
        "--server",
        action="append",
        default=[],
        metavar="SPEC",
        help="an MCP server, as asyncai-watch takes it: COMMAND (stdio, e.g. asyncai-mcp-simple) or "
        "URL (Streamable HTTP, e.g. http://127.0.0.1:8765/mcp); repeatable. --mcp-stdio and "
        "--mcp-http are the same, by kind",
    )
    p.add_argument(
        "--mcp-stdio",
        action="append",
        default=[],
        metavar="CMD",
        help="start an MCP server with this command and speak to it over stdio (repeatable), "
        "e.g. --mcp-stdio asyncai-mcp-simple",
    )
    p.add_argument(
        "--mcp-http",
        action="append",
        default=[],
        metavar="URL",
        help="connect to a Streamable HTTP MCP server (repeatable), e.g. http://127.0.0.1:8765/mcp",
    )
    p.add_argument(
        "--model",
        metavar="SPEC",
        help="openai:MODEL (OPENAI_API_KEY; optional with --base-url), anthropic:MODEL "
        "(ANTHROPIC_API_KEY) or scripted:FILE (a replay script, see docs/agent.md)",
    )
    p.add_argument(
        "--base-url",
        metavar="URL",
        help="the model endpoint, e.g. http://127.0.0.1:8080/v1 for llama.cpp / vLLM / Ollama",
    )
    p.add_argument(
        "--watch-state", type=Path, metavar="PATH", help="save watches here and restore them at start"
    )
    p.add_argument("--session", type=Path, metavar="PATH", help="append a JSONL transcript to PATH")
    p.add_argument(
        "-v", "--verbose", action="store_true", help="log every NDJSON event, not only watch.notice"
    )
    p.add_argument(
        "--log-file",
        "--log",
        dest="log",
        type=Path,
        metavar="PATH",
        help="append the NDJSON log to PATH instead of stderr (with --demo the log is off unless "
        "given); --log is the old spelling, kept as an alias",
    )
    p.add_argument(
        "--max-rounds", type=int, default=25, metavar="N", help="model rounds per turn (default 25)"
    )
    p.add_argument("--demo", action="store_true", help="run the offline demo (memo server + scripted model)")
    add_http_auth_arguments(p)  # --token-file, --auth oauth|client-credentials, --oauth-*
    return p


class TerminalChannel:
    """Replies printed to a text stream (stdout)."""

    def __init__(self, out: TextIO | None = None, name: str = "terminal") -> None:
        self._out = out
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    async def send(self, text: str) -> None:
        out = self._out if self._out is not None else sys.stdout
        print(text, file=out, flush=True)


async def stdin_lines(fd: int) -> AsyncIterator[str]:
    """Lines from ``fd`` without blocking the loop, ending at EOF.

    Pipes and terminals are awaited for readability, so the read is cancellable.
    Regular files and devices such as /dev/null cannot be awaited (epoll refuses
    them) but never block either, so they are read in a worker thread.
    """
    pollable = not stat.S_ISREG(os.fstat(fd).st_mode)
    buf = b""
    while True:
        if pollable:
            try:
                await anyio.wait_readable(fd)
            except OSError:  # EPERM: not pollable (e.g. /dev/null)
                pollable = False
        if pollable:
            chunk = os.read(fd, 65536)
        else:
            chunk = await anyio.to_thread.run_sync(os.read, fd, 65536, abandon_on_cancel=True)
        if not chunk:
            break
        buf += chunk
        *complete, buf = buf.split(b"\n")
        for raw in complete:
            yield raw.decode("utf-8", errors="replace").rstrip("\r")
    if buf:
        yield buf.decode("utf-8", errors="replace")


async def _inputs(channel: TerminalChannel, fd: int) -> AsyncIterator[Input]:
    async for line in stdin_lines(fd):
        if line.strip():
            yield Input(line, channel)


async def _interactive(config: SessionConfig, backend: Backend, sources: PendingSources) -> int:
    terminal = TerminalChannel()
    # SIGTERM stops reading and waiting, not the session: it then closes in order (runs,
    # watches, servers, transcript) with nothing in flight, so stdio servers see their
    # client leave instead of a broken pipe.
    async with (
        open_session(config, backend, default_channel=terminal, sources=sources) as session,
        sigterm_cancels() as termination,
    ):
        await session.orchestrator.feed(_inputs(terminal, sys.stdin.fileno()))
        # Shutdown waits for idle: every input claimed and no run active or queued.
        await session.orchestrator.wait_idle()
    return EXIT_SIGTERM if termination.received else 0


def _show_authorization_url(url: str) -> None:
    # One NDJSON record like every other stderr line; WARNING, so it shows without --verbose.
    logger.warning(
        "auth.authorize", extra={"url": url, "do": "open this URL in a browser to authorize access"}
    )


def _log_stream(args: argparse.Namespace) -> TextIO:
    """Where NDJSON log records go: ``--log PATH``, else stderr; the demo keeps them off the terminal."""
    log: Path | None = args.log
    if log is not None:
        # Line-buffered and never closed before exit: each record is on disk once written.
        return log.open("a", encoding="utf-8", buffering=1)
    if args.demo:  # interleaved with the transcript lines, each notice would read twice
        return open(os.devnull, "w", encoding="utf-8")  # lives as long as the process
    return sys.stderr


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        log_stream = _log_stream(args)
    except OSError as exc:
        return fail(f"--log: cannot open {str(args.log)!r} for appending: {exc.strerror or exc}", 2)
    with ndjson_logging(log_stream, verbose=args.verbose):
        return _main(args)


def _main(args: argparse.Namespace) -> int:
    if args.max_rounds < 1:
        return fail(f"--max-rounds must be >= 1, got {args.max_rounds}", 2)
    if args.demo:
        from asyncai_agent.demo import run_demo

        return run_demo(verbose=args.verbose, session_path=args.session, log_path=args.log)
    if args.model is None:
        return fail("--model is required: openai:MODEL, anthropic:MODEL or scripted:FILE (or try --demo)", 2)
    try:
        http_auth = http_auth_from_args(args, show_url=_show_authorization_url, warn=warn)
    except ValueError as exc:
        return fail(str(exc), 2)
    try:
        for text in args.server:
            spec = parse_server(text)
            if spec.name is not None:
                return fail(
                    f"--server {text!r}: the agent names each server by its serverInfo; give "
                    f"--server {spec.target!r} without {spec.name}=",
                    2,
                )
            (args.mcp_http if spec.is_http else args.mcp_stdio).append(spec.target)
    except ValueError as exc:
        return fail(str(exc), 2)
    if (args.token_file is not None or args.auth is not None) and not args.mcp_http:
        return fail("--token-file and --auth apply to http(s) servers; give at least one --server URL", 2)
    config = SessionConfig(
        mcp_stdio=tuple(args.mcp_stdio),
        mcp_http=tuple(args.mcp_http),
        http_auth=http_auth,
        watch_state=args.watch_state,
        session_path=args.session,
        verbose=args.verbose,
        max_rounds=args.max_rounds,
    )
    try:
        sources = make_sources(config)
        backend = make_backend(args.model, base_url=args.base_url)
    except (BackendError, ValueError, TypeError) as exc:
        return fail(str(exc), 2)
    try:
        return anyio.run(_interactive, config, backend, sources)
    except KeyboardInterrupt:
        return 130
    except BaseException as exc:
        known = known_error(exc)
        if known is None:
            raise
        # A --watch-state file that does not load is bad input, like a bad argument.
        return fail(str(known) or type(known).__name__, 2 if isinstance(known, StateFileError) else 1)
