"""Watching a resource on an OAuth-protected MCP server (``tests/support/oauth_server.py``, a subprocess).

The client is the library's: ``McpResourceSource.http(url, auth=...)`` with the SDK's
authorization-code provider, authorized through :class:`LoopbackAuthorization` by a
"browser" (an HTTP client that follows the authorization server's redirect to the
loopback callback, as a person's browser would). Then the server expires the access
token and ends the listen stream: the watch resubscribes, the 401 is answered with a
refresh (no second authorization), and the watch keeps delivering.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx2
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp.client.auth import TokenStorage

from asyncai_watch.core.notice import Notice
from asyncai_watch.http_auth import (
    FileTokenStorage,
    LoopbackAuthorization,
    MemoryTokenStorage,
    oauth_provider,
)
from asyncai_watch.mcp.client import McpResourceSource
from asyncai_watch.runtime.manager import WatchManager
from asyncai_watch.server.http import running_http_server
from asyncai_watch.testing import FakeClock
from tests.support import SUPPORT
from tests.support.managers import IMMEDIATE

OAUTH_SERVER = [sys.executable, str(SUPPORT / "oauth_server.py")]
NOTES = "memo://notes"
WAIT = 30


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
    loopback = LoopbackAuthorization(free_port(), show=lambda _url: None)  # the browser is told below

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

            await server.expire_tokens()  # the token runs out; its listen streams end
            with anyio.fail_after(WAIT):
                # Both backoffs: the watch's resubscribe and the resource listing's list_changed
                # listen; waking only the first to park could leave the watch's asleep.
                await clock.wait_for_sleepers(2)
            clock.advance(max(clock.deadlines()) - clock.now())
            await src.call_tool("memo_set", {"key": "todo", "value": "eggs"})
            assert (await receive(m)).text == "MODIFIED todo (milk→eggs)"

            stats = await server.stats()
            assert stats["rejected"] >= 1  # the expired token was refused...
            assert stats["refresh"] >= 1  # ...and refreshed,
            assert (stats["authorize"], stats["code"]) == (1, 1)  # with no second authorization
            assert len(browser.opened) == 1
            (watch,) = m.watch_list()
            assert watch.status == "running", watch
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


# -- the agent's command line ------------------------------------------------------------------------

AGENT = [sys.executable, "-m", "asyncai_agent"]


def agent_script(path: Path) -> Path:
    path.write_text(
        json.dumps(
            {
                "turns": [
                    {
                        "expect": "set a",
                        "steps": [
                            {
                                "run_code": 'await memo_set(key="a", value=1)\n(await memo_get(key="a"))["value"]'
                            },
                            {"expect": "1", "reply": "a is {result}"},
                        ],
                    }
                ]
            }
        )
    )
    return path


async def run_agent_with_oauth(args: list[str], browser: Browser) -> tuple[int, str, list[dict[str, Any]]]:
    """Run the agent on one input line; visit each URL it asks the person to open. Returns
    (exit code, stdout, stderr NDJSON records)."""
    env = {k: v for k, v in os.environ.items() if k not in {"OPENAI_API_KEY", "ANTHROPIC_API_KEY"}}
    records: list[dict[str, Any]] = []
    async with await anyio.open_process([*AGENT, *args], env=env) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        assert proc.stderr is not None
        await proc.stdin.send(b"set a to 1\n")
        await proc.stdin.aclose()
        stderr = BufferedByteReceiveStream(proc.stderr)
        out = b""

        async def read_stdout() -> None:
            nonlocal out
            assert proc.stdout is not None
            async for chunk in proc.stdout:
                out += chunk

        with anyio.fail_after(90):
            async with anyio.create_task_group() as tg:
                tg.start_soon(read_stdout)
                while True:
                    try:
                        line = await stderr.receive_until(b"\n", 1 << 20)
                    except (anyio.IncompleteRead, anyio.EndOfStream):
                        break
                    record = json.loads(line)
                    records.append(record)
                    if record.get("event") == "auth.authorize":
                        browser.open(record["url"])
            code = await proc.wait()
    return code, out.decode(), records


@pytest.mark.anyio
async def test_the_agent_authorizes_once_and_keeps_the_tokens_in_its_store(tmp_path: Path) -> None:
    script = agent_script(tmp_path / "script.json")
    store = tmp_path / "tokens.json"
    async with oauth_server() as server, anyio.create_task_group() as tg:
        browser = Browser(tg)
        args = ["--model", f"scripted:{script}", "--mcp-http", server.url, "--auth", "oauth"]
        args += ["--oauth-store", str(store), "--oauth-redirect-port", str(free_port())]
        code, out, records = await run_agent_with_oauth(args, browser)
        assert (code, out) == (0, "a is 1\n"), records
        (shown,) = [r for r in records if r.get("event") == "auth.authorize"]
        assert shown["level"] == "WARNING"  # shown without --verbose
        assert shown["url"].startswith(server.url.removesuffix("/mcp") + "/authorize?")

        # The next run finds the tokens in the store: no browser, no new authorization.
        code, out, records = await run_agent_with_oauth(args, browser)
        assert (code, out) == (0, "a is 1\n"), records
        assert not [r for r in records if r.get("event") == "auth.authorize"]
        stats = await server.stats()
        assert (stats["authorize"], stats["code"], len(browser.opened)) == (1, 1, 1)
        tg.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--auth", "client-credentials"], "--auth client-credentials needs --oauth-client-id"),
        (
            ["--auth", "oauth", "--oauth-issuer", "https://as"],
            "--oauth-issuer is for --auth client-credentials",
        ),
        (["--oauth-scope", "x"], "--oauth-scope need --auth oauth or --auth client-credentials"),
        (["--auth", "oauth", "--token-file", "t"], "use either --token-file"),
        (["--auth", "oauth", "--oauth-redirect-port", "70000"], "--oauth-redirect-port must be 1..65535"),
        (["--auth", "oauth", "--oauth-client-metadata-url", "http://x/c.json"], "must be an https:// URL"),
        (["--auth", "oauth", "--oauth-client-secret-file", "s"], "--oauth-client-secret-file needs"),
    ],
)
def test_bad_auth_options_are_one_line_and_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    script = agent_script(tmp_path / "script.json")
    argv = [*AGENT, "--model", f"scripted:{script}", "--mcp-http", "http://127.0.0.1:1/mcp", *args]
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL
    )
    errors = [line for line in proc.stderr.splitlines() if line.startswith("asyncai-agent: error:")]
    assert proc.returncode == 2, proc.stderr
    assert len(errors) == 1, proc.stderr
    assert message in errors[0]
    assert "Traceback" not in proc.stderr


# -- the asyncai-watch command line ------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_cli_watches_an_oauth_protected_server() -> None:
    """``asyncai-watch watch URI --server URL --auth oauth``: the person opens the printed URL once,
    then each change prints as it comes."""
    argv = [sys.executable, "-m", "asyncai_watch", "watch", NOTES, "--debounce", "0"]
    async with oauth_server() as server, anyio.create_task_group() as tg:
        browser = Browser(tg)
        argv += ["--server", f"memo={server.url}", "--auth", "oauth"]
        argv += ["--oauth-redirect-port", str(free_port())]
        async with await anyio.open_process(argv) as proc:
            assert proc.stdout is not None
            assert proc.stderr is not None
            out = BufferedByteReceiveStream(proc.stdout)
            err = BufferedByteReceiveStream(proc.stderr)
            with anyio.fail_after(60):
                while not (line := (await err.receive_until(b"\n", 1 << 16)).decode()).startswith(
                    "asyncai-watch: watching"
                ):
                    if line.startswith(server.url.removesuffix("/mcp") + "/authorize?"):
                        browser.open(line)  # the URL the person is asked to open
            assert line == f"asyncai-watch: watching {NOTES} on memo (state); Ctrl-C stops"
            assert len(browser.opened) == 1

            # Another client (authorized on its own) changes the memo; the CLI prints it.
            async with authorized_source(server.url, browser, MemoryTokenStorage()) as writer:
                await writer.call_tool("memo_set", {"key": "todo", "value": "milk"})
            with anyio.fail_after(WAIT):
                assert (await out.receive_until(b"\n", 1 << 16)).decode() == "ADDED todo"
            proc.send_signal(signal.SIGTERM)
            with anyio.fail_after(WAIT):
                assert await proc.wait() == 0
        tg.cancel_scope.cancel()
