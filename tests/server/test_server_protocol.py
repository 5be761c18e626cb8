"""What every reference server answers on the wire, over real Streamable HTTP.

- An unknown tool name is a JSON-RPC error -32602, not an ``isError`` result.
- A URI the server does not serve is -32602 (one code across servers), with the URI as
  ``data.uri`` (SEP-2164).
- The files server's tools capability is served: an empty list, and -32602 for any call.
- A 2025-11-25 client's SSE streams start with a priming event (an id, empty data)
  and a ``retry:``; a dropped stream resumes with ``Last-Event-ID``, and a resume never
  replays another session's messages.

The protocol errors go through a stock ``mcp`` client (both eras); the SSE details
are only visible on the raw wire, so those tests speak HTTP themselves.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from asyncai_watch.server.resumable import RETRY_MS, EventBuffer
from tests.support.http_servers import SERVERS, Served, reference_server_process

WAIT = 30
MODERN, LEGACY = "auto", "legacy"


@pytest.fixture(scope="module", params=SERVERS)
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    # Sync and module-scoped: one server process per server for all of this module's tests
    # (an async module-scoped fixture would share the event loop runner across modules).
    with reference_server_process(request.param, tmp_path_factory.mktemp(request.param)) as served:
        yield served


@asynccontextmanager
async def connect(served: Served, mode: str) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers=dict(served.headers), timeout=WAIT) as http,
        Client(streamable_http_client(served.url, http_client=http), mode=mode, cache=None) as client,
    ):
        yield client


@pytest.mark.anyio
@pytest.mark.parametrize("mode", [MODERN, LEGACY])
async def test_an_unknown_tool_is_a_protocol_error(server: Served, mode: str) -> None:
    async with connect(server, mode) as client:
        with anyio.fail_after(WAIT), pytest.raises(MCPError) as caught:
            await client.call_tool("no_such_tool", {})
    assert caught.value.code == -32602, caught.value
    assert "unknown tool 'no_such_tool'" in caught.value.message


@pytest.mark.anyio
@pytest.mark.parametrize("mode", [MODERN, LEGACY])
async def test_an_unknown_resource_is_invalid_params(server: Served, mode: str) -> None:
    async with connect(server, mode) as client:
        with anyio.fail_after(WAIT), pytest.raises(MCPError) as caught:
            await client.read_resource("nope://nothing/here")
    assert caught.value.code == -32602, caught.value
    assert "nope://nothing/here" in caught.value.message
    assert caught.value.data == {"uri": "nope://nothing/here"}  # SEP-2164: which URI failed


@pytest.mark.anyio
async def test_every_advertised_tools_capability_is_served(server: Served) -> None:
    async with connect(server, MODERN) as client:
        assert client.server_capabilities.tools is not None
        with anyio.fail_after(WAIT):
            tools = (await client.list_tools()).tools
        if server.name == "files":
            assert tools == []  # resources only; the call below must still be answered as the spec says
        with anyio.fail_after(WAIT), pytest.raises(MCPError) as caught:
            await client.call_tool("write_file", {})
    assert caught.value.code == -32602, caught.value


# -- SSE on the 2025-11-25 wire -------------------------------------------------------------------


def sse_events(body: str) -> list[dict[str, str]]:
    """The events of an SSE body, each as its fields (``id``, ``data``, ``retry``, ``event``)."""
    events = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            name, sep, value = line.partition(":")
            if sep and name:
                fields[name] = fields.get(name, "") + value.removeprefix(" ")
        if fields:
            events.append(fields)
    return events


class LegacySession:
    """A 2025-11-25 session spoken in raw HTTP: POSTs return whole SSE bodies."""

    HEADERS: Mapping[str, str] = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }

    def __init__(self, http: httpx2.AsyncClient, url: str) -> None:
        self.http = http
        self.url = url
        self.headers: dict[str, str] = dict(self.HEADERS)

    async def start(self) -> list[dict[str, str]]:
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"},
            },
        }
        response = await self.http.post(self.url, headers=self.headers, json=init)
        assert response.status_code == 200, response.text
        self.headers["mcp-session-id"] = response.headers["mcp-session-id"]
        self.headers["mcp-protocol-version"] = "2025-11-25"
        note = await self.http.post(
            self.url, headers=self.headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
        )
        assert note.status_code == 202, note.text
        return sse_events(response.text)

    async def request(self, request_id: int, method: str, params: dict[str, Any]) -> list[dict[str, str]]:
        body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        response = await self.http.post(self.url, headers=self.headers, json=body)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("text/event-stream")
        return sse_events(response.text)

    async def resume(self, last_event_id: str) -> list[dict[str, str]]:
        headers = {**self.headers, "Accept": "text/event-stream", "Last-Event-ID": last_event_id}
        response = await self.http.get(self.url, headers=headers)
        assert response.status_code == 200, response.text
        return sse_events(response.text)


def assert_primed(events: list[dict[str, str]]) -> None:
    assert events, "the stream carried no events"
    first = events[0]
    assert first.get("id"), f"the first event has no id: {events}"
    assert first.get("data", "") == "", f"the first event is not a priming event: {events}"
    assert first.get("retry") == str(RETRY_MS), f"no retry: {RETRY_MS} on the priming event: {events}"


@pytest.mark.anyio
async def test_sse_streams_start_with_a_priming_event_and_retry(server: Served) -> None:
    async with httpx2.AsyncClient(headers=dict(server.headers), timeout=WAIT) as http:
        session = LegacySession(http, server.url)
        with anyio.fail_after(WAIT):
            assert_primed(await session.start())
            events = await session.request(1, "tools/list", {})
    assert_primed(events)
    assert '"id":1' in events[-1]["data"]
    assert '"tools"' in events[-1]["data"]


@pytest.mark.anyio
async def test_a_dropped_stream_resumes_from_its_last_event_id(server: Served) -> None:
    async with httpx2.AsyncClient(headers=dict(server.headers), timeout=WAIT) as http:
        session = LegacySession(http, server.url)
        with anyio.fail_after(WAIT):
            await session.start()
            priming, *_rest, answer = await session.request(7, "tools/list", {})
            # As if the stream dropped right after the priming event: the answer is replayed,
            # with its own id, and the replayed stream ends (the request is complete).
            replayed = await session.resume(priming["id"])
    assert [e["data"] for e in replayed] == [answer["data"]]
    assert replayed[0]["id"] == answer["id"]


@pytest.mark.anyio
async def test_a_resume_never_replays_another_sessions_stream(server: Served) -> None:
    async with httpx2.AsyncClient(headers=dict(server.headers), timeout=WAIT) as http:
        first, second = LegacySession(http, server.url), LegacySession(http, server.url)
        with anyio.fail_after(WAIT):
            await first.start()
            await second.start()
            # Both sessions use request id 1: the SDK's stream id is "1" in each.
            priming, *_ = await first.request(1, "tools/list", {})
            await second.request(1, "tools/list", {})
            stolen = await second.resume(priming["id"])
    assert stolen == []


# -- the buffer's bounds (pure) -------------------------------------------------------------------


def _message(request_id: int, text: str = "") -> Any:
    from mcp_types import JSONRPCResponse

    return JSONRPCResponse(jsonrpc="2.0", id=request_id, result={"text": text})


@pytest.mark.anyio
async def test_the_event_buffer_keeps_the_newest_events_within_its_bounds() -> None:
    buffer = EventBuffer(max_events=3, max_bytes=10_000)
    session = buffer.session()
    first = await session.store_event("1", None)
    for n in range(5):
        await session.store_event(str(n), _message(n))
    assert len(buffer) == 3
    sent: list[Any] = []

    async def send(event: Any) -> None:
        sent.append(event)

    assert await session.replay_events_after(first, send) is None  # evicted: nothing to replay
    assert sent == []

    big = EventBuffer(max_events=100, max_bytes=2_000)
    session = big.session()
    for n in range(10):
        await session.store_event(str(n), _message(n, "x" * 500))
    assert big.bytes <= 2_000
    assert len(big) < 10
