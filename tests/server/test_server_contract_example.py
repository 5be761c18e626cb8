"""docs/server-contract.md against the library: its minimal server runs, and what it says holds.

The doc's server is ``examples/watchable_server.py``, byte for byte. It runs here as a user runs
it (a stdio subprocess, watched through ``McpResourceSource`` + ``WatchManager``), and in-process
over Streamable HTTP with ``json_response=True``, where a second connection makes the change.
The error texts the doc quotes are the ones the library raises, checked against the doc.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import ModuleType
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.server import Server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler

from asyncai_watch import (
    McpResourceSource,
    Notice,
    NotWatchableError,
    WatchError,
    WatchManager,
)
from asyncai_watch.server.http import serve_http
from tests.support import ROOT, SUPPORT
from tests.support.managers import IMMEDIATE

pytestmark = pytest.mark.anyio

DOC = ROOT / "docs" / "server-contract.md"
EXAMPLE = ROOT / "examples" / "watchable_server.py"
BOARD = [sys.executable, str(EXAMPLE)]
LEGACY = [sys.executable, str(SUPPORT / "legacy_server.py")]
PEER = [sys.executable, str(SUPPORT / "peer_server.py")]
WAIT = 30


def doc_text() -> str:
    return DOC.read_text()


def doc_server() -> str:
    section = doc_text().split("\n## A minimal watchable server", 1)[1].split("\n## ", 1)[0]
    blocks: list[str] = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the section holds one program"
    return blocks[0]


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("watchable_server", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def notices_by_watch(manager: WatchManager, count: int) -> dict[str, str]:
    """The next ``count`` notices, by watch name (watches on different URIs flush in any order)."""
    got: dict[str, str] = {}
    with anyio.fail_after(WAIT):
        while len(got) < count:
            notice: Notice = await manager.notices.receive()
            name = notice.meta["name"]
            assert name not in got, (name, got[name], notice.text)
            got[name] = notice.text
    return got


def test_the_doc_server_is_the_example_file_byte_for_byte() -> None:
    assert doc_server() == EXAMPLE.read_text()


async def test_the_example_over_stdio_is_watched_by_the_library() -> None:
    async with (
        McpResourceSource.stdio(BOARD) as board,
        WatchManager([board], limits=IMMEDIATE) as manager,
    ):
        assert (board.name, board.protocol_version, board.watchable) == ("board", "2026-07-28", True)
        listed = {r.uri: (r.example, r.watchable) for r in await manager.list_resources()}
        assert listed["board://items/{key}"] == (
            'await watch_start(name="todo", uri="board://items/todo")',
            True,
        )
        assert listed["board://events"][1] is True

        shapes = {
            name: (await manager.watch_start(name, uri)).shape
            for name, uri in [
                ("items", "board://items"),
                ("log", "board://events"),
                # One item, spelled two ways: the server notifies each spelling it was sent.
                ("upper", "board://items/caf%C3%A9"),
                ("lower", "board://items/caf%c3%a9"),
            ]
        }
        assert shapes == {"items": "state", "log": "event-log", "upper": "state", "lower": "state"}

        await board.call_tool("board_set", {"key": "café", "value": 1})
        assert await notices_by_watch(manager, 4) == {
            "items": "ADDED café",
            "log": "ADDED café",
            "upper": "CHANGED (null→1)",
            "lower": "CHANGED (null→1)",
        }
        await board.call_tool("board_set", {"key": "café", "value": 2})
        assert await notices_by_watch(manager, 4) == {
            "items": "MODIFIED café (1→2)",
            "log": "MODIFIED café (value: 1→2)",  # from the event's "old"
            "upper": "CHANGED (1→2)",
            "lower": "CHANGED (1→2)",
        }


async def test_the_example_event_log_body_and_its_positioned_reads() -> None:
    async with McpResourceSource.stdio(BOARD) as board:
        empty = json.loads((await board.read("board://events")).text)
        assert empty == {"log_id": empty["log_id"], "last_seq": 0, "events": []}
        assert isinstance(empty["log_id"], str)
        assert empty["log_id"]
        for value in (1, 2, 3):
            await board.call_tool("board_set", {"key": "a", "value": value})
        whole = await board.read("board://events")
        assert whole.mime_type == "application/vnd.asyncai.events+json"
        body = json.loads(whole.text)
        assert (body["log_id"], body["last_seq"]) == (empty["log_id"], 3)
        assert [(e["seq"], e["type"]) for e in body["events"]] == [
            (1, "ADDED"),
            (2, "MODIFIED"),
            (3, "MODIFIED"),
        ]
        assert body["events"][2]["old"] == {"name": "a", "value": 2}

        # _meta "asyncai-watch/events-after": the events after the reader's position in this log...
        after = json.loads((await board.read("board://events", after=(body["log_id"], 1))).text)
        assert [e["seq"] for e in after["events"]] == [2, 3]
        assert after["last_seq"] == 3
        # ...and the whole log for a position in another log (a reader from before a restart).
        other = json.loads((await board.read("board://events", after=("another-log", 1))).text)
        assert [e["seq"] for e in other["events"]] == [1, 2, 3]


async def test_a_first_read_failure_fails_watch_start_with_the_servers_message() -> None:
    async with (
        McpResourceSource.stdio(BOARD) as board,
        WatchManager([board], limits=IMMEDIATE) as manager,
    ):
        with pytest.raises(WatchError) as raised:
            await manager.watch_start("nope", "board://nope")
        assert str(raised.value) in doc_text()
        assert "(-32602): board: unknown resource 'board://nope'; this server serves" in str(raised.value)
        assert manager.watch_list() == []


@asynccontextmanager
async def served_over_http(server: Server[Any], *, json_response: bool) -> AsyncIterator[str]:
    """``server`` on Streamable HTTP in this process, on a free port; yields its URL."""
    app = server.streamable_http_app(json_response=json_response, host="127.0.0.1")
    up, stop = anyio.Event(), anyio.Event()
    url: list[str] = []

    def ready(at: str) -> None:
        url.append(at)
        up.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: serve_http(app, "127.0.0.1", 0, on_ready=ready, stop=stop))
        try:
            with anyio.fail_after(WAIT):
                await up.wait()
            yield url[0]
        finally:
            stop.set()  # the clients are gone by now: no listen stream holds the shutdown


async def test_json_response_true_still_carries_watches_over_http() -> None:
    example = load_example()
    async with (
        served_over_http(example.build_server(), json_response=True) as url,
        McpResourceSource.http(url, name="watcher") as watcher,
        McpResourceSource.http(url, name="writer") as writer,  # another connection
        WatchManager([watcher], limits=IMMEDIATE) as manager,
    ):
        assert watcher.watchable
        await manager.watch_start("items", "board://items")
        await manager.watch_start("log", "board://events")
        await writer.call_tool("board_set", {"key": "todo", "value": "milk"})
        assert await notices_by_watch(manager, 2) == {"items": "ADDED todo", "log": "ADDED todo"}


async def test_the_version_and_watchability_errors_are_the_ones_the_doc_quotes() -> None:
    doc = doc_text()
    async with (
        McpResourceSource.stdio([*LEGACY, "--no-subscribe"]) as legacy,
        WatchManager([legacy]) as manager,
    ):
        with pytest.raises(NotWatchableError) as raised:
            await manager.watch_start("w", "legacy://state")
        assert str(raised.value) == (
            "server 'legacy' is not watchable: it speaks MCP 2025-11-25 and does not advertise "
            "resources.subscribe, and refused the resources/subscribe it was tried with (Method not found: "
            "resources/subscribe); its tools and reads still work (docs/existing-servers.md says what makes "
            "a server watchable)"
        )
        assert str(raised.value) in doc
    for variant in ("no-subscribe", "no-listen"):
        async with McpResourceSource.stdio([*PEER, variant]) as peer, WatchManager([peer]) as manager:
            with pytest.raises(NotWatchableError) as refused:
                await manager.watch_start("w", "peer://state")
            assert str(refused.value) in doc, variant


async def test_the_sdk_advertises_subscribe_only_with_a_list_handler_and_a_listen_handler() -> None:
    async def read(ctx: Any, params: Any) -> types.ReadResourceResult:
        return types.ReadResourceResult(contents=[])

    async def listed(ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[])

    listen = ListenHandler(InMemorySubscriptionBus())
    variants: dict[str, dict[str, Any]] = {
        "list and listen": {"on_list_resources": listed, "on_subscriptions_listen": listen},
        "listen only": {"on_subscriptions_listen": listen},
        "list only": {"on_list_resources": listed},
    }
    subscribe: dict[str, bool] = {}
    for name, handlers in variants.items():
        async with Client(Server("x", on_read_resource=read, **handlers)) as client:
            assert client.protocol_version == "2026-07-28"
            resources = client.server_capabilities.resources
            subscribe[name] = resources is not None and bool(resources.subscribe)
    assert subscribe == {"list and listen": True, "listen only": False, "list only": False}
