"""SIGTERM to the agent or to a library program: everyone ends quietly, the stdio children too.

A parent stopped by ``timeout`` or a service manager gets SIGTERM; ``timeout`` also signals its
whole process group. Before, the memo child then wrote to a pipe nobody read and printed a
59-line ``ExceptionGroup ... BrokenPipeError``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

MEMO = f"{sys.executable} -m asyncai_servers.memo"
WAIT = 60  # seconds: a bound on the whole exit, never a sleep

LIBRARY_PROGRAM = """
import sys

import anyio

from asyncai_watch.runtime.manager import WatchManager
from asyncai_watch.mcp.client import McpResourceSource


async def main() -> None:
    memo = [sys.executable, "-m", "asyncai_servers.memo"]
    async with McpResourceSource.stdio(memo, name="memo") as src, WatchManager([src]) as manager:
        await manager.watch_start("notes", "memo://notes")
        print("watching", flush=True)
        await anyio.Event().wait()  # until stopped from outside


anyio.run(main)
"""


def _stop(proc: subprocess.Popen[str], *, group: bool) -> tuple[str, str]:
    """SIGTERM the process (or, like ``timeout``, its whole group); its output once all have exited."""
    if group:
        os.killpg(proc.pid, signal.SIGTERM)
    else:
        proc.send_signal(signal.SIGTERM)
    # Not communicate(): it would close stdin, and the agent would end on EOF rather than the signal.
    proc.wait(timeout=WAIT)
    assert proc.stdout is not None
    assert proc.stderr is not None
    # The reads end once every holder of the pipes (the memo child too) has exited; a child left
    # holding them would hang here until pytest-timeout fails the test.
    return proc.stdout.read(), proc.stderr.read()


@pytest.mark.parametrize("group", [False, True], ids=["agent", "process-group"])
def test_sigterm_to_the_agent_is_quiet_for_it_and_its_stdio_server(tmp_path: Path, group: bool) -> None:
    script = tmp_path / "s.json"
    watch = 'await watch_start(name="notes", uri="memo://notes")'
    script.write_text(json.dumps({"turns": [{"steps": [{"run_code": watch}, {"reply": "watching"}]}]}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "asyncai_agent", "--model", f"scripted:{script}", "--mcp-stdio", MEMO],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.write("watch my notes\n")
        proc.stdin.flush()  # stdin stays open: the agent is stopped, not finished
        assert proc.stdout.readline() == "watching\n"  # a watch's listen is open on the memo
        out, err = _stop(proc, group=group)
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert "Traceback" not in err, err
    assert "Error" not in err, err
    assert proc.returncode == 143, err
    assert out == ""


@pytest.mark.parametrize("group", [False, True], ids=["program", "process-group"])
def test_sigterm_to_a_library_program_leaves_its_memo_child_quiet(group: bool) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", LIBRARY_PROGRAM],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "watching\n"
        _, err = _stop(proc, group=group)
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert "Traceback" not in err, err
    assert "Error" not in err, err
    assert proc.returncode == -signal.SIGTERM  # the program itself keeps Python's default
