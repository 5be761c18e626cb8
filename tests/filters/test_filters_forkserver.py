"""The fork server behind filter workers: shared, isolated, locked down per worker, replaceable."""

from __future__ import annotations

import contextlib
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
from asyncai_watch.testing import FakeClock
from tests.support.filters import Catalog

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
        # A worker killed while idle: its next event never started there, so it runs on a
        # fresh worker (a new scope) instead of being reported; the other watch is untouched.
        assert a.pid is not None
        async with exits(a.pid):
            os.kill(a.pid, signal.SIGKILL)
        assert await counts(a) == ["1"]
        assert a.restarts == 1
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
        # The idle session's next event never started on the dead worker: it runs (once more)
        # on a new worker from a new server, and is not reported as a failure.
        assert await counts(a) == ["1"]
        assert a.restarts == 1
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


async def test_a_worker_killed_while_running_on_event_is_reported_for_that_event(
    engine: RestrictedPythonEngine,
) -> None:
    running, release = anyio.Event(), anyio.Event()

    async def wait(**_: Any) -> str:
        running.set()
        await release.wait()
        return "never seen"

    source = "if event.get('wait'):\n    wait()\n" + COUNTER
    async with await engine.open(source, catalog=Catalog({"wait"}, hooks={"wait": wait})) as a:
        assert await counts(a) == ["1"]
        outcomes: list[Any] = []

        async def run() -> None:
            outcomes.extend(await a.run([{}, {"wait": True}, {}]))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            with anyio.fail_after(30):
                await running.wait()  # the second event is inside on_event, in a catalog call
            assert a.pid is not None
            async with exits(a.pid):
                os.kill(a.pid, signal.SIGKILL)
            release.set()
        assert [o.line for o in outcomes] == ["2", None, "1"]
        assert outcomes[1].error_type == "worker"
        assert "was killed by SIGKILL while running on_event on this event" in str(outcomes[1].error)
        assert a.restarts == 1


async def test_a_stopped_fork_server_is_noticed_and_replaced_without_holding_up_sessions() -> None:
    # The fork request's bound (RestrictedPythonEngine.fork_timeout) runs on the engine's
    # clock: advancing it stands for the seconds a stopped server leaves a request unanswered.
    clock = FakeClock()
    engine = RestrictedPythonEngine(limits=Limits(filter_timeout=5.0), memory_limit=160 * 2**20, clock=clock)
    async with await engine.open(COUNTER, catalog=EmptyCatalog()) as a:
        assert await counts(a, 2) == ["1", "2"]
        server, worker = engine.fork_server_pid, a.pid
        assert server is not None
        assert worker is not None
        os.kill(server, signal.SIGSTOP)
        try:
            opened: list[RestrictedFilterSession] = []

            async def open_one(text: str) -> None:
                opened.append(await engine.open(f"{text!r}", catalog=EmptyCatalog()))

            async with exits(server), exits(worker), anyio.create_task_group() as tg:
                tg.start_soon(open_one, "b")
                tg.start_soon(open_one, "c")  # waits behind b's request, not for a bound of its own
                with anyio.fail_after(30):
                    await clock.wait_for_deadline(engine.fork_timeout)  # b's request is pending
                clock.advance(engine.fork_timeout)
            # Both opened on a new server; the stopped one was killed, and its worker with it.
            assert engine.fork_server_pid not in (None, server)
            for session in opened:
                async with session:
                    assert int(status(session.pid or 0)["PPid"]) == engine.fork_server_pid
                    assert len(await counts(session)) == 1
            # a's worker died while idle: its next event runs on a new worker, not reported.
            assert await counts(a) == ["1"]
            assert a.restarts == 1
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(server, signal.SIGKILL)


async def test_a_fork_server_that_never_answers_a_fork_is_an_engine_error_after_one_replacement(
    tmp_path: Path,
) -> None:
    # Ready, then silent: every fork request hangs, on the replacement server too.
    body = "ctl = socket.socket(fileno=0)\nctl.sendall(b'ready\\n')\nsys.stdin.buffer.read()\n"
    clock = FakeClock()
    engine = RestrictedPythonEngine(python=fake_python(tmp_path, body), clock=clock)
    errors: list[FilterEngineError] = []

    async def open_it() -> None:
        with pytest.raises(FilterEngineError) as info:
            await engine.open("1", catalog=EmptyCatalog())
        errors.append(info.value)

    async with anyio.create_task_group() as tg:
        tg.start_soon(open_it)
        for _ in range(2):  # the first server's request, then the replacement's
            with anyio.fail_after(30):
                await clock.wait_for_deadline(clock.now() + engine.fork_timeout)
            clock.advance(engine.fork_timeout)
    assert str(errors[0]) == (
        f"the filter worker fork server did not answer a fork request within {engine.fork_timeout:g} s"
    )
    assert engine.fork_server_pid is None


DIES_BEFORE_STARTING = """
import json
for line in sys.stdin:
    message = json.loads(line)
    if message[0] == "init":
        print('["ok"]', flush=True)
    elif message[0] == "run":
        deaths = int(open(COUNT).read() or 0) if os.path.exists(COUNT) else 0
        if deaths < DEATHS:
            open(COUNT, "w").write(str(deaths + 1))
            os._exit(9)  # dies having read the batch, before starting it
        print('["s"]', flush=True)
        for event in message[1]:
            print(json.dumps(["o", f"ran {event['n']}", None, None]), flush=True)
"""


@pytest.mark.parametrize("deaths", [1, 2])
async def test_a_batch_whose_worker_dies_before_starting_it_runs_once_more(
    tmp_path: Path, deaths: int
) -> None:
    count = tmp_path / "deaths"
    body = f"COUNT = {str(count)!r}\nDEATHS = {deaths}\n" + DIES_BEFORE_STARTING
    # One interpreter per session, so the fake speaks the worker protocol on its stdin/stdout.
    engine = RestrictedPythonEngine(python=fake_python(tmp_path, body), fork_server=False)
    async with await engine.open("1", catalog=EmptyCatalog()) as session:
        outcomes = await session.run([{"n": 1}, {"n": 2}])
        assert session.restarts == deaths
    if deaths == 1:
        assert [(o.line, o.error) for o in outcomes] == [("ran 1", None), ("ran 2", None)]
    else:
        assert [o.error_type for o in outcomes] == ["worker", "worker"]
        assert (
            "the filter worker exited with code 9 before on_event could run on this event, twice; "
            "the event was not run"
        ) in str(outcomes[0].error)
