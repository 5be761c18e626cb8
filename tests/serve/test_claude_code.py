"""``asyncai-watch serve`` in the real Claude Code CLI, in front of a scripted model.

The CLI is the pinned ``@anthropic-ai/claude-code`` (scripts/fetch_claude_code.py, from npm into
``.tools/``); without it these tests fail, they never skip. It talks to
:class:`~tests.claude_code.FakeMessagesApi` on loopback, where the test plays the model one
request at a time and asserts what the model was shown: the tool list, the tool results, the
``<channel>`` tags, the Monitor events. The project is set up from the files the docs tell users
to copy (``examples/claude-code.mcp.json``, ``examples/claude-code.settings.json``), with the
project's virtualenv at ``.venv``; the test adds only ``--debounce 0`` (no 3 s wait per change)
and, where it waits on serve, ``--log-file`` on a pipe.

- print mode (``claude -p``): no channel there, so the model pulls: ``watch_start``, a change,
  ``watch_notices`` returns it;
- interactive, with channels (``--dangerously-load-development-channels server:watch`` and the
  test-only feature setting of tests/support/claude_code.py): the change arrives by itself as a
  ``<channel source="watch">`` tag, and after a restart so does the restore notice;
- the Monitor tool with ``asyncai-watch watch --json``: each notice line reaches the model.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support import ROOT
from tests.support.claude_code import (
    FakeMessagesApi,
    Home,
    LogPipe,
    Terminal,
    claude_binary,
    print_mode,
    text,
    tool_use,
)

pytestmark = pytest.mark.anyio

WATCH_TOOLS = {
    f"mcp__watch__{t}"
    for t in ("list_resources", "read_resource", "watch_start", "watch_stop", "watch_list", "watch_notices")
}


@pytest.fixture(scope="module")
def binary() -> Path:
    try:
        return claude_binary()
    except Exception as exc:  # no skip: the bar is a test against the real CLI
        pytest.fail(
            f"the Claude Code CLI could not be installed or started (scripts/fetch_claude_code.py): {exc}"
        )


def write(path: Path, content: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(content)
    os.replace(tmp, path)


def project(tmp_path: Path, *extra_serve_args: str) -> Path:
    """A project set up as docs/claude-code.md says: the example files, a virtualenv at .venv."""
    proj = tmp_path / "proj"
    (proj / ".claude").mkdir(parents=True)
    (proj / ".venv").symlink_to(sys.prefix)  # this test run's virtualenv, where asyncai-watch is installed
    (proj / "cfg.json").write_text('{"port": 1}')
    config = json.loads((ROOT / "examples" / "claude-code.mcp.json").read_text())
    config["mcpServers"]["watch"]["args"] += ["--debounce", "0", *extra_serve_args]
    (proj / ".mcp.json").write_text(json.dumps(config, indent=2))
    settings = (ROOT / "examples" / "claude-code.settings.json").read_text()
    (proj / ".claude" / "settings.json").write_text(settings)
    return proj


def channel_tags(turn_text: str) -> list[str]:
    return [line for line in turn_text.splitlines() if line.startswith("<channel ")]


async def test_print_mode_lists_the_tools_and_the_model_pulls_a_change(tmp_path: Path, binary: Path) -> None:
    log = tmp_path / "serve.log"
    proj = project(tmp_path, "--log-file", str(log))
    cfg = proj / "cfg.json"
    uri = f"file://{cfg}"
    home = Home.make(tmp_path, proj)
    done: list[subprocess.CompletedProcess[bytes]] = []
    async with (
        FakeMessagesApi.serving() as api,
        LogPipe.opened(log) as serve_log,
        anyio.create_task_group() as tg,
    ):

        async def run() -> None:
            done.append(await print_mode(binary, home, api, "Watch cfg.json and tell me when it changes"))

        tg.start_soon(run)
        first = await api.turn()
        # alwaysLoad: the watch tools are there on the first turn, with their schemas.
        assert set(first.tool_names) >= WATCH_TOOLS, first.tool_names
        assert first.tool("mcp__watch__watch_start")["input_schema"]["required"] == ["name", "uri"]
        first.reply(tool_use("mcp__watch__watch_start", {"name": "cfg", "uri": uri}))

        second = await api.turn()
        assert json.loads(second.tool_result()) == {"name": "cfg", "uri": uri, "shape": "state"}
        write(cfg, '{"port": 2}')
        await serve_log.event("serve.notice", watch="cfg")  # serve has it: the model can pull it
        second.reply(tool_use("mcp__watch__watch_notices", {"after_id": 0}))

        third = await api.turn()
        pulled = json.loads(third.tool_result())
        assert [(n["watch"], n["text"]) for n in pulled["notices"]] == [("cfg", "MODIFIED port (1→2)")]
        third.reply(text("cfg.json: port 1 → 2"))
        # The CLI ends and stops serve (SIGINT, then SIGTERM 100 ms later): serve exits on the first.
        stopped = await serve_log.event("serve.exit")
        assert stopped["reason"] == "SIGINT", stopped
    result = done[0]
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert b"port 1" in result.stdout


def channel_session(binary: Path, home: Home, api: FakeMessagesApi) -> Any:
    argv = [str(binary), "--dangerously-load-development-channels", "server:watch"]
    return Terminal.running(argv, env=home.env(api), cwd=home.project)


async def accept_development_channels(terminal: Terminal, serve_log: LogPipe) -> None:
    """Answer the CLI's warning about development channels, then wait until serve pushes: it
    answered Claude Code's first request (the tool list), so the tools are there when we type."""
    await terminal.expect("I am using this for local development")
    await terminal.type("\r")
    await serve_log.event("serve.attached", via="connection")


