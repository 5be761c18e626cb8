"""``asyncai-watch watch`` in scripts: --once, --count, --exec, several URIs, --initial, a closed
stdout, Ctrl-C at every stage, and errors that lead with what to do. Real subprocesses against a
real memo server over HTTP (and stdio)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from tests.support.cli import CLI, MEMO, WAIT, Lines, cli, run_cli, stderr_of, wait_until_watching
from tests.support.memo import memo_http_server, memo_set

pytestmark = pytest.mark.anyio


async def test_once_prints_one_notice_and_exits_0() -> None:
    async with (
        memo_http_server() as (url, _),
        cli("watch", "memo://notes", "--server", url, "--debounce", "0", "--once", "--json") as (proc, out),
    ):
        await wait_until_watching(proc)
        await memo_set(url, "todo", "milk")
        assert json.loads(await out.next())["lines"] == ["ADDED todo"]
        with anyio.fail_after(WAIT):
            assert await proc.wait() == 0


async def test_count_exits_0_after_n_notices() -> None:
    async with (
        memo_http_server() as (url, _),
        cli("watch", "memo://notes", "--server", url, "--debounce", "0", "--count", "2") as (proc, out),
    ):
        await wait_until_watching(proc)
        await memo_set(url, "todo", "milk")
        assert await out.next() == "ADDED todo"
        assert proc.returncode is None
        await memo_set(url, "todo", "eggs")
        assert await out.next() == "MODIFIED todo (milk→eggs)"
        with anyio.fail_after(WAIT):
            assert await proc.wait() == 0


async def test_several_uris_in_one_watch_each_notice_names_its_uri() -> None:
    async with (
        memo_http_server() as (url, _),
        cli("watch", "memo://notes/a", "memo://notes/b", "--server", url, "--debounce", "0", "--json") as (
            proc,
            out,
        ),
    ):
        assert proc.stderr is not None
        err = Lines(proc.stderr)
        watching = {(await err.next()).split()[2] for _ in range(2)}
        assert watching == {"memo://notes/a", "memo://notes/b"}
        await memo_set(url, "b", "2")
        second = json.loads(await out.next())
        await memo_set(url, "a", "1")
        first = json.loads(await out.next())
        assert (second["uri"], second["watch"]) == ("memo://notes/b", "watch-2")
        assert (first["uri"], first["watch"]) == ("memo://notes/a", "watch")
        proc.send_signal(signal.SIGINT)
        with anyio.fail_after(WAIT):
            assert await proc.wait() == 0


async def test_initial_prints_the_current_content_first() -> None:
    async with memo_http_server() as (url, _):
        await memo_set(url, "todo", "milk")
        async with cli(
            "watch", "memo://notes", "--server", url, "--debounce", "0", "--initial", "--json", "--once"
        ) as (proc, out):
            first = json.loads(await out.next())
            assert first == {
                "schema": "asyncai-watch/notice/1",
                "kind": "initial",
                "watch": "watch",
                "uri": "memo://notes",
                "server": "memo",
                "lines": [],
                "failed": False,
                "events": [],
                "initial": {"todo": "milk"},
            }
            await memo_set(url, "todo", "eggs")
            assert json.loads(await out.next())["lines"] == ["MODIFIED todo (milk→eggs)"]
            with anyio.fail_after(WAIT):
                assert await proc.wait() == 0


async def test_exec_runs_the_command_per_notice_with_env_and_json_on_stdin(tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    script = f'{{ printf "%s|%s|%s|" "$ASYNCAI_WATCH_URI" "$ASYNCAI_WATCH_TEXT" "$ASYNCAI_WATCH_FAILED"; cat; }} >> {shlex.quote(str(seen))}; echo ran'
    async with (
        memo_http_server() as (url, _),
        cli(
            "watch", "memo://notes", "--server", url, "--debounce", "0", "--exec", script, "--count", "2"
        ) as (
            proc,
            out,
        ),
    ):
        await wait_until_watching(proc)
        await memo_set(url, "todo", "milk")
        assert await out.next() == "ran"  # the command's stdout is ours; the notice is not printed
        await memo_set(url, "todo", "eggs")
        assert await out.next() == "ran"
        with anyio.fail_after(WAIT):
            assert await proc.wait() == 0
    runs = seen.read_text().splitlines()
    assert len(runs) == 2
    uri, text, failed, body = runs[0].split("|", 3)
    assert (uri, text, failed) == ("memo://notes", "ADDED todo", "0")
    assert json.loads(body)["lines"] == ["ADDED todo"]
    assert json.loads(runs[1].split("|", 3)[3])["lines"] == ["MODIFIED todo (milk→eggs)"]


async def test_head_n1_under_pipefail_exits_0_as_soon_as_head_has_its_line() -> None:
    # No second change is made: the watch must notice head's leaving by itself, not at its next write.
    async with memo_http_server() as (url, _):
        watch = shlex.join([*CLI, "watch", "memo://notes", "--server", url, "--debounce", "0"])
        script = f"set -o pipefail; {watch} | head -n1"
        async with await anyio.open_process(["bash", "-c", script]) as proc:
            await wait_until_watching(proc)
            await memo_set(url, "todo", "milk")
            assert proc.stdout is not None
            assert await Lines(proc.stdout).next() == "ADDED todo"
            with anyio.fail_after(WAIT):
                code = await proc.wait()
            err = await stderr_of(proc)
    assert code == 0, err
    assert "Broken pipe" not in err, err
    assert "Traceback" not in err, err


async def test_ctrl_c_while_importing_exits_0_without_a_traceback() -> None:
    # -X importtime writes a line as each module is imported: the signal lands once the entry
    # module is in, while the commands' second of imports (the SDK, pydantic) runs.
    argv = [
        sys.executable,
        "-X",
        "importtime",
        "-m",
        "asyncai_watch",
        "watch",
        "memo://notes",
        "--server",
        MEMO,
    ]
    async with await anyio.open_process(argv) as proc:
        assert proc.stderr is not None
        err = Lines(proc.stderr)
        while not (await err.next()).endswith("| asyncai_watch.cli"):
            pass
        proc.send_signal(signal.SIGINT)
        with anyio.fail_after(WAIT):
            code = await proc.wait()
        rest = await stderr_of(proc)
    assert code == 0, rest
    assert "Traceback" not in rest, rest
    assert "KeyboardInterrupt" not in rest, rest


async def test_ctrl_c_while_a_silent_server_keeps_it_waiting_exits_0_and_it_said_what_it_waited_for() -> None:
    with socket.socket() as listener:  # accepts (the kernel's backlog) and never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/mcp"
        async with await anyio.open_process([*CLI, "watch", "memo://notes", "--server", url]) as proc:
            assert proc.stderr is not None
            err = Lines(proc.stderr)
            line = await err.next()
            assert "still waiting for server URL" in line, line
            assert "to answer the MCP handshake (initialize)" in line, line
            proc.send_signal(signal.SIGINT)
            with anyio.fail_after(WAIT):
                code = await proc.wait()
            rest = await stderr_of(proc)
    assert code == 0, rest
    assert "Traceback" not in rest, rest


async def test_ctrl_c_while_watching_a_stdio_server_exits_0() -> None:
    async with cli("watch", "memo://notes", "--server", MEMO) as (proc, _):
        await wait_until_watching(proc)
        os.kill(proc.pid, signal.SIGINT)
        with anyio.fail_after(WAIT):
            assert await proc.wait() == 0
        assert "Traceback" not in await stderr_of(proc)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["watch", "memo://notes", "--server", "127.0.0.1:28766/mcp"],
            "error: did you mean --server http://127.0.0.1:28766/mcp",
        ),
        (["watch", "memo://zzz", "--server", MEMO], "error: memo: cannot subscribe to ['memo://zzz']"),
        (["watch", "memo://notes", "--server", MEMO, "--count", "0"], "error: --count must be"),
        (["call", "memo_set", "{}", "--server", MEMO], "error: memo_set: `key` must be"),
    ],
)
async def test_errors_lead_with_what_to_do(args: list[str], says: str) -> None:
    code, out, err = await run_cli(*args)
    assert code in (1, 2), (out, err)
    assert err.count("\n") == 1, err
    assert err.startswith(f"asyncai-watch: {says}"), err
    assert "memo_set: memo_set" not in err


async def test_a_wrong_path_hints_that_the_endpoint_is_usually_mcp() -> None:
    async with memo_http_server() as (url, _):
        code, _, err = await run_cli("watch", "memo://notes", "--server", url.removesuffix("/mcp") + "/nope")
    assert code == 2, err
    assert err.startswith("asyncai-watch: error: is the path right? MCP servers usually serve at /mcp"), err
    assert "HTTP 404" in err, err


async def test_with_two_servers_a_foreign_uri_lists_every_servers_uris(tmp_path: Path) -> None:
    files = f"{shlex.quote(sys.executable)} -m asyncai_servers.files {shlex.quote(str(tmp_path))}"
    code, _, err = await run_cli(
        "watch", "nope://x", "--server", f"memo={MEMO}", "--server", f"files={files}"
    )
    assert code == 2, err
    assert "memo: memo://notes" in err, err
    assert "files: " in err, err


async def test_watch_reads_its_servers_from_config_and_keeps_watch_state(tmp_path: Path) -> None:
    async with memo_http_server() as (url, _):
        config = tmp_path / "mcp.json"
        config.write_text(json.dumps({"mcpServers": {"memo": {"type": "http", "url": url}}}))
        state = tmp_path / "state.json"
        args = [
            "watch",
            "memo://notes",
            "--config",
            str(config),
            "--watch-state",
            str(state),
            "--debounce",
            "0",
        ]
        async with cli(*args, "--once") as (proc, out):
            await wait_until_watching(proc)
            await memo_set(url, "todo", "milk")
            assert await out.next() == "ADDED todo"
            with anyio.fail_after(WAIT):
                assert await proc.wait() == 0
        assert "memo://notes" in state.read_text()
        # Restored from the state file (not started twice under one name), and watching.
        async with cli(*args, "--once") as (proc, out):
            await wait_until_watching(proc)
            await memo_set(url, "todo", "eggs")
            assert await out.next() == "MODIFIED todo (milk→eggs)"
            with anyio.fail_after(WAIT):
                assert await proc.wait() == 0


def test_cli_module_imports_nothing_heavy() -> None:
    # Ctrl-C during the commands' import must find main()'s handler in place.
    code = "import sys, asyncai_watch.cli; print('mcp' in sys.modules, 'pydantic' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=WAIT
    )
    assert done.stdout.split() == ["False", "False"]


async def test_a_filter_calling_a_mutating_tool_is_refused_at_start_even_behind_an_if() -> None:
    on_event = 'memo_set(key="x", value=1) if event["key"] == "never" else event["key"]'
    code, out, err = await run_cli("watch", "memo://notes", "--server", MEMO, "--on-event", on_event)
    assert code == 2, err
    assert out == ""
    assert err.startswith("asyncai-watch: error: on_event may only read; it calls memo_set(): "), err
    assert "A filter may call: list_resources, memo_get, memo_stats, read_resource" in err, err


async def test_the_name_error_hint_lists_only_what_a_filter_may_call() -> None:
    code, _, err = await run_cli("watch", "memo://notes", "--server", MEMO, "--on-event", "undefined_name")
    assert code == 2, err
    assert "the provided functions are: list_resources, memo_get, memo_stats, read_resource " in err, err
    assert "memo_set" not in err, err
    assert "watch_start" not in err, err


async def test_quiet_writes_nothing_on_stderr_and_log_file_gets_the_ndjson_log(tmp_path: Path) -> None:
    log = tmp_path / "watch.ndjson"
    async with memo_http_server() as (url, _):
        args = ["watch", "memo://notes", "--server", url, "--debounce", "0", "--once", "-q", "--initial"]
        async with cli(*args, "--log-file", str(log)) as (proc, out):
            # No "watching" line to wait for: the initial content on stdout says the watch is up.
            assert await out.next() == "INITIAL memo://notes"
            assert await out.next() == "{}"
            await memo_set(url, "todo", "milk")
            assert await out.next() == "ADDED todo"
            with anyio.fail_after(WAIT):
                assert await proc.wait() == 0
            assert await stderr_of(proc) == ""
    events = [json.loads(line)["event"] for line in log.read_text().splitlines()]
    assert "watch.subscribed" in events


async def test_a_terminal_gets_a_status_line_and_a_pipe_none() -> None:
    import pty

    main, sub = pty.openpty()
    try:
        async with (
            memo_http_server() as (url, _),
            await anyio.open_process(
                [*CLI, "watch", "memo://notes", "--server", url], stderr=sub, stdout=subprocess.DEVNULL
            ) as proc,
        ):
            seen = b""
            with anyio.fail_after(WAIT):
                while b"watching memo://notes" not in seen:
                    await anyio.wait_readable(main)
                    seen += os.read(main, 65536)
            proc.send_signal(signal.SIGINT)
            with anyio.fail_after(WAIT):
                assert await proc.wait() == 0
    finally:
        os.close(main)
        os.close(sub)
    assert b"\r\x1b[Kasyncai-watch: subscribing to memo://notes ..." in seen, seen
    # The same on a pipe: only the lines to keep.
    async with memo_http_server() as (url, _), cli("watch", "memo://notes", "--server", url) as (proc, _):
        await wait_until_watching(proc)
        proc.send_signal(signal.SIGINT)
        with anyio.fail_after(WAIT):
            assert await proc.wait() == 0
        err = await stderr_of(proc)
    assert "subscribing" not in err, err
    assert "\x1b[" not in err, err


@pytest.mark.skipif(shutil.which("bash") is None, reason="completes in bash")
async def test_bash_completion_completes_watch_options() -> None:
    code, script, err = await run_cli("completion", "bash")
    assert code == 0, err
    line = "asyncai-watch watch --on"
    probe = (
        f"{script}\nCOMP_WORDS=({line}); COMP_CWORD=2; COMP_LINE='{line}'; COMP_POINT=${{#COMP_LINE}}; "
        '_shtab_asyncai_watch asyncai-watch --on watch; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    with anyio.fail_after(WAIT):
        done = await anyio.run_process(["bash", "-c", probe], check=False)
    assert sorted(done.stdout.decode().split()) == ["--on-event", "--once", "--only"], done.stderr
