"""``asyncai-watch`` from the shell: real subprocesses against real memo, files and kcp servers."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import sys
from pathlib import Path

import anyio
import anyio.abc
import pytest

from asyncai_watch import McpResourceSource
from tests.support import ROOT, SUPPORT
from tests.support.cli import MEMO, WAIT, Lines, cli, run_cli, stderr_of, wait_until_watching
from tests.support.fake_kubectl import FakeCluster
from tests.support.kcp_helpers import kcp_argv, kcp_env, write_kubeconfig
from tests.support.memo import memo_http_server

PEER = f"{shlex.quote(sys.executable)} {shlex.quote(str(SUPPORT / 'peer_server.py'))}"


@pytest.mark.anyio
async def test_resources_lists_uris_templates_and_examples() -> None:
    code, out, err = await run_cli("resources", "--server", MEMO)
    assert code == 0, err
    assert (
        "memo://notes  (resource, memo, MCP 2026-07-28, application/json, watchable via subscriptions/listen)"
        in out
    )
    # Advice for the shell: the command that watches it, not the library's await watch_start(...).
    assert f"    asyncai-watch watch memo://notes --server {shlex.quote(MEMO)}\n" in out
    assert f"    asyncai-watch watch memo://notes/todo --server {shlex.quote(MEMO)}\n" in out
    assert "watch_start" not in out
    assert "memo://notes/{key}  (template" in out
    code, out, _ = await run_cli("resources", "--server", MEMO, "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert {r["uri"] for r in rows} == {"memo://notes", "memo://notes/{key}"}
    assert all(r["subscribable"] is True for r in rows)


@pytest.mark.anyio
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
async def test_watch_prints_each_notice_as_json_and_ends_cleanly_on_a_signal(stop: signal.Signals) -> None:
    async with (
        memo_http_server() as (url, _),
        cli("watch", "memo://notes", "--server", f"memo={url}", "--debounce", "0", "--json") as (proc, out),
    ):
        await wait_until_watching(proc)
        async with McpResourceSource.http(url) as writer:  # another user, on its own connection
            await writer.call_tool("memo_set", {"key": "todo", "value": "milk"})
            first = json.loads(await out.next())
            await writer.call_tool("memo_set", {"key": "todo", "value": "eggs"})
            second = json.loads(await out.next())
        keys = ("schema", "kind", "watch", "uri", "server", "lines", "failed", "redelivered")
        assert {k: first[k] for k in keys} == {
            "schema": "asyncai-watch/notice/1",
            "kind": "watch",
            "watch": "watch",
            "uri": "memo://notes",
            "server": "memo",
            "lines": ["ADDED todo"],
            "failed": False,
            "redelivered": False,
        }
        assert second["lines"] == ["MODIFIED todo (milk→eggs)"]
        proc.send_signal(stop)
        with anyio.fail_after(WAIT):
            assert await proc.wait() == 0
        err = await stderr_of(proc)
        assert "Traceback" not in err


@pytest.mark.anyio
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
async def test_a_signal_prints_a_notice_still_inside_the_quiet_time_instead_of_dropping_it(
    stop: signal.Signals,
) -> None:
    debounce = "3600"  # an hour: only the exit can print it
    async with (
        memo_http_server() as (url, _),
        cli("watch", "memo://notes", "--server", f"memo={url}", "--debounce", debounce, "--verbose") as (
            proc,
            out,
        ),
    ):
        assert proc.stderr is not None
        err = Lines(proc.stderr)
        while "watching memo://notes" not in await err.next():
            pass
        async with McpResourceSource.http(url) as writer:
            await writer.call_tool("memo_set", {"key": "todo", "value": "milk"})
        # --verbose logs each event as its line joins the pending notice.
        while not (line := await err.next()).startswith("{") or json.loads(line)["event"] != "watch.event":
            pass
        assert json.loads(line)["outcome"] == "kept", line
        proc.send_signal(stop)
        assert await out.next() == "ADDED todo"
        with anyio.fail_after(WAIT):
            assert await proc.wait() == 0


@pytest.mark.anyio
async def test_watch_a_file_with_a_filter(tmp_path: Path) -> None:
    target = tmp_path / "config.json"
    target.write_text('{"mode": "off"}')
    files = f"{shlex.quote(sys.executable)} -m asyncai_servers.files {shlex.quote(str(tmp_path))}"
    on_event = "f\"{event['key']} is now {event['new']}\""
    async with cli(
        "watch", f"file://{target}", "--server", files, "--debounce", "0", "--on-event", on_event
    ) as (proc, out):
        await wait_until_watching(proc)
        # Replaced by rename, as editors write: an in-place rewrite can be read half-way (the
        # files server then reads an in-band error, docs/servers/files.md).
        (tmp_path / "config.json.new").write_text('{"mode": "on"}')
        (tmp_path / "config.json.new").replace(target)
        assert await out.next() == "mode is now on"
        proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(WAIT):
            assert await proc.wait() == 0


@pytest.mark.anyio
async def test_watch_kcp_configmaps(tmp_path: Path) -> None:
    cluster = FakeCluster(tmp_path / "cluster")
    kc = write_kubeconfig(tmp_path / "kc.json", "https://kcp.test:6443")
    env = {**os.environ, **kcp_env(cluster, tmp_path)}
    server = shlex.join([sys.executable, *kcp_argv(kc, "--backoff", "0:0")])
    uri = "kcp-events://watch/root:app/configmaps?namespace=*"
    async with cli("watch", uri, "--server", f"kcp={server}", "--debounce", "0", env=env) as (proc, out):
        await wait_until_watching(proc)
        cluster.create("final-check", {"a": "1"})
        assert await out.next() == "ADDED default/final-check"
        proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(WAIT):
            assert await proc.wait() == 0


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["watch", "memo://zzz", "--server", MEMO], "cannot subscribe to ['memo://zzz']"),
        (["watch", "memo://notes", "--server", "no-such-server-command"], "cannot start MCP server"),
        (["watch", "memo://notes", "--server", "http://127.0.0.1:1/mcp"], "cannot connect to MCP server"),
        (["watch", "memo://notes", "--server", MEMO, "--on-event", "event["], "on_event"),
        (["watch", "memo://notes", "--server", MEMO, "--on-event", "undefined_name"], "NameError"),
        (["watch", "memo://notes", "--server", MEMO, "--debounce", "-1"], "--debounce must be"),
        (["watch", "peer://state", "--server", f"{PEER} no-subscribe"], "is not watchable"),
        (["resources", "--server", "http://"], "expected an http(s) URL"),
        (["call", "memo_set", "{bad", "--server", MEMO], "JSON arguments: Expecting property name"),
        (["call", "memo_set", "[1]", "--server", MEMO], "JSON arguments must be an object"),
        (["call", "no_such_tool", "--server", MEMO], "unknown tool 'no_such_tool'"),
        (["call", "memo_set", "--server", "http://127.0.0.1:1/mcp"], "cannot connect to MCP server"),
    ],
)
async def test_bad_input_is_one_line_and_exit_2(args: list[str], says: str) -> None:
    code, out, err = await run_cli(*args)
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("asyncai-watch: error: ")
    assert says in lines[0]
    assert out == ""


def readme_shell_flow(port: int) -> list[list[str]]:
    """The README's "From the shell" commands, one per terminal, on ``port``."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## From the shell", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    return [shlex.split(block.strip().replace("127.0.0.1:8765", f"127.0.0.1:{port}")) for block in blocks]


