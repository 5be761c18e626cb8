"""Servers this project did not write: the shapes third-party MCP servers come in.

Real subprocesses on the SDK's low-level ``Server`` (tests/support/peer_server.py), over stdio.
"""

from __future__ import annotations

import sys

import anyio
import pytest

from asyncai_watch import McpResourceSource, NotWatchableError, WatchManager
from tests.support import SUPPORT
from tests.support.managers import IMMEDIATE

PEER = [sys.executable, str(SUPPORT / "peer_server.py")]
LEGACY = [sys.executable, str(SUPPORT / "legacy_server.py")]


@pytest.mark.anyio
async def test_a_server_without_a_templates_handler_routes_and_watches_its_fixed_uris() -> None:
    async with (
        McpResourceSource.stdio([*PEER, "no-templates"]) as peer,
        WatchManager([peer], limits=IMMEDIATE) as m,
    ):
        assert await peer.list_templates() == []  # -32601: it simply has none
        listed = await m.list_resources()
        assert [(r.uri, r.watchable) for r in listed] == [("peer://state", True)]
        info = await m.watch_start("state", "peer://state")
        assert info.shape == "state"
        await peer.call_tool("peer_set", {"key": "a", "value": 1})
        with anyio.fail_after(10):
            notice = await m.notices.receive()
        assert notice.text == "ADDED a"


@pytest.mark.anyio
async def test_a_server_that_claims_subscribe_but_serves_no_listen_is_not_watchable() -> None:
    async with (
        McpResourceSource.stdio([*PEER, "no-listen"]) as peer,
        WatchManager([peer], limits=IMMEDIATE) as m,
    ):
        with pytest.raises(NotWatchableError) as info:
            await m.watch_start("state", "peer://state")
        message = str(info.value)
        assert "'peer' is not watchable" in message
        assert "subscriptions/listen" in message
        assert "server-contract" in message
        assert m.watch_list() == []
        assert await m.read_resource("peer://state") == {}  # reads still work


@pytest.mark.anyio
async def test_a_modern_server_without_subscribe_is_listed_unwatchable_and_refused_before_listening() -> None:
    async with (
        McpResourceSource.stdio([*PEER, "no-subscribe"]) as peer,
        WatchManager([peer], limits=IMMEDIATE) as m,
    ):
        assert peer.protocol_version == "2026-07-28"
        assert [(r.uri, r.watchable) for r in await m.list_resources()] == [("peer://state", False)]
        with pytest.raises(
            NotWatchableError,
            match=r"'peer' is not watchable: it speaks MCP 2026-07-28 and does not advertise resources\.subscribe",
        ):
            await m.watch_start("state", "peer://state")


@pytest.mark.anyio
async def test_a_legacy_server_that_advertises_subscribe_is_listed_watchable_and_watched() -> None:
    async with McpResourceSource.stdio(LEGACY) as legacy, WatchManager([legacy], limits=IMMEDIATE) as m:
        listed = await m.list_resources()
        assert listed
        assert all(r.watchable and r.protocol == "2025-11-25" for r in listed)
        started = await m.watch_start("state", "legacy://state")
        assert (started.shape, started.protocol) == ("state", "2025-11-25")
        await legacy.call_tool("legacy_set", {"key": "owner", "value": "ann"})
        with anyio.fail_after(30):
            assert (await m.notices.receive()).text == "ADDED owner"
