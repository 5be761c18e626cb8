"""The commands of ``asyncai-watch`` (entry: :mod:`asyncai_watch.cli`).

Subcommands:

- ``resources --server SPEC``: list watchable URIs and templates, with their examples;
- ``watch URI... --server SPEC [--on-event SRC] [--debounce SECONDS] [--json] [--once | --count N]
  [--exec CMD] [--initial]``: print each notice (or run CMD on it);
- ``call TOOL [JSON] --server SPEC [--json]``: call one tool (make a change from the shell);
- ``serve``: an MCP server offering watches to a Channels host (docs/claude-code.md).

Bad input (an unknown URI or tool, an unreachable or non-watchable server, a bad filter or JSON) is
one line on stderr and exit 2; a tool that answers with an error is one line and exit 1; Ctrl-C
and SIGTERM end a watch with exit 0 and no traceback, and so does a closed stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import signal
import stat
import sys
import urllib.parse
from collections.abc import Awaitable, Sequence
from contextlib import AsyncExitStack
from importlib.metadata import version
from pathlib import Path
from typing import Any, Final, TypeVar

import anyio
import anyio.abc
import attrs

from asyncai_watch import log
from asyncai_watch._tasks import enter_task_group
from asyncai_watch.cli_help import HelpFormatter, examples
from asyncai_watch.cli_status import StatusLine, StatusLogHandler
from asyncai_watch.core.limits import Limits
from asyncai_watch.core.notice import Notice
from asyncai_watch.echo import quoted, redact
from asyncai_watch.errors import WatchError
from asyncai_watch.exception_groups import leaves
from asyncai_watch.http_auth import HttpAuth, add_http_auth_arguments, http_auth_from_args
from asyncai_watch.info import ResourceInfo, WatchInfo
from asyncai_watch.mcp.body_cap import add_cap_argument
from asyncai_watch.mcp.client import McpResourceSource, tool_result
from asyncai_watch.mcp.server_spec import ServerSpec, parse_server
from asyncai_watch.mcp.source import SUBSCRIPTION_METHODS, subscription_mode_for
from asyncai_watch.notice_json import event_env, initial_record, notice_record
from asyncai_watch.runtime.manager import WatchManager
from asyncai_watch.shapes import resource_dicts

__all__ = ["PROG", "build_parser", "main"]

T = TypeVar("T")

PROG: Final = "asyncai-watch"
COMPLETION_SHELLS: Final = ("bash", "zsh", "fish", "tcsh")
MAX_COUNT: Final = 1_000_000
"""The largest ``--count``."""
MAX_EXEC_TEXT: Final = 32 * 1024
"""Characters of a notice's text in ``ASYNCAI_WATCH_TEXT`` (the whole notice is on stdin): one
environment string may hold 128 KiB on Linux, and a longer one would fail the command's start."""
WAITING_AFTER: Final = 10.0
"""Seconds of silence from a server before the CLI says what it is waiting for."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Watch MCP resources from the shell: every change prints as it comes, with no polling.",
        epilog=examples(
            "asyncai-watch resources --server asyncai-mcp-simple",
            "asyncai-watch watch memo://notes --server http://127.0.0.1:8765/mcp",
            """asyncai-watch call memo_set '{"key": "todo", "value": "milk"}' --server http://127.0.0.1:8765/mcp""",
            "asyncai-watch COMMAND --help   # each command's options and examples",
        ),
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="store_true", help="print the installed version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def server_option(p: argparse.ArgumentParser, *, required: bool = True) -> None:
        p.add_argument(
            "--server",
            action="append",
            default=[],
            required=required,
            metavar="SPEC",
            help="[NAME=]COMMAND (a stdio server, e.g. asyncai-mcp-simple) or [NAME=]URL "
            "(Streamable HTTP, e.g. http://127.0.0.1:8765/mcp); repeatable",
        )

    resources = sub.add_parser(
        "resources",
        help="list the watchable URIs and templates of the servers",
        description="List the servers' resources and URI templates: whether each is watchable, its MIME "
        "type, and an example watch_start call.",
        epilog=examples(
            "asyncai-watch resources --server asyncai-mcp-simple",
            "asyncai-watch resources --server files='asyncai-mcp-files .' --json",
        ),
        formatter_class=HelpFormatter,
    )
    server_option(resources)
    add_cap_argument(resources)
    add_http_auth_arguments(resources, servers="http(s) --server")
    resources.add_argument("--json", action="store_true", help="one JSON object per line")

    watch = sub.add_parser(
        "watch",
        help="watch URIs and print each notice as it comes (Ctrl-C ends)",
        description="Watch each URI and print each notice as it comes, until Ctrl-C or SIGTERM (exit 0; "
        "a notice still inside the debounce quiet time is printed first), --count notices, or a "
        "closed stdout (exit 0). A stdio --server is a process of this command's own: a memo served "
        "that way can only be changed by it; serve it over --http to change it from elsewhere "
        "(asyncai-watch call).",
        epilog=examples(
            "asyncai-watch watch memo://notes --server http://127.0.0.1:8765/mcp",
            'asyncai-watch watch "file://$PWD/config.json" --server "asyncai-mcp-files $PWD" --debounce 0',
            """asyncai-watch watch memo://notes --server asyncai-mcp-simple --on-event 'event["key"]' --json""",
            "asyncai-watch watch memo://notes --server http://127.0.0.1:8765/mcp --once --json   # one notice, then exit 0",
            """asyncai-watch watch memo://notes --server http://127.0.0.1:8765/mcp --exec 'jq -c .lines'""",
        ),
        formatter_class=HelpFormatter,
    )
    watch.add_argument(
        "uri", metavar="URI", nargs="+", help="a resource to watch, e.g. memo://notes (one or more)"
    )
    server_option(watch, required=False)
    watch.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="also watch through the servers of the mcpServers object of a .mcp.json-style file "
        "(as serve --config reads it)",
    )
    watch.add_argument(
        "--only", action="append", default=[], metavar="NAME", help="with --config: use only this entry"
    )
    watch.add_argument(
        "--watch-state",
        type=Path,
        metavar="PATH",
        help="resume across restarts: the watches and where they stood are kept in PATH (and "
        "PATH.resume.sqlite); started again, it first prints what changed while it was down, and a "
        "notice killed before it was printed is printed again, flagged (docs/cli.md)",
    )
    add_cap_argument(watch)
    watch.add_argument(
        "--on-event",
        metavar="SRC",
        help="a Python filter (docs/filters.md), e.g. 'event[\"key\"]'; it may read, not write",
    )
    watch.add_argument(
        "--debounce",
        type=float,
        default=None,
        metavar="SECONDS",
        help="quiet time before a burst of changes prints (default 3; 0 prints each read at once)",
    )
    watch.add_argument("--json", action="store_true", help="one JSON object per notice (for jq)")
    stop = watch.add_mutually_exclusive_group()
    stop.add_argument("--once", action="store_true", help="exit 0 after the first notice (--count 1)")
    stop.add_argument("--count", type=int, metavar="N", help=f"exit 0 after N notices (1 to {MAX_COUNT:,})")
    watch.add_argument(
        "--exec",
        metavar="CMD",
        help="run the shell command CMD on each notice instead of printing it, one at a time: the "
        "notice's JSON on its stdin and ASYNCAI_WATCH_NAME, _URI, _SERVER, _TEXT, _FAILED in its "
        "environment, and its first event's fields as ASYNCAI_WATCH_EVENT_TYPE, _KEY, _OLD, _NEW, ...",
    )
    watch.add_argument(
        "--initial",
        action="store_true",
        help="print each URI's current content first (like kubectl get -w), then the changes",
    )
    watch.add_argument(
        "--name",
        default="watch",
        help="the watch's name in notices (default: watch; with several URIs watch-2, watch-3, ...)",
    )
    talk = watch.add_mutually_exclusive_group()
    talk.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also write the watch's NDJSON log on stderr: every event and what became of it "
        "(docs/watch-manager.md)",
    )
    talk.add_argument(
        "-q", "--quiet", action="store_true", help="no status on stderr (errors and warnings still)"
    )
    watch.add_argument(
        "--log-file",
        type=Path,
        metavar="PATH",
        help="append the watch's NDJSON log (every event, as --verbose writes it) to PATH",
    )
    add_http_auth_arguments(watch, servers="http(s) --server")

    call = sub.add_parser(
        "call",
        help="call one tool of a server and print its result",
        description="Call TOOL on the server with JSON arguments and print its result (the text; the "
        "structured content when there is no text). A tool error is one line on stderr and exit 1.",
        epilog=examples(
            """asyncai-watch call memo_set '{"key": "todo", "value": "milk"}' --server http://127.0.0.1:8765/mcp""",
            "asyncai-watch call memo_stats --server http://127.0.0.1:8765/mcp --json",
        ),
        formatter_class=HelpFormatter,
    )
    call.add_argument("tool", metavar="TOOL", help="the tool's name, e.g. memo_set")
    call.add_argument(
        "arguments",
        metavar="JSON",
        nargs="?",
        default="{}",
        help="the tool's arguments as a JSON object (default {})",
    )
    call.add_argument(
        "--server",
        required=True,
        metavar="SPEC",
        help="the server: COMMAND (stdio: a process of its own, e.g. a private memo) or URL "
        "(Streamable HTTP, e.g. http://127.0.0.1:8765/mcp)",
    )
    call.add_argument(
        "--json",
        action="store_true",
        help="print the raw MCP result as one JSON object (content, structuredContent, isError)",
    )
    add_cap_argument(call)
    add_http_auth_arguments(call, servers="http(s) --server")

    completion = sub.add_parser(
        "completion",
        help="print a shell completion script for asyncai-watch",
        description="Print the completion script of this command for SHELL: every subcommand and "
        "option (made from the parser itself by shtab). Load it from the shell's startup file.",
        epilog=examples(
            "asyncai-watch completion bash   # > ~/.local/share/bash-completion/completions/asyncai-watch",
            "asyncai-watch completion zsh    # > ~/.zfunc/_asyncai-watch (with fpath+=~/.zfunc)",
            "asyncai-watch completion fish   # > ~/.config/fish/completions/asyncai-watch.fish",
        ),
        formatter_class=HelpFormatter,
    )
    completion.add_argument(
        "shell", metavar="SHELL", choices=COMPLETION_SHELLS, help=", ".join(COMPLETION_SHELLS)
    )

    serve = sub.add_parser(
        "serve",
        help="serve watches to a Channels host such as Claude Code (MCP, stdio)",
        epilog=examples(
            "asyncai-watch serve --server files='asyncai-mcp-files .'",
            "asyncai-watch serve --server memo=http://127.0.0.1:8765/mcp --http 127.0.0.1:8766",
        ),
        formatter_class=HelpFormatter,
    )
    from asyncai_watch import serve as serve_module

    serve_module.add_arguments(serve)
    return parser


