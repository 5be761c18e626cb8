"""The Claude Agent SDK end to end: the SDK spawns the real, pinned Claude Code CLI
(scripts/fetch_claude_code.py, passed as ``cli_path``), which talks to the scripted Messages API
of tests/support/claude_code.py (``ANTHROPIC_BASE_URL``). The test plays the model one request at a time
and asserts what it was shown. The watched server is the real memo server over stdio, also served
over HTTP so a second client (someone else) can change it."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from claude_agent_sdk import ClaudeAgentOptions, ResultMessage

from asyncai_watch import McpResourceSource
from asyncai_watch.integrations.claude_agent_sdk import ClientTurns, serve_entry, watch_session
from tests.support.claude_code import FakeMessagesApi, Home, Turn, claude_binary, text, tool_use
from tests.support.integration_memo import WAIT, Published
from tests.support.managers import IMMEDIATE

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def binary() -> Path:
    try:
        return claude_binary()
    except Exception as exc:  # no skip: the bar is a test against the real CLI
        pytest.fail(f"the Claude Code CLI could not be installed (scripts/fetch_claude_code.py): {exc}")


def options(binary: Path, home: Home, api: FakeMessagesApi, **more: Any) -> ClaudeAgentOptions:
    return ClaudeAgentOptions(
        cli_path=binary, cwd=home.project, env=home.env(api), setting_sources=[], **more
    )


def memo_command(tmp_path: Path) -> list[str]:
    ready = tmp_path / "memo-http"
    return [
        sys.executable,
        "-m",
        "asyncai_servers.memo",
        "--also-http",
        "127.0.0.1:0",
        "--ready-file",
        str(ready),
    ]


def tool_result(turn: Turn) -> dict[str, Any]:
    results = [b for b in turn.last_user if b.get("type") == "tool_result"]
    assert len(results) == 1, turn.last_user
    return results[0]


async def test_changes_become_turns_of_the_same_session_and_a_restart_restores_the_watch(
    tmp_path: Path, binary: Path
) -> None:
    proj = tmp_path / "proj"
    proj.mkdir()
    home = Home.make(tmp_path, proj)
    state = proj / "watches.json"
    published = Published()
    memo = memo_command(tmp_path)
    async with FakeMessagesApi.serving() as api:
        opts = options(binary, home, api, allowed_tools=["mcp__watch__memo_set"])
        async with (
            watch_session(
                {"memo": memo}, publish=published, options=opts, limits=IMMEDIATE, watch_state=state
            ) as session,
            anyio.create_task_group() as tg,
        ):
            runner = session.runner
            tg.start_soon(runner.ask, "Watch the memo")
            first = await api.turn()
            # alwaysLoad: the built-ins are there on the first turn, and so are the memo's own tools.
            assert {"mcp__watch__watch_start", "mcp__watch__watch_list", "mcp__watch__memo_set"} <= set(
                first.tool_names
            )
            assert first.tool("mcp__watch__watch_start")["input_schema"]["required"] == ["name", "uri"]
            first.reply(tool_use("mcp__watch__watch_start", {"name": "bad", "uri": "nope://x"}))
            refused = await api.turn()
            error = tool_result(refused)
            assert error.get("is_error") is True, error
            assert error["content"].startswith(
                "WatchError: watch_start: subscribing on server 'memo' failed"
            ), error
            refused.reply(tool_use("mcp__watch__watch_start", {"name": "notes", "uri": "memo://notes"}))
            started = await api.turn()
            assert json.loads(started.tool_result().split("\n")[0]) == {
                "name": "notes",
                "uri": "memo://notes",
                "shape": "state",
            }
            started.reply(text("Watching memo://notes."))
            await runner.wait(lambda s: s.published == 1)

            # The agent's own write, through the watch's one connection to the memo, reaches its watch.
            tg.start_soon(runner.ask, "Note that we need milk")
            asked = await api.turn()
            asked.reply(tool_use("mcp__watch__memo_set", {"key": "todo", "value": "milk"}))
            wrote = await api.turn()
            assert not tool_result(wrote).get("is_error"), tool_result(wrote)
            await runner.wait(lambda s: s.notices == 1)  # the set's notice arrived mid-turn
            assert runner.stats.queued == 1
            wrote.reply(text("Noted."))

            # The notice is the next user turn, in the same session (the first request is in it).
            noticed = await api.turn()
            prompt = noticed.texts()
            assert "Watch the memo" in prompt
            assert '<watch-event name="notes" uri="memo://notes">\nADDED todo\n</watch-event>' in prompt
            # Held open: two changes by someone else arrive meanwhile and wait for ONE next turn.
            url = (tmp_path / "memo-http").read_text().split()[1]
            async with McpResourceSource.http(url, name="outside") as writer:
                await writer.call_tool("memo_set", {"key": "a", "value": 1})
                await runner.wait(lambda s: s.notices == 2)
                await writer.call_tool("memo_set", {"key": "b", "value": 2})
                await runner.wait(lambda s: s.notices == 3)
            noticed.reply(text("The todo is milk."))
            batched = await api.turn()
            assert batched.last_user[-1]["text"].count("<watch-event") == 2, batched.last_user
            assert "ADDED a" in batched.texts()
            assert "ADDED b" in batched.texts()
            batched.reply(text("NO_REPLY"))
            with anyio.fail_after(WAIT):
                stats = await runner.wait(lambda s: s.runs_completed == 4 and not s.active)
            assert (stats.published, stats.suppressed) == (3, 1)
            assert published.texts == ["Watching memo://notes.", "Noted.", "The todo is milk."]

        # A new session with the same state file: the restore notice is its first turn.
        published = Published()
        async with (
            watch_session(
                {"memo": memo}, publish=published, options=opts, limits=IMMEDIATE, watch_state=state
            ) as session,
        ):
            restored = await api.turn()
            assert "<watch-restore" in restored.texts()
            assert "- notes memo://notes: restored" in restored.texts()
            restored.reply(text("notes is watched again."))
            with anyio.fail_after(WAIT):
                await session.runner.wait(lambda s: s.published == 1)
            assert [w.name for w in session.watches.watch_list()] == ["notes"]


def test_serve_entry_runs_the_bridge_with_always_load() -> None:
    entry = serve_entry({"memo": ["asyncai-mcp-simple"]}, watch_state="w.json", python="py")
    assert entry == {
        "type": "stdio",
        "command": "py",
        "args": [
            "-m",
            "asyncai_watch",
            "serve",
            "--server",
            "memo=asyncai-mcp-simple",
            "--watch-state",
            "w.json",
        ],
        "alwaysLoad": True,
    }


class ScriptedClient:
    """The two ``ClaudeSDKClient`` calls :class:`ClientTurns` makes, over a scripted CLI: each query
    is answered first by the result of a turn the CLI started by itself, then by its own."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def query(self, prompt: Any, session_id: str = "default") -> None:
        self.sent.extend([message async for message in prompt])

    async def receive_messages(self) -> AsyncIterator[Any]:
        stamp = self.sent[-1]["uuid"]
        yield result("injected turn's answer", uuids=["someone-else"])
        yield result(f"answer to {self.sent[-1]['message']['content']}", uuids=["earlier", stamp])


def result(text: str, *, uuids: list[str], is_error: bool = False) -> ResultMessage:
    return ResultMessage(
        subtype="success",
        duration_ms=1,
        duration_api_ms=1,
        is_error=is_error,
        num_turns=1,
        session_id="s",
        result=text,
        user_message_uuids=uuids,
    )


async def test_a_turn_reads_until_the_result_that_took_its_stamped_query() -> None:
    client = ScriptedClient()
    turns = ClientTurns(client)  # type: ignore[arg-type]
    with anyio.fail_after(WAIT):
        assert await turns("first") == "answer to first"
        assert await turns("second") == "answer to second"
    stamps = [m["uuid"] for m in client.sent]
    assert len(set(stamps)) == 2  # a fresh uuid per query: the CLI skips one it has seen
    assert [r.result for r in turns.results] == ["answer to first", "answer to second"]
