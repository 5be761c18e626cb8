"""Subscriptions as the reference servers serve them, to clients of both MCP eras (real processes).

- 2026-07-28: one ``subscriptions/listen`` holding 100,000 memo URIs is acknowledged whole and
  a change to one of them arrives; what a change costs is counted by memo itself
  (``memo_stats.delivered``: one per listener of a changed URI), and it does not grow with the
  100,000 other subscriptions.
- 2025-11-25: a stock SDK client in legacy mode (``initialize``, ``resources/subscribe``, updates
  through its ``message_handler``) hears memo's, files' and kcp's changes over stdio and
  Streamable HTTP (where they ride the session's standalone GET stream), and the switchboard's
  over HTTP; after ``resources/unsubscribe`` a URI's changes no longer come.
- A 2025-era session's subscriptions end with it: its URIs lose their listener and the server's
  last-listener hook fires (kcp stops the URI's Kubernetes watch; in process, the registry's
  hooks and counts).
- A listen whose client stopped reading is ended and releases its URIs; one that reads takes a
  burst larger than the backlog cap.
- docs/server-contract.md's two-era example server works as written, for both eras.

Every wait is on a notification, a stderr line or a hook, bounded by ``anyio.fail_after``.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.session import ClientSession
from mcp.client.subscriptions import ResourceUpdated, listen
from mcp.server import Server
from mcp.shared.memory import create_client_server_memory_streams
from mcp.shared.message import SessionMessage

from asyncai_servers.memo.server import MemoState, build_server
from asyncai_watch.server import SubscriptionRegistry
from asyncai_watch.server.http import serve_http
from asyncai_watch.server.resumable import streamable_http_app
from tests.support import ROOT
from tests.support.fake_kubectl import FakeCluster
from tests.support.http_servers import Served, reference_server
from tests.support.kcp_helpers import kcp_argv, kcp_env, write_kubeconfig
from tests.support.legacy_client import WAIT, Target, legacy_client
from tests.support.local_token import local_auth

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

MEMO = [sys.executable, "-m", "asyncai_servers.memo"]
DOC = ROOT / "docs" / "server-contract.md"


# -- 2026-07-28: one listen, 100,000 URIs -----------------------------------------------------------


async def memo_stats(client: Client) -> dict[str, Any]:
    result = await client.call_tool("memo_stats", {})
    stats: dict[str, Any] | None = result.structured_content
    assert stats is not None
    return stats


async def test_one_listen_holds_100000_uris_and_a_change_costs_only_its_listeners() -> None:
    uris = [f"memo://notes/k{i}" for i in range(100_000)]
    async with (
        Client(StdioServerParameters(command=MEMO[0], args=MEMO[1:]), cache=None) as client,
        client.listen(resource_subscriptions=["memo://notes/k7"]) as small,
    ):
        before = await memo_stats(client)
        await client.call_tool("memo_set", {"key": "k7", "value": 0})
        with anyio.fail_after(WAIT):
            assert await small.__anext__() == ResourceUpdated(uri="memo://notes/k7")
        alone = (await memo_stats(client))["delivered"] - before["delivered"]
        assert alone == 1  # memo://notes/k7 had one listener; memo://notes (also announced) none

        with anyio.fail_after(120):  # 100,000 URIs each way: generous on a loaded machine
            big_listen = client.listen(resource_subscriptions=uris)
            big = await big_listen.__aenter__()
        try:
            assert big.honored.resource_subscriptions == uris  # acknowledged whole
            stats = await memo_stats(client)
            assert (stats["subscribed_uris"], stats["subscriptions"], stats["listens"]) == (
                100_000,
                100_001,
                2,
            )

            await client.call_tool("memo_set", {"key": "k99999", "value": 1})
            with anyio.fail_after(WAIT):
                assert await big.__anext__() == ResourceUpdated(uri="memo://notes/k99999")
            # One listener of k99999, one notification: the 99,999 other URIs of that listen and the
            # other listen cost nothing, exactly as k7 alone cost one above.
            crowded = (await memo_stats(client))["delivered"] - stats["delivered"]
            assert crowded == alone == 1

            await client.call_tool("memo_set", {"key": "k7", "value": 2})
            with anyio.fail_after(WAIT):
                assert await big.__anext__() == ResourceUpdated(uri="memo://notes/k7")
                assert await small.__anext__() == ResourceUpdated(uri="memo://notes/k7")
            assert (await memo_stats(client))["delivered"] - stats[
                "delivered"
            ] == 3  # 1 + both listeners of k7
        finally:
            await big_listen.__aexit__(None, None, None)


async def test_a_listen_over_the_limit_is_refused_saying_what_is_accepted() -> None:
    async with Client(build_server(MemoState(max_uris=3)), cache=None) as client:  # in process
        with anyio.fail_after(WAIT), pytest.raises(MCPError) as refused:
            async with client.listen(resource_subscriptions=[f"memo://notes/k{i}" for i in range(4)]):
                pass
        assert refused.value.error.code == -32602
        assert "names 4 URIs; this server accepts at most 3 per listen" in refused.value.error.message
        with anyio.fail_after(WAIT):
            twice = ["memo://notes/a", "memo://notes/a", "memo://notes"]
            async with client.listen(resource_subscriptions=twice) as ok:
                assert ok.honored.resource_subscriptions == ["memo://notes/a", "memo://notes"]  # counted once


# -- 2025-11-25: resources/subscribe on memo, files and kcp, over stdio and HTTP ---------------------


class Scenario:
    """A server to subscribe to: two URIs, how to change each, how to read one (the baseline)."""

    def __init__(self, a: str, b: str, change: Callable[[Client, str, int], Awaitable[None]]) -> None:
        self.a, self.b, self.change = a, b, change


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


@asynccontextmanager
async def scenario(name: str, transport: str, work: Path) -> AsyncIterator[tuple[Target, Scenario]]:
    if transport == "http":
        async with reference_server(name, work) as served:
            yield served, _scenario(name, work)
        return
    if name == "memo":
        yield StdioServerParameters(command=MEMO[0], args=MEMO[1:]), _scenario(name, work)
    elif name == "files":
        (work / "root").mkdir(parents=True)
        args = ["-m", "asyncai_servers.files", str(work / "root")]
        yield StdioServerParameters(command=sys.executable, args=args), _scenario(name, work)
    else:
        kubeconfig = write_kubeconfig(work / "kubeconfig", "https://127.0.0.1:1")
        env = kcp_env(FakeCluster(work / "cluster"), work)
        yield (
            StdioServerParameters(command=sys.executable, args=kcp_argv(kubeconfig), env=env),
            _scenario(name, work),
        )


def _scenario(name: str, work: Path) -> Scenario:
    if name == "memo":

        async def set_key(client: Client, uri: str, n: int) -> None:
            await client.call_tool("memo_set", {"key": uri.rsplit("/", 1)[1], "value": n})

        return Scenario("memo://notes/a", "memo://notes/b", set_key)
    if name == "files":
        root = work / "root"
        for file in ("a.txt", "b.txt"):
            (root / file).write_text("0")

        async def write(client: Client, uri: str, n: int) -> None:
            await anyio.to_thread.run_sync(write_atomically, Path(uri.removeprefix("file://")), str(n))

        return Scenario(f"file://{root}/a.txt", f"file://{root}/b.txt", write)
    cluster = FakeCluster(work / "cluster")

    async def create(client: Client, uri: str, n: int) -> None:
        cluster.create(f"cm{n}", namespace=uri.rsplit("=", 1)[1])

    base = "kcp-events://watch/root:app/configmaps?namespace="
    return Scenario(f"{base}default", f"{base}other", create)


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("name", ["memo", "files", "kcp"])
async def test_a_2025_client_hears_changes_until_it_unsubscribes(
    name: str, transport: str, tmp_path: Path
) -> None:
    async with scenario(name, transport, tmp_path) as (target, s), legacy_client(target) as (client, updates):
        caps = client.server_capabilities
        assert caps.resources is not None
        assert caps.resources.subscribe is True
        with anyio.fail_after(WAIT):
            await client.subscribe_resource(s.a)
            await client.subscribe_resource(s.b)
            for uri in (s.a, s.b):  # the baseline a watcher reads (kcp: waits for its first list)
                await client.read_resource(uri)
        await s.change(client, s.a, 1)
        assert await updates.next() == s.a
        await s.change(client, s.b, 2)
        assert await updates.next() == s.b
        with anyio.fail_after(WAIT):
            await client.read_resource(s.b)  # re-read: a level-triggered server signals b again after this
            await client.unsubscribe_resource(s.a)
        await s.change(client, s.a, 3)
        await s.change(client, s.b, 4)
        # Had a's change been sent, it would have come first: one writer sends them in order.
        assert await updates.next() == s.b


async def test_a_2025_client_is_refused_a_uri_the_server_does_not_serve() -> None:
    async with legacy_client(StdioServerParameters(command=MEMO[0], args=MEMO[1:])) as (client, _):
        with anyio.fail_after(WAIT), pytest.raises(MCPError) as refused:
            await client.subscribe_resource("memo://nope")
    assert refused.value.error.code == -32602
    assert refused.value.error.message == (
        "memo: cannot subscribe to ['memo://nope']; this server serves 'memo://notes' and 'memo://notes/{key}'"
    )


async def test_the_switchboard_pushes_queue_updates_to_a_2025_client(tmp_path: Path) -> None:
    async with (
        reference_server("switchboard", tmp_path) as served,
        legacy_client(served) as (client, updates),
    ):
        queue = "switchboard://queues/ops/events"
        with anyio.fail_after(WAIT):
            await client.subscribe_resource(queue)
            with pytest.raises(MCPError, match="unknown resource 'switchboard://nope'"):
                await client.subscribe_resource("switchboard://nope")
        await client.call_tool("todo_create", {"queue": "ops", "kind": "review", "summary": "look"})
        assert await updates.next() == queue


# -- a 2025-era session's subscriptions end with it -------------------------------------------------


def hooked(
    name: str,
) -> tuple[Server[Any], SubscriptionRegistry, anyio.abc.ObjectReceiveStream[tuple[str, str]]]:
    """A small server whose registry reports its first/last-listener hooks on a stream."""
    send, receive = anyio.create_memory_object_stream[tuple[str, str]](100)
    registry = SubscriptionRegistry(
        name,
        refuse=lambda uri: None if uri.startswith("demo://") else "this server serves demo://...",
        on_first=lambda uri: send.send_nowait(("first", uri)),
        on_last=lambda uri: send.send_nowait(("last", uri)),
    )

    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[])

    return Server(name, on_list_resources=list_resources, **registry.handlers()), registry, receive


async def next_hook(hooks: anyio.abc.ObjectReceiveStream[tuple[str, str]]) -> tuple[str, str]:
    with anyio.fail_after(WAIT):
        return await hooks.receive()


@asynccontextmanager
async def served_over_http(server: Server[Any]) -> AsyncIterator[Served]:
    """``server`` on Streamable HTTP in this process (as the reference servers serve it)."""
    up, stop = anyio.Event(), anyio.Event()
    url: list[str] = []

    def ready(at: str) -> None:
        url.append(at)
        up.set()

    app = streamable_http_app(server, host="127.0.0.1")
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: serve_http(app, "127.0.0.1", 0, on_ready=ready, stop=stop, ready=io.StringIO()))
        try:
            with anyio.fail_after(WAIT):
                await up.wait()
            yield Served("hooked", url[0], local_auth(url[0]))
        finally:
            stop.set()


async def test_a_closed_http_session_s_subscriptions_end_and_its_last_hooks_fire() -> None:
    server, registry, hooks = hooked("hooked")
    async with served_over_http(server) as served, AsyncExitStack() as clients:
        a, _ = await clients.enter_async_context(legacy_client(served))
        b, _ = await clients.enter_async_context(legacy_client(served))
        with anyio.fail_after(WAIT):
            await a.subscribe_resource("demo://x")
            await a.subscribe_resource("demo://shared")
            await b.subscribe_resource("demo://shared")
            await a.subscribe_resource("demo://x")  # again: nothing changes
        assert [await next_hook(hooks), await next_hook(hooks)] == [
            ("first", "demo://x"),
            ("first", "demo://shared"),
        ]
        assert registry.stats().sessions == 2
        assert registry.listeners("demo://shared") == 2
        with anyio.fail_after(WAIT):
            await a.unsubscribe_resource("demo://x")
        assert await next_hook(hooks) == ("last", "demo://x")
        await clients.aclose()  # both sessions end (DELETE)
        # The shared URI's last listener went with the second session to end, whichever it was.
        assert await next_hook(hooks) == ("last", "demo://shared")
        stats = registry.stats()
        assert (stats.sessions, stats.uris, stats.subscriptions) == (0, 0, 0)
        assert not registry.listened("demo://shared")


async def test_a_closed_stdio_like_session_s_subscriptions_end() -> None:
    """The JSON-RPC loop stdio runs, in memory: the connection ends, and its subscriptions with it."""
    server, registry, hooks = hooked("hooked")
    async with legacy_client(server) as (client, _):
        with anyio.fail_after(WAIT):
            await client.subscribe_resource("demo://x")
            with pytest.raises(
                MCPError, match=r"hooked: cannot subscribe to \['other://y'\]; this server serves"
            ):
                await client.subscribe_resource("other://y")
        assert await next_hook(hooks) == ("first", "demo://x")
        assert registry.stats().sessions == 1
    assert await next_hook(hooks) == ("last", "demo://x")
    assert registry.stats().sessions == 0


async def test_kcp_stops_the_watch_of_a_2025_session_that_ended(tmp_path: Path) -> None:
    """Over HTTP the session ends with the client's DELETE; the URI's kubectl watch stops then."""
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", "https://127.0.0.1:1")
    argv = [sys.executable, *kcp_argv(kubeconfig, "--http", "127.0.0.1:0", "--log-level", "INFO")]
    uri = "kcp-events://watch/root:app/configmaps?namespace=default"
    async with await anyio.open_process(
        argv,
        env=kcp_env(FakeCluster(tmp_path / "cluster"), tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stderr is not None
        lines = BufferedByteReceiveStream(proc.stderr)

        async def line_with(text: str) -> str:
            with anyio.fail_after(WAIT):
                while True:  # each await is the server's next stderr line
                    line = (await lines.receive_until(b"\n", 65536)).decode()
                    if text in line:
                        return line

        try:
            url = (await line_with("READY ")).split(" ", 1)[1].strip()
            async with legacy_client(Served("kcp", url, local_auth(url))) as (client, _):
                with anyio.fail_after(WAIT):
                    await client.subscribe_resource(uri)
                assert f"{uri}: watcher started" in await line_with("watcher started")
            assert f"{uri}: watcher stopped" in await line_with("watcher stopped")
        finally:
            proc.terminate()
            await proc.wait()


async def test_a_listen_whose_client_stopped_reading_is_ended_and_releases_its_uris() -> None:
    """The backlog cap: a reading client takes any burst; one that stopped reading is let go.

    The JSON-RPC loop in memory, with the server's output relayed to the client through a stream
    with no buffer: stopping the relay is a client that stopped reading (a full pipe or socket).
    """
    lasts: list[str] = []
    registry = SubscriptionRegistry("stall", on_last=lasts.append, max_backlog=8)

    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[])

    server = Server("stall", on_list_resources=list_resources, **registry.handlers())
    uris = [f"demo://{i}" for i in range(20)]
    out_send, out_receive = anyio.create_memory_object_stream[SessionMessage](0)
    relay = anyio.CancelScope()
    async with (
        create_client_server_memory_streams() as ((client_read, client_write), (server_read, server_write)),
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(server.run, server_read, out_send, server.create_initialization_options())

        async def relay_output() -> None:
            with relay:
                async for message in out_receive:
                    await server_write.send(message)

        tg.start_soon(relay_output)
        with anyio.fail_after(WAIT):
            async with ClientSession(client_read, client_write) as session:
                await session.discover()
                async with listen(session, resource_subscriptions=uris) as sub:
                    # A burst of 20 distinct changes, more than max_backlog: the client reads, so
                    # every one arrives and the stream stays.
                    for uri in uris:
                        await registry.publish(uri)
                    got = {getattr(await sub.__anext__(), "uri", None) for _ in uris}
                    assert got == set(uris)
                    assert registry.stats().listens == 1

                    relay.cancel()  # the client stops reading: the stream's next write blocks
                    for uri in uris:
                        await registry.publish(uri)
                    # 1 taken by the stuck write, 8 queued behind it, the 10th ends the stream.
                    stats = registry.stats()
                    assert (stats.listens, stats.uris) == (0, 0)
                    assert sorted(lasts) == sorted(uris)
                    tg.cancel_scope.cancel()


# -- the contract page's example ----------------------------------------------------------------------


def doc_example() -> dict[str, Any]:
    """Run the python block of docs/server-contract.md's "Serving both eras" section; its globals."""
    section = (
        DOC.read_text().split("\n## Serving both eras with `asyncai_watch.server`", 1)[1].split("\n## ", 1)[0]
    )
    (block,) = re.findall(r"```python\n(.*?)```", section, re.S)
    namespace: dict[str, Any] = {"__name__": "notes_example"}
    exec(compile(block, str(DOC), "exec"), namespace)
    return namespace


async def test_the_contract_page_s_two_era_server_works_as_written() -> None:
    example = doc_example()
    server, set_note = example["server"], example["set_note"]
    async with (
        Client(server, cache=None) as modern,
        modern.listen(resource_subscriptions=["notes://a"]) as sub,
    ):
        await set_note("a", 1)
        with anyio.fail_after(WAIT):
            assert await sub.__anext__() == ResourceUpdated(uri="notes://a")
        content = (await modern.read_resource("notes://a")).contents[0]
        assert getattr(content, "text", None) == "1"
    async with legacy_client(server) as (legacy, updates):
        caps = legacy.server_capabilities.resources
        assert caps is not None
        assert caps.subscribe is True
        with anyio.fail_after(WAIT):
            await legacy.subscribe_resource("notes://b")
            with pytest.raises(
                MCPError, match=r"notes: cannot subscribe to \['x://y'\]; this server serves notes"
            ):
                await legacy.subscribe_resource("x://y")
        await set_note("b", 2)
        assert await updates.next() == "notes://b"