async def test_interactive_channels_push_a_change_and_after_a_restart_the_restore_notice(
    tmp_path: Path, binary: Path
) -> None:
    log = tmp_path / "serve.log"
    proj = project(tmp_path, "--log-file", str(log))
    cfg = proj / "cfg.json"
    uri = f"file://{cfg}"
    home = Home.make(tmp_path, proj, channels=True)
    async with FakeMessagesApi.serving() as api, LogPipe.opened(log) as serve_log:
        async with channel_session(binary, home, api) as terminal:
            await accept_development_channels(terminal, serve_log)
            await terminal.type("Watch cfg.json\r")
            first = await api.turn()
            assert set(first.tool_names) >= WATCH_TOOLS, first.tool_names
            first.reply(tool_use("mcp__watch__watch_start", {"name": "cfg", "uri": uri}))
            second = await api.turn()
            assert json.loads(second.tool_result()) == {"name": "cfg", "uri": uri, "shape": "state"}
            second.reply(text("Watching cfg.json."))

            write(cfg, '{"port": 2}')
            pushed = await api.turn()  # nobody typed: the channel push started this turn
            tags = channel_tags(pushed.texts())
            assert tags == [f'<channel source="watch" watch="cfg" uri="{uri}" notice_id="1" kind="watch">'], (
                tags
            )
            assert "MODIFIED port (1→2)\n</channel>" in pushed.texts()
            pushed.reply(text("The port is 2 now."))
            await terminal.expect("The port is 2 now.")
        saved = json.loads((proj / ".claude" / "watches.json").read_text())
        assert [w["name"] for w in saved["watches"]] == ["cfg"]

        # A new session: serve restores the watch, and its notice reaches the model unasked.
        async with channel_session(binary, home, api) as terminal:
            await accept_development_channels(terminal, serve_log)
            restored = await api.turn()
            tags = channel_tags(restored.texts())
            assert tags == [
                '<channel source="watch" notice_id="1" kind="restore" path=".claude/watches.json" '
                'restored="1" retrying="0" restore_failed="0">'
            ], tags
            assert f"- cfg {uri}: restored" in restored.texts()
            restored.reply(text("cfg is watched again."))
            await terminal.expect("cfg is watched again.")
            write(cfg, '{"port": 3}')
            again = await api.turn()
            assert channel_tags(again.texts())[-1] == (
                f'<channel source="watch" watch="cfg" uri="{uri}" notice_id="2" kind="watch">'
            )
            again.reply(text("The port is 3 now."))
            await terminal.expect("The port is 3 now.")


async def test_the_monitor_tool_streams_asyncai_watch_json_lines_to_the_model(
    tmp_path: Path, binary: Path
) -> None:
    proj = project(tmp_path)
    cfg = proj / "cfg.json"
    # docs/claude-code.md's Monitor recipe, with the project's interpreter.
    command = (
        f".venv/bin/python -m asyncai_watch watch file://{cfg} --name cfg --debounce 0 "
        f"--server {shlex.quote('.venv/bin/python -m asyncai_servers.files .')} 2>&1"
    )
    home = Home.make(tmp_path, proj, settings={"permissions": {"allow": ["Monitor", "Bash"]}})
    async with (
        FakeMessagesApi.serving() as api,
        Terminal.running(
            # Manual mode: allow rules decide (auto mode would ask a classifier the fake API is not).
            [str(binary), "--permission-mode", "default", "Tell me when cfg.json changes"],
            env=home.env(api),
            cwd=proj,
        ) as terminal,
    ):
        first = await api.turn()
        # Monitor is a deferred tool: the model loads its schema first.
        assert "Monitor" not in first.tool_names
        first.reply(tool_use("ToolSearch", {"query": "select:Monitor"}))
        second = await api.turn()
        assert "Monitor" in second.tool_names
        assert second.tool("Monitor")["input_schema"]["required"] == ["description", "timeout_ms"]
        second.reply(
            tool_use("Monitor", {"description": "cfg.json changes", "timeout_ms": 600000, "command": command})
        )
        third = await api.turn()
        assert third.tool_result().startswith("Monitor started")
        third.reply(text("Monitoring cfg.json."))
        # stderr merged (2>&1): the watch's start line is the first event, so it is up.
        ready = await api.turn()
        assert (
            f"<event>asyncai-watch: watching file://{cfg} on asyncai-mcp-files (state); Ctrl-C stops</event>"
            in ready.texts()
        )
        ready.reply(text("It is up."))
        write(cfg, '{"port": 2}')
        event = await api.turn()
        line = event.texts().split("<event>")[1].split("</event>")[0]
        assert line == "MODIFIED port (1→2)"
        event.reply(text("The port is 2 now."))
        await terminal.expect("The port is 2 now.")