def fail(message: str, code: int = 2) -> int:
    """One line on stderr, then the exit code (2: bad input); no URL in it keeps its secrets."""
    print(f"{PROG}: error: {redact(message)}", file=sys.stderr, flush=True)
    return code


def warn(message: str) -> None:
    """One warning line on stderr; the command goes on."""
    print(f"{PROG}: warning: {message}", file=sys.stderr, flush=True)


def limits_for(debounce: float | None) -> Limits:
    """The watch limits for ``--debounce`` (quiet time; the burst cap grows with it)."""
    if debounce is None:
        return Limits()
    return Limits(debounce_quiet=debounce, debounce_max_wait=max(debounce, Limits().debounce_max_wait))


async def _until_signalled(running: list[anyio.CancelScope], stopped: list[int]) -> None:
    """The first Ctrl-C or SIGTERM cancels what runs now: connecting, or printing notices."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            stopped.append(signum)
            running[-1].cancel()
            return


async def _connected(sources: Sequence[McpResourceSource], stack: AsyncExitStack) -> list[McpResourceSource]:
    return [await stack.enter_async_context(source) for source in sources]


async def _resources(sources: Sequence[McpResourceSource], specs: Sequence[ServerSpec], as_json: bool) -> int:
    async with AsyncExitStack() as stack:
        sources = await _connected(sources, stack)
        # The --server text that reached each server, for the shell command shown as its example.
        spec_of = {source.name: spec for source, spec in zip(sources, specs, strict=True)}
        manager = await stack.enter_async_context(WatchManager(sources))
        infos = await manager.list_resources()
    if as_json:
        for info in infos:
            print(json.dumps({**resource_dicts([info])[0]}, ensure_ascii=False), flush=True)
        return 0
    if not infos:
        print("(no resources listed)")
    for info in infos:
        kind = "template" if info.template else "resource"
        how = SUBSCRIPTION_METHODS[subscription_mode_for(info.protocol)]
        watchable = f"watchable via {how}" if info.watchable else "not watchable"
        if info.watchable_by_trial:
            watchable += " (not advertised; accepted when tried)"
        if info.watchable and info.never_notified:
            watchable = f"watchable, never notified yet (via {how})"
        print(
            f"{info.uri}  ({kind}, {info.server}, MCP {info.protocol}, "
            f"{info.mime_type or 'no mimeType'}, {watchable})"
        )
        example = _shell_example(info, spec_of.get(info.server))
        if example:
            print(f"    {example}")
    return 0


_EXAMPLE_URI = re.compile(r"""uri=(["'])(.+?)\1""")


def _shell_example(info: ResourceInfo, spec: ServerSpec | None) -> str | None:
    """The command that watches this resource: the library's example (``await watch_start(name=...,
    uri=...)``) is Python, which a shell user cannot run."""
    found = _EXAMPLE_URI.search(info.example or "")
    uri = found.group(2) if found is not None else (None if info.template else info.uri)
    if uri is None:
        return None
    server = spec.target if spec is not None else "SPEC"
    return f"{PROG} watch {shlex.quote(uri)} --server {shlex.quote(server)}"


def _arguments(text: str) -> dict[str, Any]:
    """The JSON arguments of ``call``, which must be an object."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f'JSON arguments: {exc}; give an object, e.g. \'{{"key": "todo"}}\'') from None
    if not isinstance(value, dict):
        raise ValueError(f'JSON arguments must be an object, e.g. \'{{"key": "todo"}}\', got {quoted(text)}')
    return value


async def _call(source: McpResourceSource, tool: str, arguments: dict[str, Any], as_json: bool) -> int:
    async with source:
        raw = await source.call_tool_result(tool, arguments)
    if as_json:
        print(raw.model_dump_json(by_alias=True, exclude_none=True), flush=True)
        return 1 if raw.is_error else 0
    result = tool_result(raw)
    if result.is_error:
        text = " ".join(result.text.split())
        # Servers often name the tool themselves ("memo_set: `key` must be ..."): say it once.
        return fail(text if text.startswith(f"{tool}:") else f"{tool}: {text}", 1)
    if result.text or result.structured is None:
        print(result.text, flush=True)
    else:
        print(json.dumps(result.structured, ensure_ascii=False), flush=True)
    return 0


def _record(notice: Notice, info: WatchInfo | None) -> dict[str, Any]:
    """The ``--json`` object of a notice (and what ``--exec`` reads on stdin): schema
    ``asyncai-watch/notice/1`` (:mod:`asyncai_watch.notice_json`)."""
    record = notice_record(notice, server=info.server if info else None)
    if record["watch"] is None:
        record["watch"] = info.name if info else ""
    if record["uri"] is None:
        record["uri"] = info.uri if info else ""
    return record


def _shell_advice(notice: Notice, info: WatchInfo | None) -> Notice:
    """A failure notice advises the library's ``watch_start(...)``; a shell user reruns the command."""
    if notice.meta.get("failed") != "true":
        return notice
    text = notice.text.split(" It no longer delivers changes;", 1)[0].split(". Start it again", 1)[0]
    uri = notice.meta.get("uri", info.uri if info else "URI")
    text = (
        f"{text.rstrip('.')}. It no longer delivers changes; run asyncai-watch watch {quoted(uri)} ... again."
    )
    return attrs.evolve(notice, text=text)


class _Output:
    """Where notices go: stdout (plain or ``--json``) or ``--exec CMD``, one at a time."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.as_json: bool = args.json
        self.exec: str | None = args.exec

    async def notice(self, notice: Notice, info: WatchInfo | None) -> None:
        notice = _shell_advice(notice, info)
        record = _record(notice, info)
        if self.exec is not None:
            await self._run(notice, record)
        elif self.as_json:
            print(json.dumps(record, ensure_ascii=False), flush=True)
        else:
            print(notice.text, flush=True)

    def restored(self, notice: Notice) -> None:
        """With ``--watch-state``: what became of each saved watch (resumed, caught up N changes, a
        fresh baseline and why): a ``--json`` record (``source: "watch.restore"``), else on stderr."""
        if self.as_json:
            print(json.dumps(_record(notice, None), ensure_ascii=False), flush=True)
        else:
            print(notice.text, file=sys.stderr, flush=True)

    async def initial(self, info: WatchInfo, content: Any) -> None:
        if self.as_json or self.exec is not None:
            record = initial_record(info.name, info.uri, content, server=info.server)
            print(json.dumps(record, ensure_ascii=False), flush=True)
        else:
            text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False, indent=2)
            print(f"INITIAL {info.uri}\n{text}", flush=True)

    async def _run(self, notice: Notice, record: dict[str, Any]) -> None:
        assert self.exec is not None
        text = notice.text[:MAX_EXEC_TEXT]
        env = {
            **os.environ,
            "ASYNCAI_WATCH_NAME": str(record["watch"]),
            "ASYNCAI_WATCH_URI": str(record["uri"]),
            "ASYNCAI_WATCH_SERVER": str(record["server"] or ""),
            "ASYNCAI_WATCH_TEXT": text,
            "ASYNCAI_WATCH_FAILED": "1" if record["failed"] else "0",
            **event_env(record),
        }
        body = (json.dumps(record, ensure_ascii=False) + "\n").encode()
        # One at a time: the next notice waits for this command (they queue in the manager).
        done = await anyio.run_process(self.exec, input=body, stdout=None, stderr=None, env=env, check=False)
        if done.returncode != 0:
            warn(f"--exec command exited {done.returncode} on a notice of {record['uri']}; watching on")


async def _waiting_note(status: StatusLine, what: str, scope: anyio.CancelScope) -> None:
    """Say what a silent server keeps us waiting for, once it has been a while."""
    with scope:
        await anyio.sleep(WAITING_AFTER)  # a one-shot deadline for a message, not a wait for a condition
        status.update(f"still waiting for {what} after {WAITING_AFTER:g} s; Ctrl-C stops")


async def _step(
    status: StatusLine, what: str, step: Awaitable[T], tg: anyio.abc.TaskGroup, *, note: bool = False
) -> T:
    """Await ``step`` with ``what`` on the status line, and a note if it keeps us waiting.

    The note's task runs in ``tg`` (the command's), not in a task group of its own: ``step`` may
    enter a context whose task group must outlive this call."""
    status.show(f"{what} ...")
    scope = anyio.CancelScope()
    if note:
        tg.start_soon(_waiting_note, status, what, scope)
    try:
        return await step
    finally:
        scope.cancel()


def _names(args: argparse.Namespace) -> list[str]:
    if len(args.uri) == 1:
        return [args.name]
    return [args.name if i == 0 else f"{args.name}-{i + 1}" for i in range(len(args.uri))]


async def _watch(args: argparse.Namespace, sources: Sequence[McpResourceSource], state: Path | None) -> int:
    status = StatusLine.on(sys.stderr, PROG, quiet=args.quiet)
    handler = StatusLogHandler.install(status)
    try:
        return await _watch_with(args, sources, state, status)
    finally:
        log.logger.removeHandler(handler)
        status.clear()


async def _watch_with(
    args: argparse.Namespace, sources: Sequence[McpResourceSource], state: Path | None, status: StatusLine
) -> int:
    stopped: list[int] = []
    failed = False
    out = _Output(args)
    count: int | None = 1 if args.once else args.count
    printed = 0
    with anyio.CancelScope() as connecting:
        running = [connecting]
        async with AsyncExitStack() as stack:
            tg = await enter_task_group(stack)
            tg.start_soon(_until_signalled, running, stopped)
            tg.start_soon(_until_stdout_closed, running, stopped)
            connected = []
            for source in sources:
                what = f"server {source.description} to answer the MCP handshake (initialize)"
                # An HTTP server that accepts and never answers is silent for the whole connect
                # timeout; a stdio server's own stderr shows how its start goes.
                silent = source.description.startswith("URL ")
                connected.append(
                    await _step(status, what, stack.enter_async_context(source), tg, note=silent)
                )
            manager = await stack.enter_async_context(
                WatchManager(connected, limits=limits_for(args.debounce), watch_state=state)
            )
            infos: dict[str, WatchInfo] = {w.name: w for w in manager.watch_list()}
            for name, uri in zip(_names(args), args.uri, strict=True):
                saved = infos.get(name)
                if (
                    saved is not None
                    and (saved.uri, saved.on_event) == (uri, args.on_event)
                    and saved.status != "failed"
                ):
                    continue  # restored from --watch-state (a changed URI or filter replaces it)
                if name in infos:
                    await manager.watch_stop(name)
                try:
                    info = await _step(
                        status, f"subscribing to {uri}", manager.watch_start(name, uri, args.on_event), tg
                    )
                except WatchError as exc:
                    raise await _routed_error(exc, manager, len(connected)) from None
                infos[name] = info
            for info in infos.values():
                status.say(f"watching {info.uri} on {info.server} ({info.shape}); Ctrl-C stops")
            if args.initial:
                for info in infos.values():
                    await out.initial(info, await manager.read_resource(info.uri))
            with anyio.CancelScope() as printing:
                running.append(printing)
                async for notice in manager.notices:
                    if notice.source != Notice.WATCH:
                        if notice.source == Notice.RESTORE:
                            out.restored(notice)
                        continue
                    await out.notice(notice, infos.get(notice.meta.get("name", "")))
                    manager.notice_taken(notice)  # printed and flushed: a kill now loses nothing
                    printed += 1
                    if notice.meta.get("failed") == "true":
                        failed = True
                        break
                    if count is not None and printed >= count:
                        break
            if stopped and stopped[0] != _STDOUT_CLOSED:
                # A graceful exit: a change still inside the debounce quiet time is printed now,
                # not dropped. flush() puts it on notices before it returns.
                await manager.flush()
                while count is None or printed < count:
                    try:
                        notice = manager.notices.receive_nowait()
                    except anyio.WouldBlock:
                        break
                    if notice.source == Notice.WATCH:
                        await out.notice(notice, infos.get(notice.meta.get("name", "")))
                        manager.notice_taken(notice)
                        printed += 1
            tg.cancel_scope.cancel()
    return 1 if failed and not stopped else 0


_STDOUT_CLOSED: Final = -1


async def _until_stdout_closed(running: list[anyio.CancelScope], stopped: list[int]) -> None:
    """``watch ... | head -n1``: once the reader of stdout has gone, stop (exit 0) at once, not
    at the next notice, which may never come. Only a pipe tells its writer so."""
    try:
        fd = sys.stdout.fileno()
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return
    except (OSError, ValueError):
        return
    # The pipe's write end never turns readable, but epoll reports the reader's leaving (EPOLLERR)
    # whatever was asked for, and the event loop wakes its reader for it.
    await anyio.wait_readable(fd)
    stopped.append(_STDOUT_CLOSED)
    running[-1].cancel()


async def _routed_error(exc: WatchError, manager: WatchManager, servers: int) -> BaseException:
    """With several servers, a URI none of them serves was tried on one; name what every one serves."""
    if servers < 2:
        return exc
    try:
        infos = await manager.list_resources()
    except Exception:  # the listing is a hint; the error stands without it
        return exc
    served: dict[str, list[str]] = {}
    for info in infos:
        served.setdefault(info.server, []).append(info.uri)
    listing = "; ".join(f"{server}: {', '.join(uris)}" for server, uris in served.items())
    return WatchError(f"{exc}; the servers serve: {listing}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        print(f"asyncai-watch {version('asyncai-watch')}")
        return 0
    if args.command == "serve":
        from asyncai_watch import serve as serve_module

        return serve_module.main(args)
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "completion":
        import shtab

        print(shtab.complete(parser, shell=args.shell), flush=True)
        return 0
    try:
        if args.command == "call":
            arguments = _arguments(args.arguments)
            spec = parse_server(args.server)
            auth = http_auth_from_args(args)
            if (args.token_file is not None or args.auth is not None) and not spec.is_http:
                return fail("--token-file and --auth apply to an http(s) --server URL")
            source = spec.source(auth, max_message_bytes=args.max_message_bytes)
            return anyio.run(_call, source, args.tool, arguments, args.json)
        if args.command == "watch":
            problem = _check_watch_args(args)
            if problem is not None:
                return fail(problem)
        specs = [parse_server(text) for text in args.server]
        auth = http_auth_from_args(args, warn=warn)
        if (args.token_file is not None or args.auth is not None) and not any(s.is_http for s in specs):
            return fail("--token-file and --auth apply to http(s) --server URLs; give at least one")
        # A malformed command or URL fails here, before anything starts.
        sources = [spec.source(auth, max_message_bytes=args.max_message_bytes) for spec in specs]
        if args.command == "resources":
            return anyio.run(_resources, sources, specs, args.json)
        sources += _config_sources(args, auth)
        if not sources:
            return fail("name the servers: --server [NAME=]COMMAND|URL (repeatable) or --config .mcp.json")
        try:
            # Line-buffered, closed at exit: each record is on disk once written.
            log_file = args.log_file.open("a", encoding="utf-8", buffering=1) if args.log_file else None
        except OSError as exc:
            return fail(
                f"--log-file: cannot open {str(args.log_file)!r} for appending: {exc.strerror or exc}"
            )
        with contextlib.ExitStack() as logs:
            if log_file is not None:
                logs.enter_context(log_file)
            if args.verbose or log_file is not None:
                logs.enter_context(log.ndjson_logging(log_file or sys.stderr, verbose=True))
            return anyio.run(_watch, args, sources, args.watch_state)
    except KeyboardInterrupt:
        return 0
    except BaseException as exc:
        if _found(exc, KeyboardInterrupt) is not None:
            return 0
        if _found(exc, BrokenPipeError) is not None:
            raise BrokenPipeError from None  # asyncai_watch.cli: stdout's reader left, exit 0
        known = _known(exc)
        if known is None:
            raise
        return fail(_leading_with_advice(str(known) or type(known).__name__))


def _check_watch_args(args: argparse.Namespace) -> str | None:
    """What is wrong with ``watch``'s own options, if anything."""
    if args.debounce is not None and not (args.debounce >= 0 and args.debounce != float("inf")):
        return f"--debounce must be a finite number of seconds >= 0, got {args.debounce}"
    if args.count is not None and not 1 <= args.count <= MAX_COUNT:
        return f"--count must be a number of notices from 1 to {MAX_COUNT:,}, got {args.count}"
    if len(args.uri) > Limits().max_watches:
        return (
            f"watch takes at most {Limits().max_watches} URIs at once (the watch limit), got {len(args.uri)}"
        )
    if len(set(args.uri)) != len(args.uri):
        return "each URI once: the same URI is given twice"
    if args.only and args.config is None:
        return "--only selects entries of --config FILE; give --config too"
    if args.exec is not None and not args.exec.strip():
        return "--exec needs a shell command, e.g. --exec 'jq -c .lines'"
    return None


