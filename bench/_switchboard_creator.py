"""Bench helper (not a bench): one todo_create client process for the switchboard's creates/s.

    python bench/_switchboard_creator.py URL TOKEN WORKER N

Connects with the MCP SDK client (Streamable HTTP over httpx2, one kept-alive connection), makes
one warm-up create, prints ``ready``, waits for a line on stdin, makes N creates (each with its own
idempotency key, as a careful client would), then prints the elapsed seconds and exits.
"""

from __future__ import annotations

import sys
import time

import anyio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


async def main(url: str, token: str, worker: str, n: int) -> None:
    async with (
        create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http,
        Client(streamable_http_client(url, http_client=http), cache=None) as client,
    ):
        await client.call_tool("todo_create", {"queue": "warm", "kind": "k", "summary": "warm-up"})
        print("ready", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)
        t0 = time.perf_counter()
        for i in range(n):
            result = await client.call_tool(
                "todo_create",
                {"queue": "rate", "kind": "k", "summary": "x", "idempotency_key": f"{worker}-{i}"},
            )
            if result.is_error:
                raise SystemExit(f"todo_create failed: {result.content}")
        print(f"{time.perf_counter() - t0:.6f}", flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
