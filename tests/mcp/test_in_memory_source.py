"""McpResourceSource.in_memory: an SDK server in this process, spoken to on the SDK's memory streams.

Only the transport is fake (as httpx's ``MockTransport``): the real client rules run, the capability
fallback and its refusal message included, so a test of code that uses the library can watch a
real server without a subprocess or a socket.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.server import Server, ServerRequestContext

from asyncai_servers.memo.server import build_server
from asyncai_watch import Limits, WatchManager
from asyncai_watch.errors import NotWatchableError
from asyncai_watch.mcp.client import McpResourceSource
from asyncai_watch.testing import FakeSource

pytestmark = pytest.mark.anyio

WAIT = 30  # seconds: a bound on any one awaited event, never a sleep


@pytest.mark.parametrize("legacy", [False, True], ids=["2026-07-28 listen", "2025 subscribe"])
async def test_an_in_memory_memo_server_is_watched_in_either_era(legacy: bool) -> None:
    async with McpResourceSource.in_memory(build_server(), legacy=legacy) as src:
        assert src.name == "memo"  # from serverInfo, as on a real connection
        assert src.subscription_mode == ("subscribe" if legacy else "listen")
        assert src.watchable
        with anyio.fail_after(WAIT):
            async with src.subscribe(["memo://notes"]) as updates:
                assert not (await src.call_tool("memo_set", {"key": "todo", "value": "milk"})).is_error
                async for uri in updates:
                    assert uri == "memo://notes"
                    break
            assert json.loads((await src.read("memo://notes")).text) == {"todo": "milk"}


def _unsubscribable_server() -> Server[Any]:
    """A server that serves a resource but no subscriptions (SDK servers answer -32601)."""

    async def read_resource(
        _ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        return types.ReadResourceResult(contents=[types.TextResourceContents(uri=params.uri, text="{}")])

    return Server("plain", version="1", on_read_resource=read_resource)


async def test_the_real_capability_fallback_runs_on_an_in_memory_server() -> None:
    async with McpResourceSource.in_memory(_unsubscribable_server()) as src:
        assert (src.watchable, src.watchability) == (False, "untried")
        assert (await src.read("plain://x")).text == "{}"  # its reads still work
        with anyio.fail_after(WAIT), pytest.raises(NotWatchableError) as refused:
            await src.try_subscription("plain://x")
        assert src.watchability == "refused"
        assert "server 'plain' is not watchable: it speaks MCP 2026-07-28 and does not advertise" in str(
            refused.value
        )


async def test_a_watch_manager_watches_an_in_memory_server() -> None:
    async with (
        McpResourceSource.in_memory(build_server()) as src,
        WatchManager([src], limits=Limits(debounce_quiet=0, debounce_max_wait=0)) as manager,
    ):
        with anyio.fail_after(WAIT):
            await manager.watch_start(name="notes", uri="memo://notes")
            await src.call_tool("memo_set", {"key": "todo", "value": "milk"})
            notice = await manager.notices.receive()
        assert "todo" in notice.text


@pytest.mark.parametrize("legacy", [False, True], ids=["2026-07-28", "2025-11-25"])
async def test_fake_source_agrees_with_the_real_client_on_the_rules_it_models(legacy: bool) -> None:
    """FakeSource models a server seen through the client; where its rules and the client's could
    drift (the era's subscription mode, one URI per legacy subscription, list_changed on an old
    server), the real client on an in-memory server is the reference."""
    version = "2025-11-25" if legacy else "2026-07-28"
    fake = FakeSource("memo", protocol_version=version)
    async with McpResourceSource.in_memory(build_server(), legacy=legacy) as real:
        assert real.protocol_version == fake.protocol_version
        assert (real.subscription_mode, real.watchable) == (fake.subscription_mode, fake.watchable)
        for source in (real, fake):
            if legacy:
                with pytest.raises(ValueError, match="URI"):
                    async with source.subscribe(["memo://notes", "memo://notes/a"]):
                        pass
                with pytest.raises(NotWatchableError):
                    async with source.listen_list_changed():
                        pass
            else:
                with anyio.fail_after(WAIT):
                    async with source.subscribe(["memo://notes", "memo://notes/a"]) as updates:
                        assert updates.honored in (None, frozenset({"memo://notes", "memo://notes/a"}))