def _config_sources(args: argparse.Namespace, auth: HttpAuth) -> list[McpResourceSource]:
    """The servers of ``--config`` (a .mcp.json's ``mcpServers``, as ``serve --config`` reads it)."""
    if args.config is None:
        return []
    from asyncai_watch.serve.config import load_config, select

    sources = []
    for upstream in select(load_config(args.config), args.only):
        if upstream.url is not None:
            sources.append(
                McpResourceSource.http(
                    upstream.url,
                    name=upstream.link_name,
                    headers={**(auth.headers or {}), **upstream.headers} or None,
                    auth=auth.auth_for(upstream.url),
                    connect_timeout=auth.connect_timeout,
                    max_message_bytes=args.max_message_bytes,
                )
            )
        else:
            sources.append(
                McpResourceSource.stdio(
                    list(upstream.argv),
                    name=upstream.link_name,
                    env={**os.environ, **upstream.env},
                    max_message_bytes=args.max_message_bytes,
                )
            )
    return sources


def _found(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _found(inner, kind)
            if found is not None:
                return found
    return None


_HTTP_404 = re.compile(r"cannot connect to MCP server (\S+).*HTTP 404")


def _leading_with_advice(message: str) -> str:
    """The error with what to do first: the library's chain names each layer, outermost first,
    which puts the server's own answer (the useful part) last."""
    m = _HTTP_404.search(message)
    if m is not None and not urllib.parse.urlsplit(m.group(1).strip("'\"")).path.rstrip("/").endswith("/mcp"):
        return f"is the path right? MCP servers usually serve at /mcp (e.g. http://127.0.0.1:8765/mcp): {message}"
    subscribing = re.match(r"watch_start: subscribing on server '([^']*)' failed: \w+: (.*)", message, re.S)
    if subscribing is not None:
        # "server 'memo': subscriptions/listen 'memo://x' failed (-32602): memo: cannot subscribe ..."
        server, rest = subscribing.groups()
        answer = re.match(r"server '[^']*': \S+ (.*?) failed \((-?\d+)\): (.*)", rest, re.S)
        if answer is not None:
            uri, code, said = answer.groups()
            return f"{said} (server {server!r} refused the subscription to {uri}, error {code})"
        return f"{rest} (server {server!r}, subscribing)"
    return message


def _known(exc: BaseException) -> BaseException | None:
    """The user-facing error inside ``exc`` (task groups wrap errors in groups), if it is one."""
    return next((leaf for leaf in leaves(exc) if isinstance(leaf, WatchError | ValueError | OSError)), None)


if __name__ == "__main__":
    sys.exit(main())
