"""``--replay-*`` and ``--session-idle`` over real sockets: a 2025-era client that resumes its
notification stream with ``Last-Event-ID`` gets what it missed (within the per-session bound), and
a session left idle ends after ``--session-idle`` (awaited through its subscriptions ending)."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import httpx2
import mcp_types as types
import pytest
from mcp.server import Server

from asyncai_watch.mcp.client import McpResourceSource
from asyncai_watch.server import SubscriptionRegistry
from asyncai_watch.server.http import running_http_server, serve_http
from asyncai_watch.server.policy import HttpLimits, HttpPolicy
from asyncai_watch.server.resumable import streamable_http_app
from tests.support.local_token import local_auth

pytestmark = pytest.mark.anyio

WAIT = 60.0
MEMO = [sys.executable, "-m", "asyncai_servers.memo", "--http", "127.0.0.1:0"]
ACCEPT = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25"}


def rpc(method: str, params: dict[str, Any] | None = None, id_: int | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    if id_ is not None:
        message["id"] = id_
    return message


async def sse_events(response: httpx2.Response) -> AsyncIterator[tuple[str | None, str]]:
    """``(id, data)`` of each SSE event of ``response``."""
    event_id: str | None = None
    data: list[str] = []
    async for line in response.aiter_lines():
        if line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())
        elif not line:
            if event_id is not None or data:
                yield event_id, "\n".join(data)
            event_id, data = None, []


async def call(
    http: httpx2.AsyncClient, url: str, message: dict[str, Any], session: str | None
) -> httpx2.Response:
    headers = {**ACCEPT, "content-type": "application/json"}
    if session is not None:
        headers["mcp-session-id"] = session
    response = await http.post(url, content=json.dumps(message), headers=headers)
    assert response.status_code in (200, 202), response.text
    return response


async def open_session(http: httpx2.AsyncClient, url: str) -> str:
    params = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    }
    response = await call(http, url, rpc("initialize", params, 1), None)
    session = response.headers["mcp-session-id"]
    await call(http, url, rpc("notifications/initialized"), session)
    return session


@asynccontextmanager
async def memo(*extra: str) -> AsyncIterator[tuple[str, httpx2.AsyncClient]]:
    async with (
        running_http_server([*MEMO, *extra], ready_timeout=WAIT) as (url, _proc),
        httpx2.AsyncClient(headers=local_auth(url), timeout=WAIT) as http,
    ):
        yield url, http


async def missed_while_away(url: str, http: httpx2.AsyncClient, changes: int) -> tuple[str, str]:
    """Subscribe a session to memo://notes, hear one change on its GET stream, drop the stream, and
    make ``changes`` more changes from another client; the session and the last event id it saw."""
    session = await open_session(http, url)
    await call(http, url, rpc("resources/subscribe", {"uri": "memo://notes"}, 2), session)
    headers = {**ACCEPT, "mcp-session-id": session}
    async with McpResourceSource.http(url, name="writer") as writer:  # another client (our own: no arguments)
        async with http.stream("GET", url, headers=headers) as stream:
            assert stream.status_code == 200
            await writer.call_tool("memo_set", {"key": "first", "value": 0})
            async for event_id, data in sse_events(stream):
                assert event_id is not None
                assert json.loads(data)["method"] == "notifications/resources/updated"
                last = event_id
                break
        for n in range(changes):
            await writer.call_tool("memo_set", {"key": f"k{n}", "value": n})
    return session, last


async def resumed(url: str, http: httpx2.AsyncClient, session: str, last: str, expect: int) -> list[str]:
    """The methods of the first ``expect`` events a resume from ``last`` replays."""
    headers = {**ACCEPT, "mcp-session-id": session, "last-event-id": last}
    methods: list[str] = []
    async with http.stream("GET", url, headers=headers) as stream:
        assert stream.status_code == 200
        if expect == 0:
            return methods
        async for _event_id, data in sse_events(stream):
            if data:
                methods.append(json.loads(data)["method"])
            if len(methods) == expect:
                break
    return methods


async def test_a_client_resuming_with_last_event_id_gets_the_updates_it_missed() -> None:
    async with memo() as (url, http):
        with anyio.fail_after(WAIT):
            session, last = await missed_while_away(url, http, 3)
            methods = await resumed(url, http, session, last, 3)
    assert methods == ["notifications/resources/updated"] * 3


async def test_replay_events_bounds_what_one_session_keeps_for_a_resume() -> None:
    """With --replay-events 2, the event the client last saw is evicted by the updates after it:
    the resume replays nothing (the client rereads), and the server's memory stayed bounded."""
    async with memo("--replay-events", "2") as (url, http):
        with anyio.fail_after(WAIT):
            session, last = await missed_while_away(url, http, 3)
            headers = {**ACCEPT, "mcp-session-id": session, "last-event-id": last}
            response = await http.get(url, headers=headers)
    assert "notifications/resources/updated" not in response.text


def hooked() -> tuple[Server[Any], anyio.abc.ObjectReceiveStream[tuple[str, str]]]:
    send, receive = anyio.create_memory_object_stream[tuple[str, str]](100)
    registry = SubscriptionRegistry(
        "hooked",
        refuse=lambda uri: None if uri.startswith("demo://") else "this server serves demo://...",
        on_first=lambda uri: send.send_nowait(("first", uri)),
        on_last=lambda uri: send.send_nowait(("last", uri)),
    )

    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[])

    return Server("hooked", on_list_resources=list_resources, **registry.handlers()), receive


async def test_an_idle_session_ends_after_session_idle() -> None:
    """A session with no request in flight and no GET stream ends after --session-idle (here 0.5 s):
    its subscriptions end (awaited, not slept for), and its id then answers 404."""
    server, hooks = hooked()
    limits = HttpLimits(session_idle=0.5)
    app = streamable_http_app(server, host="127.0.0.1", limits=limits)
    up, stop, urls = anyio.Event(), anyio.Event(), []

    def ready(at: str) -> None:
        urls.append(at)
        up.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(
            lambda: serve_http(
                app,
                "127.0.0.1",
                0,
                on_ready=ready,
                stop=stop,
                ready=io.StringIO(),
                policy=HttpPolicy(limits=limits),
            )
        )
        try:
            with anyio.fail_after(WAIT):
                await up.wait()
                url = urls[0]
                async with httpx2.AsyncClient(headers=local_auth(url), timeout=WAIT) as http:
                    session = await open_session(http, url)
                    await call(http, url, rpc("resources/subscribe", {"uri": "demo://x"}, 2), session)
                    assert await hooks.receive() == ("first", "demo://x")
                    assert await hooks.receive() == ("last", "demo://x")  # the session ended while idle
                    gone = await http.post(
                        url,
                        content=json.dumps(rpc("ping", {}, 3)),
                        headers={**ACCEPT, "content-type": "application/json", "mcp-session-id": session},
                    )
            assert gone.status_code == 404
        finally:
            stop.set()
