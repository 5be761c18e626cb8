"""docs/tutorial.md's shell steps print what the page says they print.

tests/docs/test_doc_examples.py runs every command of the page and checks exit codes; a watch there
only has to start. Here the steps of sections 3 and 4 run as the page has them (their commands
read from the page, the port swapped for a free one), and the watches' output is checked: the
plain watch prints ``ADDED todo``, the ``--once`` one prints ``MODIFIED todo (milk→eggs)`` and exits 0 by
itself, and the filtered one prints ``MODIFIED todo`` and nothing for ``owner``. Each wait is on a line of output, bounded by :data:`WAIT`.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import anyio.abc
import pytest

from tests.support import ROOT

pytestmark = pytest.mark.anyio

PAGE = ROOT / "docs" / "tutorial.md"
WAIT = 60  # seconds for one line of output, on a busy machine
FENCE = re.compile(r"^```bash\n(.*?)^```", re.M | re.S)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def section(title: str) -> list[str]:
    """The commands of the page's section headed ``## title``, in order."""
    text = PAGE.read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    body = text[start : end if end != -1 else None]
    return [line for block in FENCE.findall(body) for line in block.splitlines() if line.strip()]


class Running:
    """One command in a terminal of its own, its output read line by line."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        self.lines: list[str] = []
        self._new = anyio.Event()

    async def pump(self) -> None:
        assert self.process.stdout is not None
        buffered = b""
        async for chunk in self.process.stdout:
            buffered += chunk
            *done, buffered = buffered.split(b"\n")
            self.lines += [line.decode() for line in done]
            self._new.set()
            self._new = anyio.Event()

    async def line(self, pattern: str) -> str:
        with anyio.fail_after(WAIT):
            while True:
                found = [line for line in self.lines if re.search(pattern, line)]
                if found:
                    return found[0]
                await self._new.wait()


@pytest.fixture
def env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


async def test_the_watch_and_the_filter_print_what_the_page_says(tmp_path: Path, env: dict[str, str]) -> None:
    port = str(free_port())

    def argv(command: str) -> list[str]:
        return shlex.split(command.replace("127.0.0.1:8765", f"127.0.0.1:{port}"))

    serve, resources, watch = section("3. Watch a memo from the shell")[:3]
    call = section("3. Watch a memo from the shell")[3]
    once, call_once = section("4. In a script")
    filtered, call_owner, call_todo = section("5. A filter")
    assert "--http" in serve
    assert " watch " in watch
    assert "--on-event" in filtered

    async def start(command: str) -> Running:
        process = await anyio.open_process(
            argv(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tmp_path, env=env
        )
        running = Running(process)
        tg.start_soon(running.pump)
        return running

    async def run(command: str) -> str:
        with anyio.fail_after(WAIT):
            done = await anyio.run_process(argv(command), cwd=tmp_path, env=env, check=False)
        assert done.returncode == 0, done.stderr.decode()
        return done.stdout.decode()

    started: list[Running] = []
    async with anyio.create_task_group() as tg:
        try:
            server = await start(serve)
            started.append(server)
            await server.line(r"^READY http://127\.0\.0\.1:\d+/mcp$")
            assert "memo://notes" in await run(resources)

            plain = await start(watch)
            started.append(plain)
            await plain.line("watching memo://notes")
            assert (await run(call)).strip() == "ok"
            await plain.line("^ADDED todo$")

            one = await start(once.removesuffix("&").strip())
            started.append(one)
            await one.line("watching memo://notes")
            await run(call_once)
            with anyio.fail_after(WAIT):  # --once: it ends by itself after its one notice
                await one.process.wait()
            assert one.process.returncode == 0, one.lines

            only_todo = await start(filtered)
            started.append(only_todo)
            await only_todo.line("watching memo://notes")
            await run(call_owner)
            await run(call_todo)
            await only_todo.line("^MODIFIED todo$")
        finally:
            for running in reversed(started):  # Ctrl-C, as the reader ends them
                if running.process.returncode is None:
                    running.process.send_signal(signal.SIGINT)
                with anyio.fail_after(WAIT):
                    await running.process.wait()
    notices = [line for line in only_todo.lines if not line.startswith("asyncai-watch:")]
    assert notices == ["MODIFIED todo"]  # owner's change was dropped by the filter
    assert next(line for line in plain.lines if not line.startswith("asyncai-watch:")) == "ADDED todo"
    assert [line for line in one.lines if not line.startswith("asyncai-watch:")] == [
        "MODIFIED todo (milk→eggs)"
    ]
    for running in (plain, only_todo):
        assert running.process.returncode == 0, running.lines
