"""One --watch-state file, one owner: a second process is refused by name, a crash frees the
file, and a symlinked state file is written through to its target."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from asyncai_watch.errors import StateFileError
from asyncai_watch.runtime.manager import WatchManager
from asyncai_watch.state_file import StateFile
from asyncai_watch.testing import FakeClock
from tests.support.managers import IMMEDIATE, NOTES, memo_fake

HOLDER = """
import sys
from asyncai_watch.state_file import StateFile
state = StateFile(sys.argv[1])
state.load()
print("held", flush=True)
sys.stdin.read()  # hold the file until the test ends this process
"""


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """Another process that owns tmp_path/state.json (one saved watch) until it is killed."""
    path = tmp_path / "state.json"
    path.write_text(
        json.dumps({"version": 1, "watches": [{"name": "theirs", "uri": NOTES, "on_event": None}]})
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path), "--holder-mark"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "held\n"
        yield proc, path
    finally:
        proc.kill()
        proc.wait(timeout=30)


def saved_names(path: Path) -> list[str]:
    data: dict[str, Any] = json.loads(path.read_text())
    return [w["name"] for w in data["watches"]]


@pytest.mark.anyio
async def test_a_second_process_is_refused_naming_the_holder_and_a_crash_frees_the_file(
    holder: tuple[subprocess.Popen[str], Path],
) -> None:
    proc, path = holder
    before = path.read_bytes()
    fake = memo_fake()
    with pytest.raises(StateFileError) as info:
        async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path):
            pytest.fail("two processes must not own one state file")
    message = str(info.value)
    assert str(path) in message
    assert f"pid {proc.pid}" in message
    assert socket.gethostname() in message
    assert "--holder-mark" in message  # its command line, so the user can find it
    assert len(message.splitlines()) == 1
    assert path.read_bytes() == before  # the holder's watch is still saved
    assert fake.requests["subscriptions/listen"] == 0

    # The holder dies without cleaning up: the kernel drops its lock with it.
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path) as m:
        assert [w.name for w in m.watch_list()] == ["theirs"]
        await m.watch_start("mine", NOTES)
    assert saved_names(path) == ["theirs", "mine"]


def test_the_agent_refuses_a_state_file_in_use_in_one_line(
    holder: tuple[subprocess.Popen[str], Path], tmp_path: Path
) -> None:
    proc, path = holder
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"turns": [{"steps": [{"reply": "hi"}]}]}))
    run = subprocess.run(
        [sys.executable, "-m", "asyncai_agent", "--model", f"scripted:{script}", "--watch-state", str(path)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    (line,) = run.stderr.splitlines()
    assert line.startswith(f"asyncai-agent: error: watch state file {path} is in use by another process")
    assert f"pid {proc.pid}" in line
    assert run.returncode == 2
    assert saved_names(path) == ["theirs"]


@pytest.mark.anyio
async def test_two_managers_in_one_process_cannot_share_a_file_and_closing_frees_it(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    fake = memo_fake()
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path) as first:
        await first.watch_start("a", NOTES)
        with pytest.raises(StateFileError, match=f"in use by another process \\(pid {os.getpid()} "):
            async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path):
                pytest.fail("the file has an owner")
        await first.watch_start("b", NOTES)
    assert saved_names(path) == ["a", "b"]
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path) as again:
        assert [w.name for w in again.watch_list()] == ["a", "b"]


@pytest.mark.anyio
async def test_a_symlinked_state_file_is_written_through_to_its_target(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    links = tmp_path / "links"
    links.mkdir()
    target = real / "state.json"
    link = links / "state.json"
    link.symlink_to(target)  # dangling until the first save
    fake = memo_fake()
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=link) as m:
        await m.watch_start("notes", NOTES)
        assert link.is_symlink()
        assert os.readlink(link) == str(target)
        assert saved_names(target) == ["notes"]
        # A second name for the same file is the same file: one owner.
        other = tmp_path / "other.json"
        other.symlink_to(target)
        with pytest.raises(StateFileError, match="in use by another process"):
            StateFile(other).load()
        await m.watch_start("more", NOTES)
    assert link.is_symlink()
    assert saved_names(target) == ["notes", "more"]
    # The temp file was made beside the target and renamed onto it: nothing is left beside the link.
    assert sorted(p.name for p in links.iterdir()) == ["state.json"]
    assert sorted(p.name for p in real.iterdir()) == [
        "state.json",
        "state.json.lock",
        "state.json.resume.sqlite",
    ]
