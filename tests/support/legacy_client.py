"""An SDK client that speaks the legacy resources/subscribe flow, collecting its resource updates."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import httpx2
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.server import Server

from tests.support.http_servers import Served

WAIT = 30.0  # seconds: the bound on any one awaited notification (generous: 2 shared cores)
Target = StdioServerParameters | Served | Server[Any]


class Updates:
    """The ``notifications/resources/updated`` a 2025-era client got, in order (its message handler)."""

    def __init__(self) -> None:
        self._send, self._recv = anyio.create_memory_object_stream[str](1000)

    async def handle(self, message: object) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            self._send.send_nowait(message.params.uri)

    async def next(self) -> str:
        with anyio.fail_after(WAIT):
            return await self._recv.receive()


@asynccontextmanager
async def legacy_client(target: Target) -> AsyncIterator[tuple[Client, Updates]]:
    """A stock SDK client speaking 2025-11-25, its updates collected; over HTTP, once its GET stream is open."""
    updates = Updates()
    if isinstance(target, StdioServerParameters | Server):  # a subprocess, or in process
        async with Client(target, mode="legacy", message_handler=updates.handle, cache=None) as client:
            assert client.protocol_version == "2025-11-25"
            yield client, updates
        return
    get_open = anyio.Event()

    async def on_response(response: httpx2.Response) -> None:
        if response.request.method == "GET" and response.status_code == 200:
            get_open.set()

    async with (
        httpx2.AsyncClient(
            headers=dict(target.headers), timeout=WAIT, event_hooks={"response": [on_response]}
        ) as http,
        Client(
            streamable_http_client(target.url, http_client=http),
            mode="legacy",
            message_handler=updates.handle,
            cache=None,
        ) as client,
    ):
        assert client.protocol_version == "2025-11-25"
        # Legacy updates ride the session's standalone GET stream, which the SDK opens after the
        # handshake: a change made before the stream exists would have nowhere to go.
        with anyio.fail_after(WAIT):
            await get_open.wait()
        yield client, updates
