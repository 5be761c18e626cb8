"""Every shell and Python block in README.md and docs/**/*.md runs, or says what it needs.

A block is a fence tagged ``bash``, ``sh``, ``console`` or ``python``. The line right before its
fence may carry a marker (an HTML comment, invisible on GitHub but plain in the source):

- ``<!-- needs: WHAT -->``: it needs what the suite lacks (a cluster, an API key); not run. The
  list is kept short (:data:`MAX_NEEDS`).
- ``<!-- doc-test: fails offline -->``: a framework program; run offline with no API key and
  with a fake one, it must end with an error saying why (not wait forever).
- ``<!-- doc-test: code mode on COMMAND -->``: ``await ...`` lines for the agent's ``run_code``;
  run in code mode against the stdio server COMMAND.
- ``<!-- doc-test: filter -->``: an ``on_event`` filter; run by the filter engine on a kcp event.
- ``<!-- doc-test: file NAME -->``: a file the page's shell blocks use; written where they run.

Otherwise a Python block runs as a program (exit 0, no traceback), and a shell block runs command
by command, as a reader would type them, in a fresh directory with the installed commands on PATH.
A command that ends by itself must exit 0. One that runs until Ctrl-C (a ``watch``, the bridge, a
server over ``--http``, or a command ending in ``&``) is awaited until its first output line, stays
up while the file's later blocks run, as in another terminal, and is then stopped with SIGINT
(Ctrl-C): it must exit 0. A fixed
``127.0.0.1:PORT`` is mapped to a free port, the same one throughout a file. Nothing sleeps: each
step awaits an exit or an output line, bounded by :data:`WAIT`.
"""

from __future__ import annotations

import ast
import contextlib
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import anyio.abc
import attrs
import pytest

from asyncai_watch.codemode import CodeMode, builtins
from asyncai_watch.filters import EmptyCatalog, default_engine
from asyncai_watch.mcp.client import McpResourceSource
from asyncai_watch.runtime.manager import WatchManager
from asyncai_watch.runtime.tools import tool_functions
from tests.support import ROOT

pytestmark = pytest.mark.anyio

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
WAIT = 240  # seconds: a fresh interpreter importing a framework, on a machine kept busy
# Today's count: the claude command, API keys, clusters, OAuth, installs. A new example that the
# suite cannot run should make room by making another one runnable.
MAX_NEEDS = 22
SHELL = {"bash", "sh", "console"}
PYTHON = {"python"}
FENCE = re.compile(r"^( *)```(\w*)[^\n]*\n(.*?)^ *```", re.M | re.S)
MARKER = re.compile(r"<!--\s*(needs|doc-test):\s*(.*?)\s*-->\s*$")
PORT = re.compile(r"127\.0\.0\.1:(\d{2,5})\b")
# What runs until Ctrl-C: a watch, the bridge, a server over HTTP (stdio ones end with their stdin).
UNTIL_CTRL_C = re.compile(r"\basyncai-watch (watch|serve)\b|\s--http\s")
BACKGROUND = re.compile(r"(.*?[^&])\s*&\s*(?:#[^'\"]*)?")


@attrs.frozen
class Block:
    path: Path
    line: int
    lang: str
    code: str
    marker: tuple[str, str] | None

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> Iterator[Block]:
    text = path.read_text()
    for match in FENCE.finditer(text):
        lang = match[2]
        if lang not in SHELL | PYTHON:
            continue
        code = textwrap.dedent(match[3]) if match[1] else match[3]  # a fence inside a list item
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.search(before)
        line = text.count("\n", 0, match.start()) + 1
        yield Block(path, line, lang, code, (marker[1], marker[2]) if marker else None)


ALL = [block for path in DOCS for block in blocks(path)]
BY_FILE = {path: [b for b in ALL if b.path == path and (b.marker or ("",))[0] != "needs"] for path in DOCS}


def test_few_blocks_need_what_the_suite_lacks() -> None:
    needs = [f"{b.id}: {b.marker[1]}" for b in ALL if b.marker is not None and b.marker[0] == "needs"]
    assert len(needs) <= MAX_NEEDS, "\n".join(needs)
    assert all(b.marker[1] for b in ALL if b.marker is not None), "a marker says what"


