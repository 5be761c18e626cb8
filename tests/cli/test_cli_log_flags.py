"""One set of logging flags on the clients: every ``asyncai-watch`` command and ``asyncai-agent``
take ``-v``/``-q``/``--log-level``/``--log-file`` as the servers do (docs/cli.md#logging-flags).
Each flag end to end in a subprocess against a real memo server over HTTP."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from tests.support.cli import CLI, WAIT, cli, run_cli, stderr_of, wait_until_watching
from tests.support.memo import memo_http_server, memo_set

pytestmark = pytest.mark.anyio

AGENT = [sys.executable, "-m", "asyncai_agent"]
COMMANDS = [
    [*CLI, "resources"],
    [*CLI, "watch"],
    [*CLI, "call"],
    [*CLI, "serve"],
    AGENT,
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[2:]) or "agent")
async def test_every_client_command_offers_the_four_logging_flags(command: list[str]) -> None:
    with anyio.fail_after(WAIT):
        done = await anyio.run_process([*command, "--help"], check=False)
    assert done.returncode == 0, done.stderr
    shown = " ".join(done.stdout.decode().split())  # argparse wraps help text
    for flag in ("-v, --verbose", "-q, --quiet", "--log-level LEVEL", "--log-file PATH"):
        assert flag in shown, f"{command} --help lacks {flag}"


@pytest.mark.parametrize(
    "command",
    [
        [*CLI, "watch", "memo://notes", "--server", "http://127.0.0.1:9/mcp"],
        [*CLI, "resources", "--server", "http://127.0.0.1:9/mcp"],
        [*CLI, "call", "memo_stats", "--server", "http://127.0.0.1:9/mcp"],
        [*CLI, "serve", "--server", "http://127.0.0.1:9/mcp"],
        [*AGENT, "--demo"],
    ],
    ids=["watch", "resources", "call", "serve", "agent"],
)
async def test_a_bad_log_level_is_refused_with_exit_2_naming_the_accepted_levels(command: list[str]) -> None:
    with anyio.fail_after(WAIT):
        done = await anyio.run_process([*command, "--log-level", "loud"], check=False)
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert "--log-level" in err, err
    assert "DEBUG, INFO, WARNING, ERROR, CRITICAL" in err, err
    assert "'loud'" in err, err
    assert "Traceback" not in err, err


async def test_log_level_debug_with_log_file_writes_ndjson_there_and_nothing_extra_on_stderr(
    tmp_path: Path,
) -> None:
    log = tmp_path / "watch.ndjson"
    async with memo_http_server() as (url, _):
        args = ["watch", "memo://notes", "--server", url, "--debounce", "0", "--once"]
        async with cli(*args, "--log-level", "debug", "--log-file", str(log)) as (proc, out):
            await wait_until_watching(proc)
            await memo_set(url, "todo", "milk")
            assert await out.next() == "ADDED todo"
            with anyio.fail_after(WAIT):
                assert await proc.wait() == 0
            err = await stderr_of(proc)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    events = {r["event"] for r in records}
    assert {"watch.subscribed", "watch.event", "watch.notice"} <= events, events
    assert any(r["level"] == "DEBUG" for r in records)
    # The level is this project's: no record of the HTTP library under it (one per request).
    assert not [r for r in records if r["logger"].startswith(("httpx", "httpcore"))]
    # stderr (after the "watching" line awaited above) has no log record.
    assert "{" not in err, err
    assert "DEBUG" not in err, err


async def test_log_level_info_puts_each_notice_on_stderr_as_ndjson() -> None:
    async with memo_http_server() as (url, _):
        args = ["watch", "memo://notes", "--server", url, "--debounce", "0", "--once", "--log-level", "INFO"]
        async with cli(*args) as (proc, out):
            await wait_until_watching(proc)
            await memo_set(url, "todo", "milk")
            assert await out.next() == "ADDED todo"
            with anyio.fail_after(WAIT):
                assert await proc.wait() == 0
            err = await stderr_of(proc)
    records = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert [r["event"] for r in records] == ["watch.notice"], err  # INFO: not the DEBUG events


@pytest.mark.parametrize("quiet", [False, True])
async def test_quiet_silences_warnings(quiet: bool) -> None:
    async with memo_http_server() as (url, _):
        args = ["watch", "memo://notes", "--server", url, "--debounce", "0", "--count", "1", "--initial"]
        args += ["--exec", "cat > /dev/null; exit 3"]
        async with cli(*args, *(["-q"] if quiet else [])) as (proc, out):
            # No "watching" line to await with -q: the initial content on stdout says the watch is up.
            assert json.loads(await out.next())["uri"] == "memo://notes"
            await memo_set(url, "todo", "milk")
            with anyio.fail_after(WAIT):
                assert await proc.wait() == 0
            err = await stderr_of(proc)
    warning = "asyncai-watch: warning: --exec command exited 3 on a notice of memo://notes; watching on"
    if quiet:
        assert err == ""
    else:
        assert warning in err, err


async def test_verbose_is_log_level_debug_on_stderr() -> None:
    async with (
        memo_http_server() as (url, _),
        cli("watch", "memo://notes", "--server", url, "--debounce", "0", "-v") as (proc, out),
    ):
        await wait_until_watching(proc)
        await memo_set(url, "todo", "milk")
        assert await out.next() == "ADDED todo"
        proc.send_signal(signal.SIGINT)
        with anyio.fail_after(WAIT):
            assert await proc.wait() == 0
        err = await stderr_of(proc)
    records = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert any(r["event"] == "watch.event" and r["level"] == "DEBUG" for r in records), err


async def test_call_and_resources_take_log_file(tmp_path: Path) -> None:
    log = tmp_path / "call.ndjson"
    async with memo_http_server() as (url, _):
        code, out, err = await run_cli("call", "memo_stats", "--server", url, "--log-file", str(log))
        assert code == 0, err
        code, out, err = await run_cli("resources", "--server", url, "-q", "--log-file", str(log))
        assert code == 0, err
    assert "memo://notes" in out
    assert err == ""
    assert log.exists()  # opened for appending, NDJSON when anything logs
    assert all(json.loads(line) for line in log.read_text().splitlines())


def test_the_agent_takes_log_level_and_quiet_and_keeps_its_old_spellings() -> None:
    from asyncai_agent.cli import build_parser

    args = build_parser().parse_args(["--log", "old.ndjson", "--mcp-http", "http://127.0.0.1:1/mcp", "-q"])
    assert (args.log, args.mcp_http, args.quiet) == (Path("old.ndjson"), ["http://127.0.0.1:1/mcp"], True)
    args = build_parser().parse_args(["--log-file", "new.ndjson", "--log-level", "debug"])
    assert (args.log, args.log_level) == (Path("new.ndjson"), "DEBUG")


def test_the_agent_demo_log_level_debug_log_file_gets_every_event(tmp_path: Path) -> None:
    log = tmp_path / "agent.ndjson"
    done = subprocess.run(
        [*AGENT, "--demo", "--log-level", "debug", "--log-file", str(log)],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert "{" not in done.stderr, done.stderr
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert any(r["level"] == "DEBUG" for r in records)
    assert "watch.notice" in {r["event"] for r in records}


@pytest.mark.parametrize(
    "command",
    [
        [*CLI, "watch", "memo://notes", "--server", "http://127.0.0.1:9/mcp"],
        [*CLI, "serve", "--server", "http://127.0.0.1:9/mcp"],
        [*AGENT, "--demo"],
    ],
    ids=["watch", "serve", "agent"],
)
async def test_a_log_file_that_cannot_be_opened_is_one_line_and_exit_2(
    command: list[str], tmp_path: Path
) -> None:
    where = tmp_path / "missing-dir" / "x.ndjson"
    with anyio.fail_after(WAIT):
        done = await anyio.run_process([*command, "--log-file", str(where)], check=False)
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert err.count("\n") == 1, err
    assert f"--log-file: cannot open {str(where)!r} for appending: No such file or directory" in err, err
