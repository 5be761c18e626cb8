"""A server on the official Python SDK 2.3's low-level ``Server`` that serves only the 2025-era
``resources/subscribe`` (no ``subscriptions/listen``): the SDK then advertises
``resources.subscribe: true`` to 2025-era clients and ``false`` at 2026-07-28.

One counter, ``peer://counter`` (``{"count": N}``); the tool ``bump`` adds one and notifies.

    python sdk2_legacy_subscribe_server.py [--http HOST:PORT]     # stdio without --http
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server

from asyncai_watch.server.http import parse_host_port, serve_http
from asyncai_watch.server.stdio import stdio_server
from asyncai_watch.server.subscriptions import SubscriptionRegistry

URI = "peer://counter"
state = {"count": 0}
registry = SubscriptionRegistry("sdk2-legacy-subscribe")


async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
    return types.ListResourcesResult(
        resources=[types.Resource(uri=URI, name="counter", mime_type="application/json")]
    )


async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    text = json.dumps(state)
    return types.ReadResourceResult(
        contents=[types.TextResourceContents(uri=params.uri, mime_type="application/json", text=text)]
    )


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[types.Tool(name="bump", input_schema={"type": "object"})])


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    state["count"] += 1
    await registry.publish(URI)
    return types.CallToolResult(content=[types.TextContent(type="text", text=str(state["count"]))])


handlers = registry.handlers()
server = Server(
    "sdk2-legacy-subscribe",
    on_list_resources=list_resources,
    on_read_resource=read_resource,
    on_list_tools=list_tools,
    on_call_tool=call_tool,
    on_subscribe_resource=handlers["on_subscribe_resource"],
    on_unsubscribe_resource=handlers["on_unsubscribe_resource"],
    lifespan=handlers["lifespan"],
)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http")
    args = parser.parse_args()
    if args.http:
        host, port = parse_host_port(args.http)
        await serve_http(server.streamable_http_app(host=host), host, port)
    else:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
