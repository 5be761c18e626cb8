"""``python -m asyncai_agent --demo``: the whole loop offline, in a few seconds, no key, no network.

1. starts the memo server over stdio (``python -m asyncai_servers.memo``), with
   ``--also-http`` so the same memo is reachable by a second client;
2. the scripted model (``asyncai_agent/demo/memo.json``) sets up a watch on
   ``memo://notes`` with an ``on_event`` filter through a real ``run_code``;
3. the demo writes memo values as a second MCP client (Streamable HTTP), from
   outside the agent: the agent learns of them only through its watch;
4. each notice arrives as a turn; the terminal shows it, the code the model
   runs, and the reply, including one ``NO_REPLY`` that is suppressed.

The terminal shows only the transcript: NDJSON log records go to ``--log PATH``
when given and nowhere otherwise (on stderr they would repeat every notice
between the transcript lines), and the demo says which.

The demo waits on the agent's events (a turn completing), never on a timer;
a step that does not happen within its deadline fails the demo with a
message saying which.
"""

from __future__ import annotations

import json
import sys
import tempfile
from contextlib import AsyncExitStack
from importlib.resources import files
from pathlib import Path
from typing import Any, Final, TextIO

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from asyncai_agent.backends.base import BackendError
from asyncai_agent.backends.scripted import ScriptedBackend, parse_script
from asyncai_agent.events import (
    AgentEvent,
    InputReceived,
    ModelMessage,
    NoticeReceived,
    ReplySuppressed,
    RunCompleted,
    RunFailed,
    RunStarted,
    ToolResult,
)
from asyncai_agent.exits import fail, known_error
from asyncai_agent.session import SessionConfig, open_session
from asyncai_watch import Limits, McpResourceSource
from asyncai_watch.exception_groups import leaves

__all__ = ["DEMO_SCRIPT", "run_demo"]

DEMO_SCRIPT: Final = "memo.json"
STEP_DEADLINE: Final = 30.0
"""Seconds one demo step may take (server start, a turn); generous for a loaded CI machine."""
USER_REQUEST: Final = "Please tell me when my todo changes in the memo; ignore the other keys."


def _indent(prefix: str, text: str) -> str:
    pad = " " * len(prefix)
    lines = text.splitlines() or [""]
    return "\n".join([prefix + lines[0], *(pad + line for line in lines[1:])])


LEGEND: Final = (
    "demo: you> is your message, outside> a write by another MCP client, notice> what the watch "
    "hands the model, agent> its reply"
)


