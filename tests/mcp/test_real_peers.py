"""MCP peers this project did not write, as most of them run today (MCP 2025-11-25).

Real subprocesses, pinned from npm into ``.tools/`` by ``scripts/fetch_conformance.py`` and run
with the Node.js the conformance suite uses:

- a server on the TypeScript SDK v1 (``tests/support/peers/ts_v1_server.cjs``, on
  ``@modelcontextprotocol/sdk`` 1.32.2): one counter ``peer://counter`` that its ``bump`` tool
  changes, served with ``resources/subscribe`` and ``notifications/resources/updated``;
- ``@modelcontextprotocol/server-everything``, as it ships: it pushes
  ``notifications/resources/updated`` for the URIs a session subscribed to, once when that
  session calls its ``toggle-subscriber-updates`` tool and then every 5 s on its own timer
  (``resources/subscriptions.js``), and its ``demo://resource/dynamic/text/{id}`` resources
  carry the time they were read (to the second), so a read 5 s later differs;
- a client on the TypeScript SDK v1 (``tests/support/peers/ts_v1_client.cjs``) that subscribes to
  ``memo://notes`` and prints one JSON line per update it hears.

Each server is watched by ``WatchManager`` and by ``asyncai-watch watch`` over stdio and
Streamable HTTP; the client subscribes to our memo server over stdio and HTTP. Watching a
2025-11-25 server needs the library's legacy-era client (``resources/subscribe``); the memo
answering the client needs our servers' legacy-era ``resources/subscribe``.

server-everything sends updates only to the session that called ``toggle-subscriber-updates``;
``asyncai-watch watch`` has its own session and calls no tools, so there the test shows the
watch starts and stops cleanly, and the notices are shown through ``WatchManager``, whose
source can call the tool on the watching session.

Without npm the tests are skipped, unless ``ASYNCAI_REQUIRE_PEERS=1`` (CI), which turns the
skip into a failure.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from asyncai_watch import McpResourceSource, WatchManager
from asyncai_watch.server.http import running_http_server
from tests.support.cli import Lines, cli, run_cli, stderr_of
from tests.support.managers import IMMEDIATE
from tests.support.memo import MEMO, memo_http_server
from tests.support.real_peers import (
    COUNTER,
    PEERS_DIR,
    WAIT,
    next_notice,
    ts_server,
    wait_until_watching,
)

TS_CLIENT = PEERS_DIR / "ts_v1_client.cjs"
ANNOUNCE_PORT = PEERS_DIR / "announce_port.cjs"
EVERYTHING_TEXT = "demo://resource/dynamic/text/1"
EVERYTHING_WAIT = 90  # its timer fires every 5 s; a read in the same second as the last is unchanged

pytestmark = [pytest.mark.peers, pytest.mark.timeout(300)]


def everything(peers: Any, transport: str) -> list[str]:
    if transport == "stdio":
        return [str(peers.node), str(peers.everything), "stdio"]
    return [str(peers.node), "--require", str(ANNOUNCE_PORT), str(peers.everything), "streamableHttp"]


EVERYTHING_ENV = {**os.environ, "PORT": "0"}  # any free port; announce_port.cjs says which


@asynccontextmanager
async def source(
    argv: Sequence[str], transport: str, env: dict[str, str] | None = None
) -> AsyncIterator[McpResourceSource]:
    """``argv`` as an MCP source: started by the source (stdio), or started here and reached by URL."""
    if transport == "stdio":
        async with McpResourceSource.stdio(argv, env=env) as src:
            yield src
    else:
        async with running_http_server(argv, env=env) as (url, _), McpResourceSource.http(url) as src:
            yield src


# -- WatchManager -------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_watch_manager_watches_a_ts_sdk_v1_server(peers: Any, transport: str) -> None:
    async with source(
        ts_server(peers, f"--{transport}", *(["127.0.0.1:0"] if transport == "http" else [])), transport
    ) as src:
        assert src.protocol_version == "2025-11-25"
        async with WatchManager([src], limits=IMMEDIATE) as m:
            info = await m.watch_start("counter", COUNTER)
            assert (info.shape, info.server) == ("state", "ts-v1-peer")
            await src.call_tool("bump", {})
            assert (await next_notice(m)).text == "MODIFIED count (0→1)"
            await src.call_tool("bump", {})
            assert (await next_notice(m)).text == "MODIFIED count (1→2)"


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_watch_manager_watches_server_everything(peers: Any, transport: str) -> None:
    async with source(everything(peers, transport), transport, env=EVERYTHING_ENV) as src:
        assert src.protocol_version == "2025-11-25"
        async with WatchManager([src], limits=IMMEDIATE) as m:
            info = await m.watch_start("text", EVERYTHING_TEXT)
            assert info.shape == "state"
            # Its updates start now, for this session's subscriptions, and repeat every 5 s.
            started = await src.call_tool("toggle-subscriber-updates", {})
            assert "Started simulated resource updated notifications" in started.text
            notice = await next_notice(m, EVERYTHING_WAIT)
            assert notice.meta["name"] == "text"
            assert notice.text.startswith("CHANGED")  # a text state: the whole text changed
            now = await m.read_resource(EVERYTHING_TEXT)
            assert now.startswith("Resource 1: This is a plaintext resource created at")


# -- asyncai-watch watch ------------------------------------------------------------------------


async def stop_cleanly(proc: anyio.abc.Process) -> None:
    proc.send_signal(signal.SIGTERM)
    with anyio.fail_after(WAIT):
        assert await proc.wait() == 0
    assert "Traceback" not in await stderr_of(proc)


async def next_json(out: Lines) -> dict[str, Any]:
    line: dict[str, Any] = json.loads(await out.next())
    return line


@pytest.mark.anyio
async def test_the_cli_watches_a_ts_sdk_v1_server_over_stdio(peers: Any, tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    # The server serves the CLI on stdio and, on the same counter, a writer over HTTP.
    command = shlex.join(ts_server(peers, "--stdio", "--http", "127.0.0.1:0", "--ready-file", str(ready)))
    async with cli("watch", COUNTER, "--server", f"ts={command}", "--debounce", "0", "--json") as (proc, out):
        await wait_until_watching(proc)
        url = ready.read_text(encoding="utf-8").split(" ", 1)[1].strip()
        async with McpResourceSource.http(url) as writer:
            await writer.call_tool("bump", {})
            record = await next_json(out)
            assert {k: record[k] for k in ("kind", "watch", "uri", "server", "lines", "failed")} == {
                "kind": "watch",
                "watch": "watch",
                "uri": COUNTER,
                "server": "ts",
                "lines": ["MODIFIED count (0→1)"],
                "failed": False,
            }
            [event] = record["events"]
            assert (event["type"], event["key"], event["old"], event["new"]) == ("MODIFIED", "count", 0, 1)
        await stop_cleanly(proc)


@pytest.mark.anyio
async def test_the_cli_watches_a_ts_sdk_v1_server_over_http(peers: Any) -> None:
    async with (
        running_http_server(ts_server(peers, "--http", "127.0.0.1:0")) as (url, _),
        cli("watch", COUNTER, "--server", f"ts={url}", "--debounce", "0", "--json") as (proc, out),
    ):
        await wait_until_watching(proc)
        async with McpResourceSource.http(url) as writer:  # another session; bump tells every one
            await writer.call_tool("bump", {})
            assert (await next_json(out))["lines"] == ["MODIFIED count (0→1)"]
        await stop_cleanly(proc)


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_the_cli_lists_and_watches_server_everything(peers: Any, transport: str) -> None:
    @asynccontextmanager
    async def spec() -> AsyncIterator[str]:
        if transport == "stdio":
            yield "everything=" + shlex.join(everything(peers, "stdio"))
        else:
            async with running_http_server(everything(peers, "http"), env=EVERYTHING_ENV) as (url, _):
                yield f"everything={url}"

    async with spec() as server:
        code, listed, err = await run_cli("resources", "--server", server, "--json")
        assert code == 0, err
        rows = {row["uri"]: row for row in map(json.loads, listed.splitlines())}
        assert rows["demo://resource/dynamic/text/{resourceId}"]["subscribable"] is True
        async with cli("watch", EVERYTHING_TEXT, "--server", server, "--json") as (proc, _):
            await wait_until_watching(proc)  # subscribed, baseline read
            await stop_cleanly(proc)


# -- a TS SDK v1 client on our memo server ------------------------------------------------------


@asynccontextmanager
async def ts_client(peers: Any, *target: str) -> AsyncIterator[Lines]:
    argv = [
        str(peers.node),
        str(TS_CLIENT),
        "--modules",
        str(peers.modules),
        "--uri",
        "memo://notes",
        *target,
    ]
    async with await anyio.open_process(argv) as proc:
        assert proc.stdout is not None
        try:
            yield Lines(proc.stdout)
        finally:
            if proc.returncode is None:
                proc.terminate()
                with anyio.fail_after(WAIT):
                    await proc.wait()


async def connected_and_subscribed(out: Lines) -> None:
    assert json.loads(await out.next()) == {"event": "connected", "server": "memo", "subscribe": True}
    assert json.loads(await out.next()) == {"event": "subscribed", "uri": "memo://notes"}


async def hears_a_change(out: Lines, memo_url: str) -> None:
    async with McpResourceSource.http(memo_url, name="outside") as writer:  # another user
        await writer.call_tool("memo_set", {"key": "todo", "value": "milk"})
        updated = json.loads(await out.next())
    assert updated == {"event": "updated", "uri": "memo://notes", "text": json.dumps({"todo": "milk"})}


@pytest.mark.anyio
async def test_a_ts_sdk_v1_client_hears_memo_change_over_stdio(peers: Any, tmp_path: Path) -> None:
    ready = tmp_path / "memo-http"
    memo = [*MEMO, "--also-http", "127.0.0.1:0", "--ready-file", str(ready)]
    async with ts_client(peers, "--stdio", *memo) as out:
        await connected_and_subscribed(out)  # memo wrote the ready file before it answered on stdio
        await hears_a_change(out, ready.read_text(encoding="utf-8").split(" ", 1)[1].strip())


@pytest.mark.anyio
async def test_a_ts_sdk_v1_client_hears_memo_change_over_http(peers: Any) -> None:
    # The TS SDK v1 client sends no header: memo serves it without authentication, by name.
    async with memo_http_server("--insecure-no-auth") as (url, _), ts_client(peers, "--http", url) as out:
        await connected_and_subscribed(out)
        await hears_a_change(out, url)


@pytest.mark.anyio
async def test_a_legacy_http_session_lost_with_its_server_is_subscribed_again_on_a_new_one(
    peers: Any,
) -> None:
    """A 2025-era server sends updates on the session's standalone GET stream. When the server
    restarts, that stream ends and the session is gone: the watch subscribes again, on a new
    session, and hears the changes after it (the re-read shows what changed meanwhile)."""
    async with (
        running_http_server(ts_server(peers, "--http", "127.0.0.1:0")) as (url, first),
        McpResourceSource.http(url) as src,
        WatchManager([src], limits=IMMEDIATE) as m,
    ):
        await m.watch_start("counter", COUNTER)
        await src.call_tool("bump", {})
        assert (await next_notice(m)).text == "MODIFIED count (0→1)"
        address = url.removeprefix("http://").removesuffix("/mcp")
        first.kill()
        await first.wait()
        async with running_http_server(ts_server(peers, "--http", address)) as (again, _):
            assert again == url
            # The new server counts from 0: the re-read after the resubscribe says so.
            assert (await next_notice(m)).text == "MODIFIED count (1→0)"
            await src.call_tool("bump", {})
            assert (await next_notice(m)).text == "MODIFIED count (0→1)"
            assert src.reconnects >= 1
