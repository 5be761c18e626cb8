"""Loopback servers authenticate too: a token generated for the run, published to this user's clients
in a private runtime directory (asyncai_watch.http_auth.local, docs/http-security.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import httpx2
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from asyncai_watch.http_auth.local import (
    LocalTokenError,
    find_token,
    local_headers,
    published_token,
    token_path,
)
from asyncai_watch.mcp.client import McpResourceSource

pytestmark = pytest.mark.anyio

WAIT = 60.0
MEMO = [sys.executable, "-m", "asyncai_servers.memo", "--http", "127.0.0.1:0"]
INITIALIZE = (
    b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",'
    b'"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}'
)
MCP_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


@pytest.fixture
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A runtime directory of this test's own (servers started here inherit it)."""
    base = tmp_path / "run"
    base.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(base))
    return base / "asyncai-watch"


@asynccontextmanager
async def memo(*extra: str) -> AsyncIterator[tuple[str, list[str], anyio.abc.Process]]:
    """memo on loopback: its URL, the stderr lines up to READY, and the process."""
    async with await anyio.open_process(
        [*MEMO, *extra], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    ) as proc:
        assert proc.stderr is not None
        lines = BufferedByteReceiveStream(proc.stderr)
        seen: list[str] = []
        try:
            with anyio.fail_after(WAIT):
                while not seen or not seen[-1].startswith("READY "):
                    seen.append((await lines.receive_until(b"\n", 65536)).decode())
            yield seen[-1].split(" ", 1)[1], seen, proc
        finally:
            if proc.returncode is None:
                proc.terminate()
            with anyio.fail_after(WAIT):
                await proc.wait()


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def tokens_in(directory: Path) -> list[Path]:
    return list(directory.glob("*.token")) if directory.exists() else []


async def initialize(url: str, headers: dict[str, str]) -> httpx2.Response:
    async with httpx2.AsyncClient(timeout=WAIT) as client:
        return await client.post(url, content=INITIALIZE, headers={**MCP_HEADERS, **headers})


async def test_a_loopback_server_refuses_a_request_without_its_token(runtime: Path) -> None:
    # Not a terminal here, so the token's path is in the log (-v puts it on stderr).
    async with memo("-v") as (url, lines, _proc):
        refused = await initialize(url, {})
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("Bearer")
        [announced] = [line for line in lines if "token" in line]
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        path = token_path("127.0.0.1", port)
        assert str(path) in announced  # said at start-up, for curl or another client
        assert path.parent == runtime
        token = path.read_text().strip()
        assert (await initialize(url, {"Authorization": f"Bearer {token}"})).status_code == 200


async def test_our_client_connects_with_no_arguments(runtime: Path) -> None:
    async with memo() as (url, _lines, _proc):
        async with McpResourceSource.http(url) as client:
            result = await client.call_tool("memo_set", {"key": "k", "value": "v"})
        assert not result.is_error
        # localhost names the same server
        async with McpResourceSource.http(url.replace("127.0.0.1", "localhost")) as client:
            assert not (await client.call_tool("memo_get", {"key": "k"})).is_error


async def test_the_token_file_is_private_and_removed_when_the_server_stops(runtime: Path) -> None:
    async with memo() as (url, _lines, proc):
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        path = token_path("127.0.0.1", port)
        assert mode(path) == 0o600
        assert mode(runtime) == 0o700
        proc.terminate()
        with anyio.fail_after(WAIT):
            await proc.wait()
    assert not path.exists()


async def test_insecure_no_auth_serves_loopback_without_a_token_and_warns(runtime: Path) -> None:
    async with memo("--insecure-no-auth") as (url, lines, _proc):
        assert (await initialize(url, {})).status_code == 200
        assert any("NO authentication" in line for line in lines)
        assert not tokens_in(runtime)


def test_a_token_file_others_can_read_is_refused_naming_its_path(runtime: Path) -> None:
    with published_token("127.0.0.1", 40999) as (_token, path):
        path.chmod(0o644)
        with pytest.raises(LocalTokenError, match=f"{path}.*mode 0644"):
            find_token("http://127.0.0.1:40999/mcp")


@pytest.mark.skipif(os.getuid() != 0, reason="making a file another user's needs root")
def test_another_users_token_file_is_refused_naming_its_path(runtime: Path) -> None:
    with published_token("127.0.0.1", 40998) as (_token, path):
        os.chown(path, 65534, 65534)
        with pytest.raises(LocalTokenError, match=f"{path}.*belongs to uid 65534"):
            find_token("http://127.0.0.1:40998/mcp")


@pytest.mark.skipif(os.getuid() != 0, reason="making a directory another user's needs root")
def test_another_users_runtime_directory_is_refused_naming_its_path(runtime: Path) -> None:
    runtime.mkdir(mode=0o700)
    os.chown(runtime, 65534, 65534)
    with pytest.raises(LocalTokenError, match=f"{runtime}.*belongs to uid 65534"):
        find_token("http://127.0.0.1:40997/mcp")


def test_a_shared_runtime_directory_is_refused_naming_its_path(runtime: Path) -> None:
    runtime.mkdir(mode=0o700)
    runtime.chmod(0o755)
    with pytest.raises(LocalTokenError, match=f"{runtime}.*mode 0755"):
        find_token("http://127.0.0.1:40996/mcp")


async def test_our_client_names_a_refused_token_file_when_it_connects(runtime: Path) -> None:
    async with memo() as (url, _lines, _proc):
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        token_path("127.0.0.1", port).chmod(0o640)
        with anyio.fail_after(WAIT), pytest.raises(Exception, match="mode 0640") as caught:
            async with McpResourceSource.http(url) as client:
                await client.call_tool("memo_get", {"key": "k"})
        assert str(token_path("127.0.0.1", port)) in str(caught.value)


def test_only_loopback_urls_without_credentials_get_the_published_token(runtime: Path) -> None:
    with published_token("127.0.0.1", 40995) as (token, _path):
        assert local_headers("http://127.0.0.1:40995/mcp", None, has_auth=False) == {
            "Authorization": f"Bearer {token}"
        }
        assert local_headers("http://[::1]:40995/mcp", None, has_auth=False) == {
            "Authorization": f"Bearer {token}"
        }
        mine = {"Authorization": "Bearer mine"}
        assert local_headers("http://127.0.0.1:40995/mcp", mine, has_auth=False) == mine
        assert local_headers("http://127.0.0.1:40995/mcp", None, has_auth=True) is None
        assert local_headers("http://10.0.0.1:40995/mcp", None, has_auth=False) is None
        assert find_token("http://127.0.0.1:40994/mcp") is None  # another port: no file


@pytest.mark.parametrize("module", ["asyncai_servers.memo", "asyncai_servers.files"])
def test_a_server_that_cannot_publish_its_token_exits_2_with_one_line(
    runtime: Path, tmp_path: Path, module: str
) -> None:
    runtime.mkdir(mode=0o700)
    runtime.chmod(0o777)
    args = [str(tmp_path)] if module.endswith("files") else []
    done = subprocess.run(
        [sys.executable, "-m", module, *args, "--http", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert f"{runtime}" in done.stderr
    assert "mode 0777" in done.stderr
