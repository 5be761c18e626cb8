"""The fork server behind filter workers: shared, isolated, locked down per worker, replaceable."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from asyncai_watch.core.limits import Limits
from asyncai_watch.errors import FilterEngineError
from asyncai_watch.filters import EmptyCatalog, RestrictedFilterSession, RestrictedPythonEngine

pytestmark = pytest.mark.anyio

COUNTER = """\
try:
    count += 1
except NameError:
    count = 1
if event.get("spin"):
    while True:
        pass
if event.get("grow"):
    hog = []
    while True:
        hog.append("y" * 10**7)
count
"""


def status(pid: int) -> dict[str, str]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def cmdline(pid: int) -> list[bytes]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")


@asynccontextmanager
async def exits(pid: int) -> AsyncIterator[None]:
    """Wait, after the body, until process ``pid`` has ended (its pidfd becomes readable)."""
    fd = os.pidfd_open(pid)
    try:
        yield
        with anyio.fail_after(30):
            await anyio.wait_readable(fd)
    finally:
        os.close(fd)


@pytest.fixture
def engine() -> RestrictedPythonEngine:
    return RestrictedPythonEngine(limits=Limits(filter_timeout=5.0), memory_limit=160 * 2**20)


async def counts(session: RestrictedFilterSession, n: int = 1) -> list[str | None]:
    return [o.line for o in await session.run([{}] * n)]


async def test_workers_are_forked_from_one_locked_down_free_single_threaded_server(
    engine: RestrictedPythonEngine,
) -> None:
    a = await engine.open(COUNTER, catalog=EmptyCatalog())
    async with a, await engine.open(COUNTER, catalog=EmptyCatalog()) as b:
        server = engine.fork_server_pid
        assert server is not None
        assert a.pid is not None
        assert b.pid is not None
        assert len({server, a.pid, b.pid, os.getpid()}) == 4
        # The server is a fresh interpreter started by this process, not a fork of it.
        assert int(status(server)["PPid"]) == os.getpid()
        assert cmdline(server)[1:3] == [b"-I", b"-c"]
        assert status(server)["Threads"] == "1"
        # The lock-down happens in each worker, after the fork; the server keeps the ability to fork.
        assert status(server)["Seccomp"] == "0"
        for worker in (a.pid, b.pid):
            assert int(status(worker)["PPid"]) == server
            assert status(worker)["Seccomp"] == "2"  # filter mode
            assert status(worker)["Threads"] == "1"
        assert (await a.probe())["inherited_fds"] == [0, 1, 2]
        assert await counts(a, 2) == ["1", "2"]
        assert await counts(b) == ["1"]  # its own scope
    # The last session's end ends the server.
    assert engine.fork_server_pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(server, 0)


async def test_one_watchs_runaway_or_killed_filter_never_stops_anothers(
    engine: RestrictedPythonEngine,
) -> None:
    a = await engine.open(COUNTER, catalog=EmptyCatalog(), limits=Limits(filter_timeout=5.0))
    async with a, await engine.open(COUNTER, catalog=EmptyCatalog()) as b:
        assert await counts(a) == ["1"]
        assert await counts(b) == ["1"]
        b_pid = b.pid
        # A memory bomb and a CPU loop in one watch, while the other keeps filtering.
        outcomes: list[Any] = []

        async def run_a() -> None:
            outcomes.extend(await a.run([{"grow": True}, {"spin": True}]))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_a)
            for n in range(2, 5):
                assert await counts(b) == [str(n)]
        assert [o.error_type for o in outcomes] == ["MemoryError", "timeout"]
        # A killed worker: its own watch reports it and starts afresh; the other is untouched.
        assert a.pid is not None
        async with exits(a.pid):
            os.kill(a.pid, signal.SIGKILL)
        [killed] = await a.run([{}])
        assert killed.error_type == "worker"
        assert "was killed by SIGKILL" in str(killed.error)
        assert await counts(a) == ["1"]
        assert await counts(b) == ["5"]
        assert (b.pid, b.restarts) == (b_pid, 0)


async def test_a_dead_fork_server_takes_its_workers_and_the_next_launch_starts_another(
    engine: RestrictedPythonEngine,
) -> None:
    async with await engine.open(COUNTER, catalog=EmptyCatalog()) as a:
        assert await counts(a, 2) == ["1", "2"]
        server, worker = engine.fork_server_pid, a.pid
        assert server is not None
        assert worker is not None
        async with exits(worker):  # no worker outlives its server (PR_SET_PDEATHSIG)
            os.kill(server, signal.SIGKILL)
        [lost] = await a.run([{}])
        assert lost.error_type == "worker"
        assert "its fork server ended" in str(lost.error)
        assert await counts(a) == ["1"]  # restarted, on a new server
        assert engine.fork_server_pid not in (None, server)
        async with await engine.open("'new'", catalog=EmptyCatalog()) as b:
            assert [o.line for o in await b.run([{}])] == ["new"]
            assert int(status(b.pid or 0)["PPid"]) == engine.fork_server_pid


def fake_python(tmp_path: Path, body: str) -> str:
    path = tmp_path / "fake-python"
    path.write_text(f"#!{sys.executable}\nimport os, socket, sys\n{body}")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("sys.exit(3)", "the filter worker fork server ended"),
        ("os.write(1, b'hello\\n')", "the filter worker fork server could not start: hello"),
        (
            'os.write(1, b\'["fatal", "cannot start: ImportError: no RestrictedPython"]\\n\')',
            "could not start: cannot start: ImportError: no RestrictedPython",
        ),
        (
            # Ready, then nonsense to every fork request (also on the one retry with a new server).
            "ctl = socket.socket(fileno=0)\nctl.sendall(b'ready\\n')\n"
            "while socket.recv_fds(ctl, 64, 2)[0]:\n    ctl.sendall(b'what?\\n')\n",
            "the filter worker fork server answered b'what?' to a fork request",
        ),
    ],
    ids=["exits", "garbage", "fatal", "bad-fork-reply"],
)
async def test_a_fork_server_that_cannot_start_or_serve_is_a_clear_engine_error(
    tmp_path: Path, body: str, message: str
) -> None:
    engine = RestrictedPythonEngine(python=fake_python(tmp_path, body))
    with anyio.fail_after(60), pytest.raises(FilterEngineError) as info:
        await engine.open("1", catalog=EmptyCatalog())
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert engine.fork_server_pid is None
