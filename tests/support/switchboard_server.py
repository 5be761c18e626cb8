"""The switchboard server as a subprocess over Streamable HTTP, its credentials and clients of it."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from asyncai_agent.channels import ChannelExtension
from asyncai_watch.core.notice import Notice
from asyncai_watch.server.http import running_http_server
from tests.support.pg import Store

SWITCHBOARD = [sys.executable, "-m", "asyncai_servers.switchboard"]
WAIT = 15
TOKENS = {
    "alice": "alice-token",  # human, verified, ops
    "carol": "carol-token",  # human, unverified, ops
    "bot": "bot-token-1",  # agent, every queue
    "eve": "eve-token-1",  # agent, ops
    "dave": "dave-token",  # human, verified, other
}
CONFIG = {
    "credentials": [
        {
            "name": "alice",
            "token": TOKENS["alice"],
            "queues": ["ops"],
            "attribution": "human",
            "verified": True,
        },
        {"name": "carol", "token": TOKENS["carol"], "queues": ["ops"], "attribution": "human"},
        {"name": "bot", "token": TOKENS["bot"], "queues": ["*"], "attribution": "agent", "verified": True},
        {"name": "eve", "token": TOKENS["eve"], "queues": ["ops"], "attribution": "agent"},
        {
            "name": "dave",
            "token": TOKENS["dave"],
            "queues": ["other"],
            "attribution": "human",
            "verified": True,
        },
    ]
}


@pytest.fixture(name="config")
def config_fixture(tmp_path: Path) -> Path:
    path = tmp_path / "credentials.json"
    path.write_text(json.dumps(CONFIG))
    return path


class Running:
    def __init__(self, url: str, proc: anyio.abc.Process) -> None:
        self.url = url
        self.proc = proc


@asynccontextmanager
async def switchboard_http(
    store: Store, config: Path, *extra: str, http: str = "127.0.0.1:0"
) -> AsyncIterator[Running]:
    """Run the server on ``--http 127.0.0.1:0``; yield its URL (from the READY line) and process."""
    argv = [*SWITCHBOARD, "--config", str(config), *store.cli, "--http", http, *extra]
    async with running_http_server(argv) as (url, proc):
        yield Running(url, proc)


class Inbox:
    """Collects channel Notices from a ChannelExtension."""

    def __init__(self, server: str = "switchboard") -> None:
        self.send, self.recv = anyio.create_memory_object_stream[Notice](1000)
        self.extension = ChannelExtension(server, self.send.send_nowait)

    async def next(self) -> Notice:
        with anyio.fail_after(WAIT):
            return await self.recv.receive()


@asynccontextmanager
async def connect(url: str, who: str, extensions: Sequence[Any] = ()) -> AsyncIterator[Client]:
    async with AsyncExitStack() as stack:
        http = await stack.enter_async_context(
            create_mcp_http_client(headers={"Authorization": f"Bearer {TOKENS[who]}"})
        )
        client = Client(
            streamable_http_client(url, http_client=http), extensions=list(extensions) or None, cache=None
        )
        await stack.enter_async_context(client)  # bounded by pytest-timeout (a task group lives inside)
        yield client


async def call(client: Client, tool: str, **args: Any) -> Any:
    with anyio.fail_after(WAIT):
        result = await client.call_tool(tool, args)
    assert not result.is_error, result.content
    return result.structured_content


@pytest.fixture(name="sqlite_store")
def sqlite_store_fixture(tmp_path: Path) -> Store:
    path = tmp_path / "switchboard.db"
    return Store(kind="sqlite", cli=["--sqlite", str(path)], target=str(path))
