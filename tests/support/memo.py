"""The memo reference server run as a subprocess over Streamable HTTP, and `memo_set`, a write to it."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from asyncai_watch import McpResourceSource
from asyncai_watch.server.http import running_http_server

MEMO = [sys.executable, "-m", "asyncai_servers.memo"]
WAIT = 10  # seconds: the bound on any one awaited event


@asynccontextmanager
async def memo_http_server(
    *extra_args: str, address: str = "127.0.0.1:0"
) -> AsyncIterator[tuple[str, anyio.abc.Process]]:
    """Run ``asyncai_servers.memo --http ADDRESS``; yield its URL (from the READY line) and process."""
    async with running_http_server([*MEMO, "--http", address, *extra_args]) as running:
        yield running


async def memo_set(url: str, key: str, value: str) -> None:
    async with McpResourceSource.http(url) as writer:  # another user, on its own connection
        await writer.call_tool("memo_set", {"key": key, "value": value})
