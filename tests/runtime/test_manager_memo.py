"""WatchManager over the real memo server (a subprocess), via McpResourceSource.

Over stdio and over Streamable HTTP: ``memo_set`` -> ``notifications/resources/updated``
on ``subscriptions/listen`` -> re-read -> state diff -> notice. And coalescing: two
writes that land before one read become one net diff.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator, Collection, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
import pytest

from asyncai_watch.clock import SystemClock
from asyncai_watch.codemode import builtins
from asyncai_watch.core.notice import Notice
from asyncai_watch.errors import NotWatchableError, WatchError
from asyncai_watch.mcp.client import McpResourceSource
from asyncai_watch.mcp.source import (
    ListedResource,
    ListedTemplate,
    ReadResult,
    SubscriptionMode,
    ToolInfo,
    ToolResult,
    Updates,
)
from asyncai_watch.runtime.manager import WatchManager
from asyncai_watch.runtime.tools import tool_functions
from asyncai_watch.testing import FakeClock
from tests.support import SUPPORT
from tests.support.managers import IMMEDIATE
from tests.support.memo import memo_http_server

MEMO = [sys.executable, "-m", "asyncai_servers.memo"]
LEGACY = [sys.executable, str(SUPPORT / "legacy_server.py")]
NOTES = "memo://notes"


@asynccontextmanager
async def memo_source(transport: str) -> AsyncIterator[McpResourceSource]:
    if transport == "stdio":
        async with McpResourceSource.stdio(MEMO, name="memo") as src:
            yield src
    else:
        async with memo_http_server() as (url, _proc), McpResourceSource.http(url, name="memo") as src:
            yield src


class GatedSource:
    """Delegates to a real source; reads of one URI can be held at a gate (to make writes land first)."""

    def __init__(self, inner: McpResourceSource) -> None:
        self.inner = inner
        self.gate: anyio.Event | None = None
        self.blocked = anyio.Event()

    def hold(self) -> None:
        self.gate = anyio.Event()
        self.blocked = anyio.Event()

    def release(self) -> None:
        assert self.gate is not None
        self.gate.set()
        self.gate = None

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def protocol_version(self) -> str:
        return self.inner.protocol_version

    @property
    def watchable(self) -> bool:
        return self.inner.watchable

    def listen_list_changed(self) -> AbstractAsyncContextManager[AsyncIterator[None]]:
        return self.inner.listen_list_changed()

    async def list_resources(self) -> list[ListedResource]:
        return await self.inner.list_resources()

    async def list_templates(self) -> list[ListedTemplate]:
        return await self.inner.list_templates()

    async def read(self, uri: str, *, after: tuple[str, int] | None = None) -> ReadResult:
        gate = self.gate
        if gate is not None:
            self.blocked.set()
            await gate.wait()
        return await self.inner.read(uri, after=after)

    @property
    def subscription_mode(self) -> SubscriptionMode:
        return self.inner.subscription_mode

    def subscribe(self, uris: Collection[str]) -> AbstractAsyncContextManager[Updates]:
        return self.inner.subscribe(uris)

    async def list_tools(self) -> list[ToolInfo]:
        return await self.inner.list_tools()

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> ToolResult:
        return await self.inner.call_tool(name, arguments)


async def receive(m: WatchManager) -> Notice:
    with anyio.fail_after(15):
        return await m.notices.receive()


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_memo_set_becomes_a_state_diff_notice(transport: str) -> None:
    async with (
        memo_source(transport) as src,
        WatchManager([src], limits=IMMEDIATE, clock=SystemClock()) as m,
    ):
        code = builtins(m)
        tools = await tool_functions([src])
        listed = {r["uri"]: r for r in await code["list_resources"]()}
        assert listed[NOTES]["example"] == 'await watch_start(name="notes", uri="memo://notes")'
        assert listed[NOTES]["subscribable"] is True
        assert await code["watch_start"](name="notes", uri=NOTES) == {
            "name": "notes",
            "uri": NOTES,
            "shape": "state",
        }
        await tools["memo_set"](key="owner", value="ann")
        notice = await receive(m)
        assert notice.text == "ADDED owner"
        assert dict(notice.meta) == {"name": "notes", "uri": NOTES}
        await tools["memo_set"](key="owner", value="bob")
        assert (await receive(m)).text == "MODIFIED owner (ann→bob)"
        assert await code["read_resource"](uri=NOTES) == {"owner": "bob"}
        assert (await code["watch_list"]())[0] | {"events": 2, "notices": 2} == (await code["watch_list"]())[
            0
        ]


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_two_writes_before_one_read_give_one_net_diff(transport: str) -> None:
    async with memo_source(transport) as real:
        src = GatedSource(real)
        async with WatchManager([src], limits=IMMEDIATE, clock=SystemClock()) as m:
            await m.watch_start("notes", NOTES)
            src.hold()
            await real.call_tool("memo_set", {"key": "todo", "value": "milk"})
            with anyio.fail_after(15):
                await src.blocked.wait()  # the manager got the update and its re-read is held
            await real.call_tool("memo_set", {"key": "todo", "value": "eggs"})
            await real.call_tool("memo_set", {"key": "owner", "value": "ann"})
            src.release()
            notice = await receive(m)
            # One read saw both writes: the net change from {}, not "milk" then "eggs".
            assert sorted(notice.text.splitlines()) == ["ADDED owner", "ADDED todo"]
            await real.call_tool("memo_set", {"key": "owner", "value": "cy"})
            # The pending (coalesced) update re-read a state with no change: nothing was sent for it.
            assert (await receive(m)).text == "MODIFIED owner (ann→cy)"


@pytest.mark.anyio
async def test_template_watch_next_to_a_stopped_one() -> None:
    async with (
        McpResourceSource.stdio(MEMO, name="memo") as src,
        WatchManager([src], limits=IMMEDIATE, clock=SystemClock()) as m,
    ):
        await m.watch_start("a", NOTES)
        await m.watch_start("b", "memo://notes/todo")
        assert await m.watch_stop("a") is True
        await src.call_tool("memo_set", {"key": "todo", "value": "x"})
        notice = await receive(m)
        assert notice.meta["name"] == "b"  # "a" was stopped: its listen is gone
        assert notice.text == "CHANGED (null→x)"
        with pytest.raises(WatchError, match="already exists"):
            await m.watch_start("b", "memo://notes/todo")


@pytest.mark.anyio
async def test_a_legacy_server_without_subscribe_serves_tools_and_reads_but_no_watch() -> None:
    async with (
        McpResourceSource.stdio([*LEGACY, "--no-subscribe"]) as src,
        WatchManager([src], limits=IMMEDIATE, clock=SystemClock()) as m,
    ):
        tools = await tool_functions([src])
        assert await tools["legacy_get"](key="greeting") == "hello"
        with pytest.raises(NotWatchableError, match="speaks MCP 2025-11-25 and does not advertise"):
            await m.watch_start("state", "legacy://state")
        assert m.watch_list() == []
        assert await m.read_resource("legacy://state") == {"greeting": "hello"}


@pytest.mark.anyio
async def test_a_server_that_stops_answering_mid_watch_is_reported_and_the_watch_recovers() -> None:
    source_clock, manager_clock = FakeClock(), FakeClock()
    async with (
        memo_http_server() as (url, proc),
        McpResourceSource.http(url, name="memo", request_timeout=20, clock=source_clock) as real,
    ):
        src = GatedSource(real)
        async with WatchManager([src], limits=IMMEDIATE, clock=manager_clock) as m:
            await m.watch_start("notes", NOTES)
            src.hold()
            await real.call_tool("memo_set", {"key": "todo", "value": "milk"})
            with anyio.fail_after(15):
                await src.blocked.wait()  # the update arrived; its re-read waits at the gate
            os.kill(proc.pid, signal.SIGSTOP)  # now the server is connected but silent
            try:
                src.release()
                with anyio.fail_after(15):
                    await source_clock.wait_for_sleepers(1)  # the re-read's deadline
                source_clock.advance(20)
                notice = await receive(m)
                assert notice.text.startswith("ERROR reading memo://notes: ")
                assert "got no answer within 20 s" in notice.text
                with anyio.fail_after(15):
                    await manager_clock.wait_for_sleepers(1)  # the resubscribe backoff
            finally:
                os.kill(proc.pid, signal.SIGCONT)
            deadline = manager_clock.next_deadline
            assert deadline is not None
            manager_clock.advance(deadline - manager_clock.now())
            # Resubscribed on a new connection: the change made before the wedge is delivered.
            assert (await receive(m)).text == "ADDED todo"
            await real.call_tool("memo_set", {"key": "todo", "value": "eggs"})
            assert (await receive(m)).text == "MODIFIED todo (milk→eggs)"
            assert real.reconnects == 1
