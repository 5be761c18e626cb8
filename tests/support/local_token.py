"""The SDK's own client against our loopback servers, with the token a server published for the run.

Our clients find it by themselves (``asyncai_watch.http_auth.local``); the SDK's ``Client(url)``
does not, so tests that speak raw MCP hand it the header.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from asyncai_watch.http_auth.local import local_headers


def local_auth(url: str, headers: Mapping[str, str] | None = None) -> dict[str, str]:
    """``headers`` plus ``Authorization`` with the token the loopback server at ``url`` published."""
    return dict(local_headers(url, headers, has_auth=False) or {})


@asynccontextmanager
async def local_client(url: str, **kwargs: Any) -> AsyncIterator[Client]:
    """``mcp.Client(url, **kwargs)`` sending the published token."""
    async with (
        httpx2.AsyncClient(headers=local_auth(url), timeout=httpx2.Timeout(30.0, read=300.0)) as http,
        Client(streamable_http_client(url, http_client=http), **kwargs) as client,
    ):
        yield client
