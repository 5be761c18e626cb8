"""Watching a resource on an OAuth-protected MCP server (``tests/oauth_server.py``, a subprocess).

The client is the library's: ``McpResourceSource.http(url, auth=...)`` with the SDK's
authorization-code provider, authorized through :class:`LoopbackAuthorization` by a
"browser" (an HTTP client that follows the authorization server's redirect to the
loopback callback, as a person's browser would). Then the server expires the access
token and ends the listen stream: the watch resubscribes, the 401 is answered with a
refresh (no second authorization), and the watch keeps delivering.
"""

from __future__ import annotations

import io
import json
import os
import socket
import stat
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx2
import pytest
from mcp.client.auth import TokenStorage

from asyncai_servers._http import running_http_server
from asyncai_watch.clock import FakeClock
from asyncai_watch.http_auth import (
    FileTokenStorage,
    LoopbackAuthorization,
    MemoryTokenStorage,
    oauth_provider,
)
from asyncai_watch.limits import Limits
from asyncai_watch.manager import WatchManager
from asyncai_watch.mcp_source import McpResourceSource
from asyncai_watch.notice import Notice

OAUTH_SERVER = [sys.executable, str(Path(__file__).with_name("oauth_server.py"))]
NOTES = "memo://notes"
WAIT = 30
IMMEDIATE = Limits(debounce_quiet=0, debounce_max_wait=0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Browser:
    """Opens each authorization URL it is handed and follows the redirects, like a person's browser."""

    def __init__(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg
        self.opened: list[str] = []

    def open(self, url: str) -> None:
        self.opened.append(url)
        self._tg.start_soon(self._visit, url)

    async def _visit(self, url: str) -> None:
        async with httpx2.AsyncClient(follow_redirects=True, timeout=WAIT) as http:
            response = await http.get(url)  # -> 302 to http://127.0.0.1:PORT/callback?code=...
        assert response.status_code == 200, response.text
        assert "Authorized" in response.text


class OAuthServer:
    def __init__(self, url: str) -> None:
        self.url = url
        self.base = url.removesuffix("/mcp")

    async def stats(self) -> dict[str, int]:
        async with httpx2.AsyncClient(timeout=WAIT) as http:
            data: dict[str, int] = (await http.get(f"{self.base}/test/stats")).json()
        return data

    async def expire_tokens(self) -> None:
        async with httpx2.AsyncClient(timeout=WAIT) as http:
            assert (await http.post(f"{self.base}/test/expire")).status_code == 204


@asynccontextmanager
async def oauth_server() -> AsyncIterator[OAuthServer]:
    async with running_http_server(OAUTH_SERVER) as (url, _proc):
        yield OAuthServer(url)


def authorized_source(url: str, browser: Browser, storage: TokenStorage) -> McpResourceSource:
    loopback = LoopbackAuthorization(free_port(), out=io.StringIO())

    async def redirect(authorization_url: str) -> None:
        await loopback.redirect(authorization_url)  # listening from here on
        browser.open(authorization_url)

    provider = oauth_provider(
        url,
        storage=storage,
        redirect_uri=loopback.redirect_uri,
        redirect_handler=redirect,
        callback_handler=loopback.callback,
        scope="memo",
    )
    return McpResourceSource.http(url, name="memo", auth=provider)


async def receive(m: WatchManager) -> Notice:
    with anyio.fail_after(WAIT):
        return await m.notices.receive()


@pytest.mark.anyio
async def test_a_watch_outlives_its_access_token(tmp_path: Path) -> None:
    clock = FakeClock()
    async with oauth_server() as server, anyio.create_task_group() as tg:
        browser = Browser(tg)
        async with (
            authorized_source(server.url, browser, MemoryTokenStorage()) as src,
            WatchManager([src], limits=IMMEDIATE, clock=clock) as m,
        ):
            assert len(browser.opened) == 1  # connecting needed the one authorization
            await m.watch_start("notes", NOTES)
            await src.call_tool("memo_set", {"key": "todo", "value": "milk"})
            assert (await receive(m)).text == "ADDED todo"

            await server.expire_tokens()  # the token runs out; its listen stream ends
            with anyio.fail_after(WAIT):
                await clock.wait_for_sleepers(1)  # the resubscribe backoff
            deadline = clock.next_deadline
            assert deadline is not None
            clock.advance(deadline - clock.now())
            await src.call_tool("memo_set", {"key": "todo", "value": "eggs"})
            assert (await receive(m)).text == "MODIFIED todo (milk→eggs)"

            stats = await server.stats()
            assert stats["rejected"] >= 1  # the expired token was refused...
            assert stats["refresh"] >= 1  # ...and refreshed,
            assert (stats["authorize"], stats["code"]) == (1, 1)  # with no second authorization
            assert len(browser.opened) == 1
            (watch,) = m.watch_list()
            assert "failed" not in watch, watch
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_a_token_file_spares_the_next_run_an_authorization(tmp_path: Path) -> None:
    store = tmp_path / "oauth.json"
    async with oauth_server() as server, anyio.create_task_group() as tg:
        browser = Browser(tg)
        async with authorized_source(server.url, browser, FileTokenStorage(store, server.url)) as src:
            await src.call_tool("memo_set", {"key": "run", "value": 1})
        assert stat.S_IMODE(os.stat(store).st_mode) == 0o600
        saved: dict[str, Any] = json.loads(store.read_text())[server.url]
        assert saved["tokens"]["refresh_token"]
        assert saved["client_info"]["client_id"]

        await server.expire_tokens()  # the stored access token is now refused
        async with authorized_source(server.url, browser, FileTokenStorage(store, server.url)) as src:
            got = await src.call_tool("memo_get", {"key": "run"})
        assert got.structured == {"key": "run", "value": 1, "found": True}
        stats = await server.stats()
        assert (stats["authorize"], stats["code"], len(browser.opened)) == (1, 1, 1)
        assert stats["refresh"] == 1
        tg.cancel_scope.cancel()