def commands(code: str) -> list[str]:
    """The block's commands: continuation lines joined, ``$`` prompts and comments dropped."""
    out: list[str] = []
    pending = ""
    for raw in code.splitlines():
        line = raw.removeprefix("$ ")
        if pending:
            line = pending + " " + line.strip()
            pending = ""
        if line.rstrip().endswith("\\"):
            pending = line.rstrip()[:-1]
            continue
        if line.strip() and not line.lstrip().startswith("#"):
            out.append(line)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def environment() -> dict[str, str]:
    """The installed commands first on PATH; no API key reaches a doc example by accident."""
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_BASE_URL"))}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


class Terminal:
    """One command, as in a terminal of its own: awaited until it exits or prints a line."""

    def __init__(self, command: str, process: anyio.abc.Process) -> None:
        self.command = command
        self.process = process
        self.output = bytearray()
        self._line = anyio.Event()
        self.closed = anyio.Event()  # its output is read to the end

    async def pump(self, stream: anyio.abc.ByteReceiveStream) -> None:
        async for chunk in stream:
            self.output += chunk
            if b"\n" in chunk:
                self._line.set()
        self._line.set()
        self.closed.set()

    async def first_line_or_exit(self) -> None:
        await self._line.wait()

    def text(self) -> str:
        return self.output.decode(errors="replace")


async def run_shell_file(path: Path, tmp_path: Path) -> None:
    ports: dict[str, str] = {}

    def mapped(command: str) -> str:
        def swap(m: re.Match[str]) -> str:
            if m[1] in ("0", "1"):
                return m[0]
            return "127.0.0.1:" + ports.setdefault(m[1], str(free_port()))

        return PORT.sub(swap, command)

    for block in ALL:
        if block.path == path and block.marker is not None and block.marker[1].startswith("file "):
            (tmp_path / block.marker[1].removeprefix("file ")).write_text(block.code)
    running: list[Terminal] = []
    env = environment()
    async with anyio.create_task_group() as tg:
        try:
            for block in BY_FILE[path]:
                if block.lang not in SHELL:
                    continue
                for command in commands(block.code):
                    line = mapped(command).rstrip()
                    background = BACKGROUND.fullmatch(line)  # "cmd &  # comment": the harness keeps it
                    line = background[1] if background else line
                    process = await anyio.open_process(
                        ["bash", "-c", f"exec {line}" if "&&" not in line and "|" not in line else line],
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT,
                        cwd=tmp_path,
                        env=env,
                        start_new_session=True,
                    )
                    term = Terminal(f"{block.id}: {command}", process)
                    print(f"$ {line}", flush=True)  # shown with the output of a failing test
                    assert process.stdout is not None
                    tg.start_soon(term.pump, process.stdout)
                    with anyio.fail_after(WAIT):
                        if background or UNTIL_CTRL_C.search(line):
                            await term.first_line_or_exit()  # up: the next command may use it
                        else:
                            await process.wait()
                    running.append(term)  # checked at the end, once every one has stopped
        finally:
            with anyio.CancelScope(shield=True):
                for term in running:
                    if term.process.returncode is None:
                        # os.kill, not send_signal: Popen.send_signal first polls, reaping a child
                        # that just exited behind asyncio's back, which then reports 255 for it.
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(term.process.pid, signal.SIGINT)  # Ctrl-C
                for term in running:
                    with anyio.move_on_after(WAIT):
                        await term.process.wait()
                    # Anything left in its process group (it would hold the output pipe) goes.
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(term.process.pid, signal.SIGKILL)
                    await term.process.wait()
                with anyio.move_on_after(WAIT):
                    for term in running:
                        await term.closed.wait()
            tg.cancel_scope.cancel()  # a pump still reading would be a pipe held by someone else
    for term in running:
        assert term.process.returncode == 0, f"{term.command}\n{term.text()}"
        assert "Traceback" not in term.text(), f"{term.command}\n{term.text()}"


SHELL_FILES = [p for p in DOCS if any(b.lang in SHELL for b in BY_FILE[p])]


