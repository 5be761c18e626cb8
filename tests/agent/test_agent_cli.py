"""The CLI as a user runs it: subprocesses, one clear error line, replies on stdout, the demo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from asyncai_agent.cli import build_parser, main

AGENT = [sys.executable, "-m", "asyncai_agent"]
MEMO = f"{sys.executable} -m asyncai_servers.memo"


def run_agent(
    args: list[str], *, stdin: str | None = "", timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    """Run the agent; ``stdin=None`` gives it /dev/null (a device epoll cannot wait on)."""
    env_drop = {"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"}
    env = {k: v for k, v in os.environ.items() if k not in env_drop}
    return subprocess.run(
        [*AGENT, *args],
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def test_parser_accepts_repeatable_servers() -> None:
    args = build_parser().parse_args(
        [
            "--mcp-stdio",
            "a",
            "--mcp-stdio",
            "b c",
            "--mcp-http",
            "http://h/mcp",
            "--model",
            "scripted:x",
            "--verbose",
        ]
    )
    assert args.mcp_stdio == ["a", "b c"]
    assert args.mcp_http == ["http://h/mcp"]
    assert args.model == "scripted:x"
    assert args.verbose


def _error_lines(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("asyncai-agent: error:")]


@pytest.mark.parametrize(
    ("args", "message", "code"),
    [
        (["--model", "openai:gpt-4o-mini"], "set OPENAI_API_KEY, or pass --base-url", 2),
        (["--model", "anthropic:claude-x"], "set ANTHROPIC_API_KEY", 2),
        (["--model", "gpt-4o"], "--model expects openai:MODEL, anthropic:MODEL or scripted:FILE", 2),
        (["--model", "scripted:x.json", "--mcp-http", "localhost:8080"], "--mcp-http: ", 2),
        ([], "--model is required", 2),
    ],
)
def test_configuration_errors_print_one_line(
    args: list[str],
    message: str,
    code: int,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    assert main(args) == code
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if line.startswith("asyncai-agent: error:")]
    assert message in line
    assert "Traceback" not in err


def test_a_server_that_will_not_start_is_one_clear_line(tmp_path: Path) -> None:
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"turns": [{"steps": [{"reply": "hi"}]}]}))
    proc = run_agent(
        ["--model", f"scripted:{script}", "--mcp-stdio", "no-such-server-binary-xyz"], stdin="hi\n"
    )
    assert proc.returncode == 1
    (line,) = _error_lines(proc)
    assert "cannot start MCP server command 'no-such-server-binary-xyz'" in line
    assert "Traceback" not in proc.stderr


def test_interactive_turn_against_a_real_server_with_a_transcript(tmp_path: Path) -> None:
    script = tmp_path / "s.json"
    script.write_text(
        json.dumps(
            {
                "turns": [
                    {
                        "expect": "set a",
                        "steps": [
                            {
                                "run_code": 'await memo_set(key="a", value=1)\n(await memo_get(key="a"))["value"]'
                            },
                            {"expect": "1", "reply": "a is {result}"},
                        ],
                    }
                ]
            }
        )
    )
    session = tmp_path / "session.jsonl"
    proc = run_agent(
        ["--model", f"scripted:{script}", "--mcp-stdio", MEMO, "--session", str(session)],
        stdin="set a to 1\n",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "a is 1\n"
    types = [json.loads(line)["type"] for line in session.read_text().splitlines()]
    assert types == ["user", "assistant", "tool_result", "assistant", "reply"]


def test_stdin_from_dev_null_ends_cleanly(tmp_path: Path) -> None:
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"turns": [{"steps": [{"reply": "hi"}]}]}))
    proc = run_agent(["--model", f"scripted:{script}"], stdin=None)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_a_failing_model_is_reported_to_the_user_not_swallowed(tmp_path: Path) -> None:
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"turns": [{"expect": "something else", "steps": [{"reply": "x"}]}]}))
    proc = run_agent(["--model", f"scripted:{script}"], stdin="hello\n")
    assert proc.returncode == 0
    assert proc.stdout.startswith("error: scripted:")
    assert "expected new input containing 'something else'" in proc.stdout
    records = [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]
    assert [r["event"] for r in records] == ["agent.error"]


def test_demo_runs_offline_and_shows_notices_replies_and_a_suppression(tmp_path: Path) -> None:
    session = tmp_path / "demo.jsonl"
    log = tmp_path / "demo.ndjson"
    proc = run_agent(["--demo", "--session", str(session), "--log", str(log)], timeout=100)
    out = proc.stdout
    assert proc.returncode == 0, f"stdout:\n{out}\nstderr:\n{proc.stderr}"
    assert out.startswith(f"demo: NDJSON log records go to {log} (--verbose for every event)\n")
    # The watch is set up through run_code with a filter.
    assert 'run_code> notes = await read_resource(uri="memo://notes")' in out
    assert "'shape': 'state'" in out
    # Each external write arrives as a notice turn; the filter dropped the draft key.
    notices = [line for line in out.splitlines() if line.startswith("notice> ")]
    assert notices == ['notice> <watch-event name="todo" uri="memo://notes">'] * 3
    bodies = [block.split("</watch-event>")[0] for block in out.split("\nnotice> ")[1:]]
    assert [body.split("\n")[1].strip() for body in bodies] == [
        "added todo = 'buy milk'",
        "modified todo = 'buy milk '",
        "deleted todo",  # a deletion reads as one, not "deleted todo = None"
    ]
    assert "todo = None" not in out
    assert all("draft" not in body for body in bodies)
    # Each turn says what the model reads.
    turns = [line for line in out.splitlines() if line.startswith("--- turn")]
    assert turns == [
        "--- turn 1: the model reads your message",
        "--- turn 2: the model reads the notice above",
        "--- turn 3: the model reads the notice above",
        "--- turn 4: the model reads the notice above",
    ]
    assert "agent> Your todo is now: buy milk" in out
    assert "agent: NO_REPLY -> reply suppressed, nothing published" in out
    assert "agent> Your todo was deleted." in out
    assert out.rstrip().endswith("demo: done, 4 turns, 1 reply suppressed (NO_REPLY)")
    # Nothing on stderr: in a terminal it would land between the transcript lines.
    assert proc.stderr == ""
    # The NDJSON log went to --log: one watch.notice per notice.
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["event"] for r in records].count("watch.notice") == 3
    records = [json.loads(line) for line in session.read_text().splitlines()]
    monitors = [r for r in records if r["type"] == "monitor_event"]
    assert [m["task_id"] for m in monitors] == ["watch-todo"] * 3
    assert [r["type"] for r in records].count("user") == 1


def test_demo_on_a_terminal_shows_each_notice_once(tmp_path: Path) -> None:
    # stdout and stderr on one stream, as a terminal shows them; no --log.
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    proc = subprocess.run(
        [*AGENT, "--demo"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=100,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout
    lines = proc.stdout.splitlines()
    assert lines[0] == "demo: the NDJSON log is off in the demo; --log FILE writes it to FILE"
    assert [line for line in lines if line.lstrip().startswith("{")] == []
    assert sum("added todo = 'buy milk'" in line for line in lines) == 1


def test_server_is_the_one_flag_for_both_kinds_and_log_file_and_v_are_spelled_as_elsewhere(
    tmp_path: Path,
) -> None:
    script = tmp_path / "s.json"
    script.write_text(
        json.dumps(
            {
                "turns": [
                    {
                        "expect": "get",
                        "steps": [{"run_code": "1 + 1"}, {"expect": "2", "reply": "got {result}"}],
                    }
                ]
            }
        )
    )
    log = tmp_path / "log.ndjson"
    proc = run_agent(
        ["--model", f"scripted:{script}", "--server", MEMO, "-v", "--log-file", str(log)], stdin="get\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "got 2\n"
    assert log.read_text().strip(), "the NDJSON log went to --log-file"
    args = build_parser().parse_args(["--log", "old.ndjson", "--server", "http://127.0.0.1:1/mcp"])
    assert (args.log, args.server) == (Path("old.ndjson"), ["http://127.0.0.1:1/mcp"])  # --log: an alias
    named = run_agent(["--model", f"scripted:{script}", "--server", f"memo={MEMO}"], stdin="")
    assert named.returncode == 2
    assert "the agent names each server by its serverInfo" in named.stderr