class DemoPrinter:
    """Shows each event as a terminal line: input, notice, turn, code, result, reply."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.suppressed = 0
        self._unread: list[str] = []  # what arrived since the last turn started: "input" / "notice"

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def __call__(self, event: AgentEvent) -> None:
        if isinstance(event, InputReceived):
            self._unread.append("input")
            self.say(_indent("you> ", event.text))
        elif isinstance(event, NoticeReceived):
            self._unread.append("notice")
            wrapper, _, _instruction = event.rendered.text.rpartition("\n")
            self.say(_indent("notice> ", wrapper))
        elif isinstance(event, RunStarted):
            self.say(f"--- turn {event.run_id}: the model reads {self._what(event.picked_up)}")
            self._unread = self._unread[event.picked_up :]
        elif isinstance(event, ModelMessage):
            for call in event.message.tool_calls:
                if event.message.text:
                    self.say(_indent("  model> ", event.message.text))
                self.say(_indent("  run_code> ", str(call.arguments.get("code", ""))))
        elif isinstance(event, ToolResult):
            self.say(_indent("  result> ", event.text))
        elif isinstance(event, ReplySuppressed):
            self.suppressed += 1
            self.say(f"agent: {event.text.strip() or '(empty)'} -> reply suppressed, nothing published")

    def _what(self, picked_up: int) -> str:
        """What a turn reads, in words: "your message", "the notice above", "2 notices above"."""
        seen = self._unread[:picked_up]
        if len(seen) != picked_up or picked_up == 0:
            return f"{picked_up} new message{'s' if picked_up != 1 else ''}"
        inputs, notices = seen.count("input"), seen.count("notice")
        parts = []
        if inputs:
            parts.append("your message" if inputs == 1 else f"your {inputs} messages")
        if notices:
            parts.append("the notice above" if notices == 1 else f"the {notices} notices above")
        return " and ".join(parts)


class _DemoChannel:
    def __init__(self, printer: DemoPrinter) -> None:
        self._printer = printer

    @property
    def name(self) -> str:
        return "demo"

    async def send(self, text: str) -> None:
        self._printer.say(_indent("agent> ", text))


async def _turn_done(events: MemoryObjectReceiveStream[AgentEvent], what: str) -> None:
    """Wait for the next completed turn; a failed turn fails the demo."""
    try:
        with anyio.fail_after(STEP_DEADLINE):
            async for event in events:
                if isinstance(event, RunFailed):
                    raise DemoError(f"the turn after {what} failed: {event.error}")
                if isinstance(event, RunCompleted):
                    return
    except TimeoutError:
        raise DemoError(f"no turn completed within {STEP_DEADLINE:g} s after {what}") from None
    raise DemoError(f"the agent stopped before a turn completed after {what}")


class DemoError(Exception):
    pass


async def _write(writer: McpResourceSource, printer: DemoPrinter, tool: str, **arguments: Any) -> None:
    # A second MCP client's call: a change from outside the agent, seen only through the watch.
    shown = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
    printer.say(f"outside> {tool}({shown})")
    result = await writer.call_tool(tool, arguments)
    if result.is_error:
        raise DemoError(f"{tool}({shown}) failed: {result.text}")


async def _demo(printer: DemoPrinter, *, verbose: bool, session_path: Path | None) -> None:
    async with AsyncExitStack() as stack:
        await _demo_steps(stack, printer, verbose=verbose, session_path=session_path)


def _log_line(log_path: Path | None) -> str:
    if log_path is None:
        return "demo: the NDJSON log is off in the demo; --log FILE writes it to FILE"
    return f"demo: NDJSON log records go to {log_path} (--verbose for every event)"


async def _demo_steps(
    stack: AsyncExitStack, printer: DemoPrinter, *, verbose: bool, session_path: Path | None
) -> None:
    script_text = files("asyncai_agent").joinpath("demo", DEMO_SCRIPT).read_text(encoding="utf-8")
    backend = ScriptedBackend(parse_script(json.loads(script_text), origin=DEMO_SCRIPT), label=DEMO_SCRIPT)
    workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="asyncai-demo-"))
    ready_file = Path(workdir) / "memo-http"
    # The server brings HTTP up before it answers on stdio, so once the stdio connect
    # completes, ready_file holds the URL: no waiting for it.
    memo_cmd = [
        sys.executable,
        "-m",
        "asyncai_servers.memo",
        "--also-http",
        "127.0.0.1:0",
        "--ready-file",
        str(ready_file),
    ]
    config = SessionConfig(
        mcp_stdio=(tuple(memo_cmd),),
        session_path=session_path,
        verbose=verbose,
        # A short debounce so the demo is quick; the defaults are 3 s / 15 s.
        limits=Limits(debounce_quiet=0.2, debounce_max_wait=1.0),
    )
    channel = _DemoChannel(printer)
    printer.say("demo: starting the memo MCP server over stdio: python -m asyncai_servers.memo")
    sources = [McpResourceSource.stdio(memo_cmd, name="memo")]
    # The connect itself is bounded by McpResourceSource's connect timeout.
    async with open_session(
        config, backend, default_channel=channel, observers=[printer], sources=sources
    ) as session:
        events = session.orchestrator.subscribe()
        printer.say(
            f"demo: connected (MCP {session.sources[0].protocol_version}); model: scripted {DEMO_SCRIPT}"
        )
        url = ready_file.read_text(encoding="utf-8").split(" ", 1)[1].strip()
        # The writer closes before the session, so it never talks to a server that has exited.
        async with McpResourceSource.http(url, name="outside") as writer:
            printer.say(f"demo: a second MCP client writes to the same memo over Streamable HTTP: {url}")
            session.orchestrator.submit(USER_REQUEST, channel)
            await _turn_done(events, "the request")

            await _write(writer, printer, "memo_set", key="draft", value="call the plumber?")
            await _write(writer, printer, "memo_set", key="todo", value="buy milk")
            await _turn_done(events, "setting todo")

            await _write(writer, printer, "memo_set", key="todo", value="buy milk ")
            await _turn_done(events, "a whitespace-only change to todo")

            await _write(writer, printer, "memo_delete", key="todo")
            await _turn_done(events, "deleting todo")

        with anyio.fail_after(STEP_DEADLINE):
            await session.orchestrator.wait_idle()
        if not backend.finished:
            raise DemoError(f"the script has turns left: {backend.turns_used} used")


def run_demo(
    *,
    verbose: bool = False,
    session_path: Path | None = None,
    log_path: Path | None = None,
    out: TextIO | None = None,
) -> int:
    """Run the demo; ``log_path`` is only reported here (the caller points the NDJSON log at it)."""
    printer = DemoPrinter(out if out is not None else sys.stdout)
    printer.say(_log_line(log_path))
    printer.say(LEGEND)
    try:
        anyio.run(lambda: _demo(printer, verbose=verbose, session_path=session_path))
    except KeyboardInterrupt:
        return 130
    except BaseException as exc:
        demo_errors = [leaf for leaf in leaves(exc) if isinstance(leaf, DemoError | BackendError)]
        known = demo_errors[0] if demo_errors else known_error(exc)
        if known is None:
            raise
        return fail(f"demo: {known}")
    printer.say(f"demo: done, 4 turns, {printer.suppressed} reply suppressed (NO_REPLY)")
    return 0