@pytest.mark.anyio
async def test_the_readme_shell_flow_prints_the_change_made_from_another_terminal() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    serve, watch, call = readme_shell_flow(port)
    assert (serve[0], watch[:2], call[:3]) == (
        "asyncai-mcp-simple",
        ["asyncai-watch", "watch"],
        ["asyncai-watch", "call", "memo_set"],
    )
    bin_dir = Path(sys.executable).parent  # the installed console scripts, as the README runs them
    env = {**os.environ, "PATH": os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")])}
    # One terminal after the other, as the README runs them: the server is up before the watch starts.
    async with await anyio.open_process(serve, env=env) as server:
        assert server.stderr is not None
        server_err = Lines(server.stderr)
        while not (await server_err.next()).startswith("READY "):
            pass
        async with await anyio.open_process(watch, env=env) as watcher:
            await _readme_watch(server, watcher, call, env)


async def _readme_watch(
    server: anyio.abc.Process, watcher: anyio.abc.Process, call: list[str], env: dict[str, str]
) -> None:
    """The watch terminal sees the change the call terminal makes; Ctrl-C ends both with 0."""
    try:
        assert watcher.stderr is not None
        assert watcher.stdout is not None
        watch_err = Lines(watcher.stderr)
        while "watching memo://notes" not in await watch_err.next():
            pass
        with anyio.fail_after(WAIT):
            done = await anyio.run_process(call, env=env, check=False)
        assert (done.returncode, done.stdout.decode()) == (0, "ok\n"), done.stderr.decode()
        # Printed once the change has been quiet for the default 3 s: awaited, not slept on.
        assert await Lines(watcher.stdout).next() == "ADDED todo"
        watcher.send_signal(signal.SIGINT)
        server.send_signal(signal.SIGINT)
        with anyio.fail_after(WAIT):
            assert (await watcher.wait(), await server.wait()) == (0, 0)
    finally:
        for proc in (watcher, server):
            if proc.returncode is None:
                proc.kill()


@pytest.mark.anyio
async def test_call_prints_the_result_its_raw_json_and_a_tool_error_in_one_line() -> None:
    async with memo_http_server() as (url, _):
        code, out, err = await run_cli(
            "call", "memo_set", '{"key": "todo", "value": "milk"}', "--server", url
        )
        assert (code, out) == (0, "ok\n"), err
        code, out, err = await run_cli("call", "memo_get", '{"key": "todo"}', "--server", url, "--json")
        assert code == 0, err
        raw = json.loads(out)
        assert raw["structuredContent"] == {"key": "todo", "value": "milk", "found": True}
        assert raw["isError"] is False
        code, out, err = await run_cli("call", "memo_set", '{"key": "todo"}', "--server", url)
    assert (code, out) == (1, ""), err
    assert err.count("\n") == 1, err
    assert err.startswith("asyncai-watch: error: memo_set: "), err
    assert "`value` is required" in err, err
