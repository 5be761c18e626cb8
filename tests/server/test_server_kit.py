"""The one-line kit (``asyncai_watch.server.kit``) on the servers Python users write: the
official SDK's ``MCPServer`` and fastmcp 4.x, run as the examples a user copies
(``examples/watchable_mcpserver.py``, ``examples/watchable_fastmcp.py``).

A change made by a tool call in another client reaches ``WatchManager`` once and in order, over
stdio and HTTP, in both eras (``subscriptions/listen``, and ``resources/subscribe`` on a
connection made with the 2025 handshake); a TypeScript SDK v1 client (a 2025-era host) hears it
too; ``notify(uri)`` announces a change made outside tools; ``asyncai-watch resources`` says
"never notified yet" until the server announced a change.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.server.mcpserver import MCPServer

from asyncai_watch import McpResourceSource, WatchManager
from asyncai_watch.server.http import running_http_server, serve_http
from asyncai_watch.server.kit import watchable
from tests.support import ROOT, SUPPORT
from tests.support.cli import Lines, run_cli
from tests.support.local_token import local_auth
from tests.support.managers import IMMEDIATE
from tests.support.real_peers import WAIT, next_notice, peers

__all__ = ["peers"]

EXAMPLES = {
    "mcpserver": ROOT / "examples" / "watchable_mcpserver.py",
    "fastmcp": ROOT / "examples" / "watchable_fastmcp.py",
}

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]


@asynccontextmanager
async def notes_server(
    framework: str, transport: str, era: str, tmp_path: Path
) -> AsyncIterator[tuple[McpResourceSource, str]]:
    """The example as a watched source, and the URL another client writes at."""
    argv = [sys.executable, str(EXAMPLES[framework])]
    legacy = era == "legacy"
    if transport == "stdio":
        ready = tmp_path / "ready"
        argv += ["--stdio", "--http", "127.0.0.1:0", "--ready-file", str(ready)]
        async with McpResourceSource.stdio(argv, legacy=legacy) as src:
            yield src, ready.read_text(encoding="utf-8").split(" ", 1)[1].strip()
    else:
        async with (
            running_http_server([*argv, "--http", "127.0.0.1:0"]) as (url, _),
            McpResourceSource.http(url, legacy=legacy) as src,
        ):
            yield src, url


async def note_set(url: str, name: str, text: str) -> None:
    async with McpResourceSource.http(url, name="writer") as writer:  # another client
        await writer.call_tool("note_set", {"name": name, "text": text})


@pytest.mark.parametrize("era", ["listen", "legacy"])
@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("framework", ["mcpserver", "fastmcp"])
async def test_a_tool_call_in_another_client_reaches_the_watch_once_and_in_order(
    framework: str, transport: str, era: str, tmp_path: Path
) -> None:
    async with notes_server(framework, transport, era, tmp_path) as (src, url):
        assert src.subscription_mode == ("listen" if era == "listen" else "subscribe")
        assert src.watchability == "advertised"
        async with WatchManager([src], limits=IMMEDIATE) as m:
            await m.watch_start("milk", "notes://milk")  # a template, filled from the tool's arguments
            await note_set(url, "milk", "1 l")
            assert (await next_notice(m)).text == "MODIFIED text (null→1 l)"
            await note_set(url, "bread", "rye")  # changes notes://bread: not this watch's
            await note_set(url, "milk", "2 l")
            assert (await next_notice(m)).text == "MODIFIED text (1 l→2 l)"
            with pytest.raises(anyio.WouldBlock):
                m.notices.receive_nowait()


@pytest.mark.parametrize("framework", ["mcpserver", "fastmcp"])
async def test_a_ts_sdk_v1_client_hears_a_kit_made_server(peers: Any, framework: str) -> None:
    argv = [sys.executable, str(EXAMPLES[framework]), "--http", "127.0.0.1:0"]
    async with running_http_server(argv) as (url, _), ts_client_on(peers, url, "notes://index") as out:
        assert json.loads(await out.next()) == {"event": "connected", "server": "notes", "subscribe": True}
        assert json.loads(await out.next()) == {"event": "subscribed", "uri": "notes://index"}
        await note_set(url, "milk", "1 l")
        assert json.loads(await out.next()) == {
            "event": "updated",
            "uri": "notes://index",
            "text": json.dumps(["milk"]),
        }


@asynccontextmanager
async def ts_client_on(peers: Any, url: str, uri: str) -> AsyncIterator[Lines]:
    argv = [
        str(peers.node),
        str(SUPPORT / "peers" / "ts_v1_client.cjs"),
        "--modules",
        str(peers.modules),
    ]
    # The example server requires the token it published for the run (the TS client sends it as a header).
    headers = [arg for value in local_auth(url).values() for arg in ("--header", f"Authorization: {value}")]
    async with await anyio.open_process([*argv, "--uri", uri, "--http", url, *headers]) as proc:
        assert proc.stdout is not None
        try:
            yield Lines(proc.stdout)
        finally:
            if proc.returncode is None:
                proc.terminate()
                with anyio.fail_after(WAIT):
                    await proc.wait()


@pytest.mark.parametrize("framework", ["mcpserver", "fastmcp"])
async def test_resources_says_never_notified_yet_until_a_change_was_announced(framework: str) -> None:
    argv = [sys.executable, str(EXAMPLES[framework]), "--http", "127.0.0.1:0"]
    async with running_http_server(argv) as (url, _):
        code, listed, err = await run_cli("resources", "--server", f"notes={url}")
        assert code == 0, err
        assert (
            "notes://index  (resource, notes, MCP 2026-07-28, application/json, watchable, never notified yet"
            in listed
        )
        await note_set(url, "milk", "1 l")
        code, listed, err = await run_cli("resources", "--server", f"notes={url}", "--json")
        assert code == 0, err
        rows = {row["uri"]: row for row in map(json.loads, listed.splitlines())}
        assert "never_notified" not in rows["notes://index"]
        assert "never_notified" not in rows["notes://{name}"]  # notes://milk matches it
        assert rows["notes://index"]["subscribable"] is True


async def test_notify_announces_a_change_made_outside_tools() -> None:
    mcp = MCPServer("clock")
    state = {"tick": 0}
    kit = watchable(mcp)

    @mcp.resource("clock://tick", mime_type="application/json")
    def tick() -> str:
        return json.dumps(state)

    ready: list[str] = []
    started = anyio.Event()

    def on_ready(url: str) -> None:
        ready.append(url)
        started.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(
            lambda: serve_http(mcp.streamable_http_app(host="127.0.0.1"), "127.0.0.1", 0, on_ready=on_ready)
        )
        with anyio.fail_after(WAIT):
            await started.wait()
        for legacy in (False, True):
            async with (
                McpResourceSource.http(ready[0], legacy=legacy) as src,
                WatchManager([src], limits=IMMEDIATE) as m,
            ):
                await m.watch_start("tick", "clock://tick")
                state["tick"] += 1
                assert await kit.notify("clock://tick") == 1  # one listener: this watch
                before = state["tick"] - 1
                assert (await next_notice(m)).text == f"MODIFIED tick ({before}→{state['tick']})"
        tg.cancel_scope.cancel()


async def test_a_template_a_call_cannot_fill_names_nothing() -> None:
    kit = watchable(MCPServer("t"), changes={"set": ["x://all", "x://{key}"]})
    assert kit.changed_by("set", {"key": "a b"}) == ["x://all", "x://a%20b"]
    assert kit.changed_by("set", {}) == ["x://all"]
    assert kit.changed_by("other", {"key": "a"}) == []
    with pytest.raises(ValueError, match="no RFC 6570 URI template"):
        watchable(MCPServer("t"), changes={"set": "x://{"})


@pytest.mark.parametrize("framework", ["mcpserver", "fastmcp"])
async def test_the_docs_servers_are_the_example_files_byte_for_byte(framework: str) -> None:
    page = (ROOT / "docs" / "existing-servers.md").read_text(encoding="utf-8")
    marker = f"<!-- doc-test: file {EXAMPLES[framework].name} -->\n```python\n"
    start = page.index(marker) + len(marker)
    assert page[start : page.index("```\n", start)] == EXAMPLES[framework].read_text(encoding="utf-8")
