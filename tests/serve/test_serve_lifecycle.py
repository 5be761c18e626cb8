"""``asyncai-watch serve``'s life as a host sees it: start, upstreams that fail, pushes, exit.

Real processes: serve over stdio, driven by the stock ``mcp`` client (with the
``claude/channel`` extension, as in tests/serve/test_serve.py) or, where the test signals the
process, by JSON-RPC lines on its pipes. Upstreams that fail are real too: a command that
does not exist, one that exits at once, and a URL where nothing listens. Every wait is on a
reply, a push or the process's exit, bounded by ``anyio.fail_after``.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp import Client

from tests.support.claude_code import LogPipe
from tests.support.serve import SERVE, WAIT, Channel, call, file_uri, files_arg, serve, write

pytestmark = pytest.mark.anyio

CRASH = [sys.executable, "-c", "import sys; print('boom: no config here', file=sys.stderr); sys.exit(3)"]


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


async def test_serve_answers_at_once_and_outlives_upstreams_that_cannot_connect(tmp_path: Path) -> None:
    cfg = tmp_path / "cfg.json"
    cfg.write_text('{"port": 1}')
    log_file = tmp_path / "serve.log"
    dead = f"http://127.0.0.1:{closed_port()}/mcp"
    params = serve(
        "--server",
        files_arg(tmp_path),
        "--server",
        "gone=/nonexistent/mcp-server --flag",
        "--server",
        "crash=" + shlex.join(CRASH),
        "--server",
        f"dead={dead}",
        "--debounce",
        "0",
        "--upstream-wait",
        "60",  # a loaded machine may take long to start the files server
        "--log-file",
        str(log_file),
    )
    channel = Channel()
    async with Client(params, mode="legacy", extensions=[channel]) as client:
        assert client.instructions is not None
        assert "(files, gone, crash, dead)" in client.instructions
        assert "watch_list() shows each one's state" in client.instructions

        # Waits for the attempts under way, then lists what the connected server offers and
        # names the ones that are not.
        result = await client.call_tool("list_resources", {})
        assert not result.is_error
        assert {r["server"] for r in json.loads(getattr(result.content[0], "text", ""))} == {"files"}
        missing = getattr(result.content[1], "text", "")
        assert missing.startswith("Not listed: ")
        for name in ("gone", "crash", "dead"):
            assert f"upstream {name!r} is" in missing

        listed = await client.call_tool("watch_list", {})
        assert getattr(listed.content[1], "text", "").startswith("Upstream servers: [")
        assert listed.structured_content is not None
        upstreams = {u["name"]: u for u in listed.structured_content["upstreams"]}
        assert upstreams["files"]["state"] == "connected"
        assert upstreams["files"]["protocol_version"] == "2026-07-28"
        expected = {
            "gone": "cannot start MCP server command '/nonexistent/mcp-server --flag'",
            "crash": "the server closed the connection before answering",
            "dead": f"cannot connect to MCP server URL '{dead}'",
        }
        for name, reason in expected.items():
            shown = upstreams[name]
            # Retried for good: failed and waiting, or already on its next attempt.
            assert shown["state"] in ("failed", "connecting"), shown
            assert reason in shown["error"], shown
            if shown["state"] == "failed":
                assert shown["retry_in_s"] <= 30
                assert "retry_at" in shown

        # The connected server works as if the others were not there.
        uri = file_uri(cfg)
        assert await call(client, "watch_start", name="cfg", uri=uri) == {
            "name": "cfg",
            "uri": uri,
            "shape": "state",
        }
        write(cfg, '{"port": 2}')
        push = await channel.next_for("cfg")
        assert push.content == "MODIFIED port (1→2)"

        # A URI nobody connected serves: the error names who is missing and why.
        result = await client.call_tool("read_resource", {"uri": "memo://notes"})
        assert result.is_error
        assert "memo://notes" in getattr(result.content[0], "text", "")
        missing = getattr(result.content[1], "text", "")
        assert missing.startswith("Not connected: ")
        assert "upstream 'dead' is" in missing

    lines = log_file.read_text().splitlines()
    events = [json.loads(line) for line in lines if line.startswith("{")]
    states = {(e["server"], e["state"]) for e in events if e["event"] == "serve.upstream"}
    assert {("files", "connected"), ("gone", "failed"), ("crash", "failed"), ("dead", "failed")} <= states
    assert "boom: no config here" in lines  # a stdio upstream's stderr lands in the log file too
    assert any(e["event"] == "serve.exit" for e in events)


async def test_a_stock_client_sees_a_dead_upstream_and_new_notices_in_the_structured_content(
    tmp_path: Path,
) -> None:
    cfg = tmp_path / "cfg.json"
    cfg.write_text('{"port": 1}')
    dead = f"http://127.0.0.1:{closed_port()}/mcp"
    args = ("--server", files_arg(tmp_path), "--server", f"dead={dead}", "--debounce", "0")
    channel = Channel()
    async with Client(serve(*args, "--upstream-wait", "60"), mode="legacy", extensions=[channel]) as client:
        listed = await client.call_tool("list_resources", {})
        assert not listed.is_error
        assert listed.structured_content is not None
        assert {r["server"] for r in listed.structured_content["resources"]} == {"files"}
        upstreams = {u["name"]: u for u in listed.structured_content["upstreams"]}
        assert upstreams["files"]["state"] == "connected"
        assert upstreams["dead"]["state"] in ("failed", "connecting"), upstreams["dead"]
        assert f"cannot connect to MCP server URL '{dead}'" in upstreams["dead"]["error"]
        assert "new_notices" not in listed.structured_content

        uri = file_uri(cfg)
        await call(client, "watch_start", name="cfg", uri=uri)
        write(cfg, '{"port": 2}')
        await channel.next_for("cfg")  # the notice is in the ring
        result = await client.call_tool("watch_list", {})
        assert result.structured_content is not None
        assert result.structured_content["new_notices"] == {
            "count": 1,
            "first_id": 1,
            "last_id": 1,
            "message": "1 notice(s) arrived that no tool result showed: watch_notices(after_id=0) returns them",
        }
        # Told once: the next result does not repeat it.
        again = await client.call_tool("watch_list", {})
        assert again.structured_content is not None
        assert "new_notices" not in again.structured_content


async def test_the_restore_notice_waits_for_the_first_answer_and_the_first_tool_result_reports_it(
    tmp_path: Path,
) -> None:
    doc = tmp_path / "doc.json"
    doc.write_text('{"a": 1}')
    uri = file_uri(doc)
    state = tmp_path / "watches.json"
    args = ("--server", files_arg(tmp_path), "--watch-state", str(state), "--debounce", "0")
    async with Client(serve(*args), mode="legacy") as client:
        await call(client, "watch_start", name="doc", uri=uri)

    channel = Channel()
    async with Client(serve(*args), mode="legacy", extensions=[channel]) as client:
        await client.list_tools()  # what Claude Code asks first, before it listens to the channel
        # Nothing was pushed before that answer: a host would have dropped it unheard.
        assert channel.pending() == 0
        # The first tool result reports the restore notice, whatever became of its push.
        result = await client.call_tool("watch_list", {})
        assert [w["name"] for w in json.loads(getattr(result.content[0], "text", ""))] == ["doc"]
        report = getattr(result.content[-1], "text", "")
        assert report.startswith("Notice 1 (kind=restore, also pushed as a <channel> tag):\nRestored 1 of 1")
        # And in the structured content, which is all Claude Code shows the model.
        assert result.structured_content is not None
        [restore] = result.structured_content["restore"]
        assert (restore["id"], restore["kind"]) == (1, "restore")
        assert restore["text"].startswith("Restored 1 of 1")
        assert result.structured_content["new_notices"]["last_id"] == 1
        # And the push comes, shortly after.
        pushed = await channel.next()
        assert pushed.meta is not None
        assert (pushed.meta["kind"], pushed.meta["notice_id"]) == ("restore", "1")
        # Once reported, later results do not repeat it; the ring still has it.
        later = await client.call_tool("watch_notices", {"after_id": 0})
        assert len(later.content) == 1
        assert [n["kind"] for n in json.loads(getattr(later.content[0], "text", ""))["notices"]] == [
            "restore"
        ]


class Wire:
    """JSON-RPC lines on a serve process's pipes, as a host writes and reads them."""

    def __init__(self, proc: anyio.abc.Process) -> None:
        assert proc.stdin is not None
        assert proc.stdout is not None
        self.proc = proc
        self._stdin = proc.stdin
        self._stdout = BufferedByteReceiveStream(proc.stdout)
        self._ids = 0

    async def notify(self, method: str) -> None:
        await self._stdin.send(json.dumps({"jsonrpc": "2.0", "method": method}).encode() + b"\n")

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        self._ids += 1
        message = {"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params}
        await self._stdin.send(json.dumps(message).encode() + b"\n")
        with anyio.fail_after(WAIT * 2):
            while True:  # pushes may come between: skip them
                reply = json.loads(await self._stdout.receive_until(b"\n", 1 << 20))
                if reply.get("id") == self._ids:
                    return reply["result"]

    async def handshake(self) -> None:
        await self.request(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "host", "version": "0"},
            },
        )
        await self.notify("notifications/initialized")


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM", "stdin closed"])
async def test_serve_exits_0_at_once_on_a_signal_or_eof_with_the_state_saved(
    tmp_path: Path, stop: str
) -> None:
    doc = tmp_path / "doc.json"
    doc.write_text('{"a": 1}')
    state = tmp_path / "state" / "watches.json"
    argv = [*SERVE, "--server", files_arg(tmp_path), "--watch-state", str(state), "--upstream-wait", "60"]
    async with await anyio.open_process(argv, stderr=subprocess.DEVNULL) as proc:
        wire = Wire(proc)
        await wire.handshake()
        started = await wire.request(
            "tools/call", {"name": "watch_start", "arguments": {"name": "doc", "uri": file_uri(doc)}}
        )
        assert not started.get("isError"), started
        if stop == "stdin closed":
            assert proc.stdin is not None
            await proc.stdin.aclose()
        else:
            proc.send_signal(getattr(signal, stop))
        # Claude Code sends SIGINT, SIGTERM 100 ms later, then SIGKILL: the bench measures the
        # time (bench/serve_lifecycle.py); here a generous bound only.
        with anyio.fail_after(10):
            code = await proc.wait()
    assert code == 0
    saved = json.loads(state.read_text())
    assert [w["name"] for w in saved["watches"]] == ["doc"]
    assert [p.name for p in state.parent.iterdir() if p.name.endswith(".tmp")] == []  # no temp file left


async def test_serve_exit_stops_an_upstream_that_never_reads_its_stdin(tmp_path: Path) -> None:
    """The SDK starts each stdio server in a session of its own: serve's exit signals them."""
    hang = [
        sys.executable,
        "-c",
        # Blocks until a signal ends it, never reading stdin: an upstream that hangs for good.
        "import os, signal, sys; print('hang pid', os.getpid(), file=sys.stderr); signal.pause()",
    ]
    log = tmp_path / "serve.log"
    argv = [
        *SERVE,
        "--server",
        files_arg(tmp_path),
        "--server",
        "hang=" + shlex.join(hang),
        "--log-file",
        str(log),
    ]
    async with (
        LogPipe.opened(log) as serve_log,
        await anyio.open_process(argv, stderr=subprocess.DEVNULL) as proc,
    ):
        wire = Wire(proc)
        await wire.handshake()
        hang_pid = int((await serve_log.line("hang pid ")).split()[-1])
        pidfd = os.pidfd_open(hang_pid)
        try:
            proc.send_signal(signal.SIGTERM)
            with anyio.fail_after(10):
                assert await proc.wait() == 0
                await anyio.wait_readable(pidfd)  # the hung upstream is gone too
        finally:
            os.close(pidfd)
