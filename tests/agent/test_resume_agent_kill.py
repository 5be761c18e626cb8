"""The reference agent (``python -m asyncai_agent --watch-state``) SIGKILLed in the middle of a turn
on a notice: started again, it reads that notice once more, flagged as redelivered, exactly once;
once a turn on it has completed, it never comes again (not even after another SIGKILL).

The turn is held open by a tool (``tests/support/hold_server.py``) that tells the test it is running
and answers only when let go; the model is the scripted one (``scripted:FILE``)."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from asyncai_watch import McpResourceSource
from tests.support import SUPPORT
from tests.support.cli import WAIT, Lines
from tests.support.memo import memo_http_server

pytestmark = pytest.mark.anyio

HOLD_SERVER = SUPPORT / "hold_server.py"
ENV_DROP = {"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"}


def script(path: Path, turns: list[dict[str, Any]]) -> str:
    path.write_text(json.dumps({"turns": turns}))
    return f"scripted:{path}"


def ok_turns(n: int) -> list[dict[str, Any]]:
    return [{"steps": [{"reply": f"ok {i}"}]} for i in range(n)]


@asynccontextmanager
async def agent(
    tmp_path: Path, life: int, model: str, memo_url: str, hold_port: int
) -> AsyncIterator[tuple[anyio.abc.Process, Lines, Path]]:
    """One life of the agent: its process, its stdout lines and its transcript."""
    session = tmp_path / f"session-{life}.jsonl"
    argv = [sys.executable, "-m", "asyncai_agent", "--model", model]
    argv += ["--server", memo_url, "--server", f"{sys.executable} {HOLD_SERVER} {hold_port}"]
    argv += ["--watch-state", str(tmp_path / "state.json"), "--session", str(session)]
    argv += ["--log-file", str(tmp_path / f"log-{life}.ndjson")]
    env = {k: v for k, v in os.environ.items() if k not in ENV_DROP}
    with (tmp_path / f"stderr-{life}.txt").open("wb") as stderr:
        async with await anyio.open_process(argv, env=env, stderr=stderr) as proc:
            assert proc.stdout is not None
            try:
                yield proc, Lines(proc.stdout), session
            finally:
                if proc.returncode is None:
                    proc.kill()


async def killed(proc: anyio.abc.Process) -> None:
    proc.send_signal(signal.SIGKILL)  # no clean close: nothing in memory survives
    with anyio.fail_after(WAIT):
        assert await proc.wait() == -signal.SIGKILL


def notices(session: Path) -> list[str]:
    """The text of every notice the agent took into its thread, in order."""
    records = [json.loads(line) for line in session.read_text().splitlines()]
    return [r["text"] for r in records if r["type"] == "monitor_event"]


def read_by(session: Path, text: str, reply: str) -> bool:
    """The run that answered ``reply`` (or an earlier one) read a notice containing ``text``: the
    notice is recorded when it enters the thread, the model's answer before it is printed."""
    records = [json.loads(line) for line in session.read_text().splitlines()]
    notice = [i for i, r in enumerate(records) if r["type"] == "monitor_event" and text in r["text"]]
    answer = [i for i, r in enumerate(records) if r["type"] == "assistant" and r["text"] == reply]
    return bool(notice) and bool(answer) and notice[0] < answer[0]


async def test_the_agent_killed_mid_turn_reads_the_notice_again_once_flagged(tmp_path: Path) -> None:
    async with (
        memo_http_server() as (memo_url, _),
        McpResourceSource.http(memo_url) as writer,
        await anyio.create_tcp_listener(local_host="127.0.0.1") as listener,
    ):
        [holds] = listener.listeners
        assert isinstance(holds, anyio.abc.SocketListener)
        hold_port = holds.extra(anyio.abc.SocketAttribute.local_port)
        first = script(
            tmp_path / "first.json",
            [
                {
                    "expect": "watch my notes",
                    "steps": [
                        {"run_code": "await watch_start(name='notes', uri='memo://notes')"},
                        {"reply": "watching"},
                    ],
                },
                # The notice's turn: it calls hold, which does not answer until let go.
                {"expect": "ADDED todo", "steps": [{"run_code": "await hold()"}, {"reply": "done"}]},
            ],
        )
        async with agent(tmp_path, 1, first, memo_url, hold_port) as (proc, out, _):
            assert proc.stdin is not None
            await proc.stdin.send(b"watch my notes\n")
            assert await out.next() == "watching"
            await writer.call_tool("memo_set", {"key": "todo", "value": "milk"})
            with anyio.fail_after(WAIT):
                held = await holds.accept()  # the turn on "ADDED todo" is running
            async with held:
                assert await held.receive() == b"held\n"
                await killed(proc)

        # Started again: the notice whose turn did not complete comes back, flagged.
        async with agent(tmp_path, 2, script(tmp_path / "second.json", ok_turns(3)), memo_url, hold_port) as (
            proc,
            out,
            session,
        ):
            for _ in range(3):  # the restore notice and the redelivery: one run or two
                reply = await out.next()
                assert reply.startswith("ok "), reply
                if read_by(session, "ADDED todo", reply):  # printed once acknowledged: taken
                    break
            again = [text for text in notices(session) if "ADDED todo" in text]
            assert len(again) == 1, notices(session)
            assert "(Redelivered: this was handed to you before the agent stopped" in again[0]
            await killed(proc)  # after its turn completed: taken, so never again

        async with agent(tmp_path, 3, script(tmp_path / "third.json", ok_turns(3)), memo_url, hold_port) as (
            proc,
            out,
            session,
        ):
            assert await out.next() == "ok 0"  # the restore notice's run
            await writer.call_tool("memo_set", {"key": "cat", "value": "fed"})
            assert await out.next() == "ok 1"  # a live change: the run on it completed
            assert proc.stdin is not None
            await proc.stdin.aclose()  # stdin ends: the agent exits
            with anyio.fail_after(WAIT):
                assert await proc.wait() == 0
        seen = notices(session)
        assert len(seen) == 2, seen
        assert "notes memo://notes: restored, resumed (nothing changed while the agent was down)" in seen[0]
        assert "ADDED cat" in seen[1]
        assert not any("ADDED todo" in text or "Redelivered" in text for text in seen), seen