@pytest.mark.timeout(900)  # a page's commands one after another, each bounded by WAIT
@pytest.mark.parametrize("path", SHELL_FILES, ids=lambda p: str(p.relative_to(ROOT)))
async def test_the_shell_blocks_of_a_page_run(path: Path, tmp_path: Path) -> None:
    await run_shell_file(path, tmp_path)


PROGRAMS = [b for b in ALL if b.lang in PYTHON and (b.marker is None or b.marker[1].startswith("file "))]
FILTERS = [b for b in ALL if b.marker == ("doc-test", "filter")]
KCP_EVENT = {
    "type": "ADDED",
    "key": "default/web",
    "object": {"kind": "ConfigMap", "metadata": {"namespace": "default", "name": "web"}, "data": {}},
}
OFFLINE = [b for b in ALL if b.marker == ("doc-test", "fails offline")]
CODE_MODE = [b for b in ALL if b.marker is not None and b.marker[1].startswith("code mode on ")]


async def run_program(
    block: Block, tmp_path: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[bytes]:
    program = tmp_path / "doc_example.py"
    program.write_text(block.code)
    with anyio.fail_after(WAIT):
        return await anyio.run_process([sys.executable, str(program)], check=False, cwd=tmp_path, env=env)


@pytest.mark.timeout(2 * WAIT)
@pytest.mark.parametrize("block", PROGRAMS, ids=lambda b: b.id)
async def test_a_python_program_runs(block: Block, tmp_path: Path) -> None:
    ast.parse(block.code)  # a whole program: a fragment carries a marker
    done = await run_program(block, tmp_path, environment())
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert "Traceback" not in err, err


@pytest.mark.timeout(2 * WAIT)
@pytest.mark.parametrize("key", ["no API key", "a fake key, offline"])
@pytest.mark.parametrize("block", OFFLINE, ids=lambda b: b.id)
async def test_a_framework_program_offline_ends_saying_why(block: Block, key: str, tmp_path: Path) -> None:
    env = environment()
    if "claude_agent_sdk" in block.code:
        # The SDK's Claude Code CLI: a private home (no login of the machine's user), no traffic;
        # no ANTHROPIC_API_KEY reaches it in either case.
        env |= {
            "HOME": str(tmp_path),
            "DISABLE_TELEMETRY": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }
        reason = "Not logged in"
    elif "google.adk" in block.code:
        if key != "no API key":  # nothing listens on port 1: the model call fails at once
            env |= {"GOOGLE_API_KEY": "offline", "GOOGLE_GEMINI_BASE_URL": "http://127.0.0.1:1"}
        reason = "No API key was provided" if key == "no API key" else "Connect"
    else:
        if key != "no API key":
            # Nothing listens on port 1: the model call fails at once, as it does offline.
            env |= {"OPENAI_API_KEY": "sk-offline", "OPENAI_BASE_URL": "http://127.0.0.1:1/v1"}
        reason = "OPENAI_API_KEY" if key == "no API key" else "Connect"
    done = await run_program(block, tmp_path, env)
    err = done.stderr.decode()
    assert done.returncode != 0, err
    assert reason in err, err


@pytest.mark.timeout(2 * WAIT)
@pytest.mark.parametrize("block", CODE_MODE, ids=lambda b: b.id)
async def test_a_code_mode_snippet_runs(block: Block, tmp_path: Path) -> None:
    assert block.marker is not None
    command = shlex.split(block.marker[1].removeprefix("code mode on "))
    source = McpResourceSource.stdio(command, env=environment())
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(source)
        manager = await stack.enter_async_context(WatchManager([source]))
        functions = {**await tool_functions([source]), **builtins(manager)}
        with anyio.fail_after(WAIT):
            result = await CodeMode(functions).run(block.code)
    assert "Error:" not in result, result


@pytest.mark.timeout(2 * WAIT)
@pytest.mark.parametrize("block", FILTERS, ids=lambda b: b.id)
async def test_a_filter_runs_in_the_filter_engine(block: Block) -> None:
    engine = default_engine()
    engine.validate(block.code)
    async with await engine.open(block.code, catalog=EmptyCatalog()) as session:
        with anyio.fail_after(WAIT):
            (outcome,) = await session.run([KCP_EVENT])
    assert outcome.error is None, outcome
