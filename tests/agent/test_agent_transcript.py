"""The --session JSONL transcript: user, assistant, tool, reply and monitor_event records."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from asyncai_agent.agent import Agent
from asyncai_agent.backends.scripted import ScriptedBackend, parse_script
from asyncai_agent.events import RunCompleted
from asyncai_agent.orchestrator import Orchestrator
from asyncai_agent.transcript import Transcript, TranscriptError
from asyncai_watch.codemode import CodeMode
from asyncai_watch.core.notice import SOURCE_WATCH, Notice
from asyncai_watch.core.turns import WATCH_INSTRUCTION


class Channel:
    def __init__(self) -> None:
        self.sent: list[str] = []

    @property
    def name(self) -> str:
        return "term"

    async def send(self, text: str) -> None:
        self.sent.append(text)


@pytest.mark.anyio
async def test_transcript_records_turns_and_notices_as_monitor_events(tmp_path: Path) -> None:
    script = parse_script(
        {
            "turns": [
                {"steps": [{"run_code": "n = 6 * 7\nn"}, {"expect": "42", "reply": "n is {result}"}]},
                {"expect": "ADDED owner", "steps": [{"reply": "NO_REPLY"}]},
            ]
        }
    )
    path = tmp_path / "session.jsonl"
    clock = iter(range(100))
    channel = Channel()
    with Transcript(path, clock=lambda: float(next(clock))) as transcript:
        agent = Agent(ScriptedBackend(script), CodeMode({}), system_prompt="S")
        async with Orchestrator(agent, default_channel=channel, observers=(transcript.record,)) as orch:
            events = orch.subscribe()
            orch.submit("compute n", channel)
            with anyio.fail_after(5):
                async for e in events:
                    if isinstance(e, RunCompleted):
                        break
            notice = Notice(SOURCE_WATCH, "ADDED owner", meta={"name": "notes", "uri": "memo://notes"})
            await orch.notice_tx.send(notice)
            with anyio.fail_after(5):
                async for e in events:
                    if isinstance(e, RunCompleted):
                        break
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["type"] for r in records] == [
        "user",
        "assistant",
        "tool_result",
        "assistant",
        "reply",
        "monitor_event",
        "assistant",
        "reply",
    ]
    user, call, result, final, reply, monitor, quiet, suppressed = records
    assert user == {"type": "user", "ts": 0.0, "channel": "term", "text": "compute n"}
    assert call["tool_calls"] == [
        {"id": "call_0_1", "name": "run_code", "arguments": {"code": "n = 6 * 7\nn"}}
    ]
    assert result == {
        "type": "tool_result",
        "ts": 2.0,
        "run": 1,
        "call_id": "call_0_1",
        "name": "run_code",
        "text": "42",
        "ended_turn": False,
    }
    assert final["text"] == "n is 42"
    assert reply == {
        "type": "reply",
        "ts": 4.0,
        "run": 1,
        "channel": "term",
        "text": "n is 42",
        "published": True,
    }
    assert monitor["task_id"] == "watch-notes"
    assert monitor["description"] == "watch notes memo://notes"
    assert monitor["note"] == WATCH_INSTRUCTION
    assert monitor["text"].startswith(
        '<watch-event name="notes" uri="memo://notes">\nADDED owner\n</watch-event>'
    )
    assert quiet["text"] == "NO_REPLY"
    assert suppressed["published"] is False
    # A notice is never a user record.
    assert all("watch-event" not in r["text"] for r in records if r["type"] == "user")
    assert channel.sent == ["n is 42"]


def test_unwritable_transcript_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TranscriptError, match=r"--session: cannot open .*missing.*for appending"):
        Transcript(tmp_path / "missing" / "s.jsonl")
