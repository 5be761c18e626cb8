"""Hostile --watch-state files (issue 28 item 7): a FIFO, a device, a huge file, a huge integer,
more saved watches than --max-watches. Each is one line and exit 2 from serve and the agent,
at once: nothing hangs, nothing reads without bound, no saved watch is started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from asyncai_watch.core.limits import Limits
from asyncai_watch.errors import StateFileError
from asyncai_watch.runtime.manager import WatchManager
from asyncai_watch.small_file import SmallFileError, read_small_file
from asyncai_watch.state_file import MAX_STATE_FILE, StateFile
from tests.support.agent_state_run import run_agent_with_state
from tests.support.managers import memo_fake
from tests.support.serve import SERVE

# An upstream that is never started: serve checks the state file before anything runs.
NEVER_RUN = f"x={sys.executable} -c pass"


def run_serve(state: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    # A bounded wait for the process to end (not a poll): a serve that hangs on the file fails here.
    return subprocess.run(
        [*SERVE, "--server", NEVER_RUN, "--watch-state", str(state), *extra],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("asyncai-watch serve: error: watch state file ")
    return lines[0]


def specs(count: int) -> dict[str, Any]:
    return {"version": 2, "watches": [{"name": f"w{i}", "uri": f"memo://n{i}"} for i in range(count)]}


def test_serve_with_a_fifo_state_file_exits_2_in_one_line_instead_of_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "state.json"
    os.mkfifo(fifo)
    line = one_line_error(run_serve(fifo))
    assert f"{fifo} is not a regular file (a FIFO)" in line


def test_a_device_or_a_socket_is_refused_before_a_byte_is_read(tmp_path: Path) -> None:
    with pytest.raises(SmallFileError, match=r"'/dev/zero' is not a regular file \(a character device\)"):
        read_small_file("/dev/zero", cap=10, where="'/dev/zero'", holds="")
    import socket

    sock_path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        with pytest.raises(StateFileError, match=r"is not a regular file \(a socket\)"):
            StateFile(sock_path).load()


def test_a_state_file_over_the_size_cap_is_refused_by_its_size(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    with path.open("wb") as f:
        f.truncate(MAX_STATE_FILE + 1)  # sparse: nothing is written, and nothing must be read
    line = one_line_error(run_serve(path))
    assert f"is larger than {MAX_STATE_FILE:,} bytes" in line
    assert "MAX_STATE_FILE" in line


def test_an_integer_of_5000_digits_is_one_line_and_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text(
        '{"version": 2, "watches": [{"name": "a", "uri": "x://y", "on_event": null}], "n": '
        + "9" * 5000
        + "}"
    )
    line = one_line_error(run_serve(path))
    assert "is not valid JSON" in line
    assert "4300" in line  # Python's reason, capped


@pytest.mark.parametrize("count", [5_000, 100_000])
def test_serve_refuses_more_saved_watches_than_max_watches_in_one_line(tmp_path: Path, count: int) -> None:
    path = tmp_path / "state.json"
    text = json.dumps(specs(count))
    path.write_text(text)
    line = one_line_error(run_serve(path, "--max-watches", "5"))
    assert f"holds {count:,} saved watches, more than the 5 allowed at once" in line
    assert f"--max-watches {count}" in line
    assert path.read_text() == text  # left untouched


@pytest.mark.anyio
async def test_the_manager_starts_none_of_5000_saved_watches_over_its_limit(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps(specs(5_000)))
    server = memo_fake()
    manager = WatchManager([server], limits=Limits(max_watches=5), watch_state=path)
    with anyio.fail_after(30), pytest.raises(StateFileError, match="holds 5,000 saved watches"):
        await manager.__aenter__()
    assert server.requests["resources/read"] == 0  # nothing was read, so nothing started
    # The file is released: a run with a larger limit restores them.
    with StateFile(path) as state:
        assert len(state.load(max_watches=5_000)) == 5_000


def test_the_agent_with_a_fifo_state_file_exits_2_in_one_line(tmp_path: Path) -> None:
    fifo = tmp_path / "state.json"
    os.mkfifo(fifo)
    proc = run_agent_with_state(tmp_path, fifo)
    assert proc.stderr.splitlines() == [
        f"asyncai-agent: error: watch state file {fifo} is not a regular file (a FIFO); give a file"
    ]
    assert proc.returncode == 2
