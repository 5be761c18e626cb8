"""``asyncai-watch`` (and ``python -m asyncai_watch``): watch MCP resources from the shell.

Subcommands:

- ``resources --server SPEC``: list watchable URIs and templates, with their examples;
- ``watch URI --server SPEC [--on-event SRC] [--debounce SECONDS] [--json]``: print each notice;
- ``call TOOL [JSON] --server SPEC [--json]``: call one tool (make a change from the shell);
- ``serve``: an MCP server offering watches to a Channels host (docs/claude-code.md).

Bad input (an unknown URI or tool, an unreachable or non-watchable server, a bad filter or JSON) is
one line on stderr and exit 2; a tool that answers with an error is one line and exit 1; Ctrl-C
and SIGTERM end a watch with exit 0 and no traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
from collections.abc import Sequence
from contextlib import AsyncExitStack
from importlib.metadata import version
from typing import Any, Final

import anyio

from asyncai_watch import log
from asyncai_watch._tasks import enter_task_group
from asyncai_watch.cli_help import HelpFormatter, examples
from asyncai_watch.core.echo import quoted, redact
from asyncai_watch.core.limits import Limits
from asyncai_watch.core.notice import Notice
from asyncai_watch.errors import WatchError
from asyncai_watch.exception_groups import leaves
from asyncai_watch.http_auth import add_http_auth_arguments, http_auth_from_args
from asyncai_watch.info import WatchInfo
from asyncai_watch.mcp.body_cap import add_cap_argument
from asyncai_watch.mcp.client import McpResourceSource, tool_result
from asyncai_watch.mcp.server_spec import parse_server
from asyncai_watch.mcp.source import MODERN_PROTOCOL_VERSION
from asyncai_watch.notice_json import notice_record
from asyncai_watch.runtime.manager import WatchManager
from asyncai_watch.shapes import resource_dicts

__all__ = ["PROG", "build_parser", "main"]

PROG: Final = "asyncai-watch"


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

    def server_option(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--server",
            action="append",
            default=[],
            required=True,
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
        help="watch URI and print each notice as it comes (Ctrl-C ends)",
        description="Watch URI and print each notice as it comes, until Ctrl-C or SIGTERM (exit 0; a "
        "notice still inside the debounce quiet time is printed first). A stdio --server is a "
        "process of this command's own: a memo served that way can only be changed by it; serve "
        "it over --http to change it from elsewhere (asyncai-watch call).",
        epilog=examples(
            "asyncai-watch watch memo://notes --server http://127.0.0.1:8765/mcp",
            'asyncai-watch watch "file://$PWD/config.json" --server "asyncai-mcp-files $PWD" --debounce 0',
            """asyncai-watch watch memo://notes --server asyncai-mcp-simple --on-event 'event["key"]' --json""",
        ),
        formatter_class=HelpFormatter,
    )
    watch.add_argument("uri", metavar="URI", help="the resource to watch, e.g. memo://notes")
    server_option(watch)
    add_cap_argument(watch)
    watch.add_argument(
        "--on-event", metavar="SRC", help="a Python filter (docs/filters.md), e.g. 'event[\"key\"]'"
    )
    watch.add_argument(
        "--debounce",
        type=float,
        default=None,
        metavar="SECONDS",
        help="quiet time before a burst of changes prints (default 3; 0 prints each read at once)",
    )
    watch.add_argument("--json", action="store_true", help="one JSON object per notice (for jq)")
    watch.add_argument("--name", default="watch", help="the watch's name in notices (default: watch)")
    watch.add_argument(
        "--verbose",
        action="store_true",
        help="also write the watch's NDJSON log on stderr: every event and what became of it "
        "(docs/watch-manager.md)",
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


async def _resources(sources: Sequence[McpResourceSource], as_json: bool) -> int:
    async with AsyncExitStack() as stack:
        sources = await _connected(sources, stack)
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
        how = "subscriptions/listen" if info.protocol == MODERN_PROTOCOL_VERSION else "resources/subscribe"
        watchable = f"watchable via {how}" if info.watchable else "not watchable"
        if info.watchable_by_trial:
            watchable += " (not advertised; accepted when tried)"
        if info.watchable and info.never_notified:
            watchable = f"watchable, never notified yet (via {how})"
        print(
            f"{info.uri}  ({kind}, {info.server}, MCP {info.protocol}, "
            f"{info.mime_type or 'no mimeType'}, {watchable})"
        )
        if info.example:
            print(f"    {info.example}")
    return 0


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
        return fail(f"{tool}: " + " ".join(result.text.split()), 1)
    if result.text or result.structured is None:
        print(result.text, flush=True)
    else:
        print(json.dumps(result.structured, ensure_ascii=False), flush=True)
    return 0


def _print_notice(notice: Notice, info: WatchInfo, as_json: bool) -> None:
    if as_json:
        record = notice_record(notice, server=info.server)
        print(json.dumps(record, ensure_ascii=False), flush=True)
    else:
        print(notice.text, flush=True)


async def _watch(args: argparse.Namespace, sources: Sequence[McpResourceSource]) -> int:
    stopped: list[int] = []
    failed = False
    with anyio.CancelScope() as connecting:
        running = [connecting]
        async with AsyncExitStack() as stack:
            tg = await enter_task_group(stack)
            tg.start_soon(_until_signalled, running, stopped)
            sources = await _connected(sources, stack)
            manager = await stack.enter_async_context(WatchManager(sources, limits=limits_for(args.debounce)))
            info = await manager.watch_start(args.name, args.uri, args.on_event)
            print(
                f"{PROG}: watching {info.uri} on {info.server} ({info.shape}); Ctrl-C stops",
                file=sys.stderr,
                flush=True,
            )
            with anyio.CancelScope() as printing:
                running.append(printing)
                async for notice in manager.notices:
                    _print_notice(notice, info, args.json)
                    if notice.meta.get("failed") == "true":
                        failed = True
                        break
            if stopped:
                # A graceful exit: a change still inside the debounce quiet time is printed now,
                # not dropped. flush() puts it on notices before it returns.
                await manager.flush()
                while True:
                    try:
                        notice = manager.notices.receive_nowait()
                    except anyio.WouldBlock:
                        break
                    _print_notice(notice, info, args.json)
            tg.cancel_scope.cancel()
    return 1 if failed and not stopped else 0


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
    try:
        if args.command == "call":
            arguments = _arguments(args.arguments)
            spec = parse_server(args.server)
            auth = http_auth_from_args(args)
            if (args.token_file is not None or args.auth is not None) and not spec.is_http:
                return fail("--token-file and --auth apply to an http(s) --server URL")
            source = spec.source(auth, max_message_bytes=args.max_message_bytes)
            return anyio.run(_call, source, args.tool, arguments, args.json)
        specs = [parse_server(text) for text in args.server]
        auth = http_auth_from_args(args, warn=warn)
        if (args.token_file is not None or args.auth is not None) and not any(s.is_http for s in specs):
            return fail("--token-file and --auth apply to http(s) --server URLs; give at least one")
        # A malformed command or URL fails here, before anything starts.
        sources = [spec.source(auth, max_message_bytes=args.max_message_bytes) for spec in specs]
        if args.command == "resources":
            return anyio.run(_resources, sources, args.json)
        if args.debounce is not None and not (args.debounce >= 0 and args.debounce != float("inf")):
            return fail(f"--debounce must be a finite number of seconds >= 0, got {args.debounce}")
        with log.ndjson_logging(sys.stderr, verbose=True) if args.verbose else contextlib.nullcontext():
            return anyio.run(_watch, args, sources)
    except KeyboardInterrupt:
        return 0
    except BaseException as exc:
        known = _known(exc)
        if known is None:
            raise
        return fail(str(known) or type(known).__name__)


def _known(exc: BaseException) -> BaseException | None:
    """The user-facing error inside ``exc`` (task groups wrap errors in groups), if it is one."""
    return next((leaf for leaf in leaves(exc) if isinstance(leaf, WatchError | ValueError | OSError)), None)


if __name__ == "__main__":
    sys.exit(main())
