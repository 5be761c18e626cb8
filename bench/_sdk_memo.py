"""The baseline for bench/subscriptions.py: memo's shape served with the SDK's own ``ListenHandler``.

Over stdio: ``memo://notes/{key}`` resources, a ``memo_set`` tool that publishes the key's URI on
an ``InMemorySubscriptionBus``, and ``subscriptions/listen`` served by ``ListenHandler`` (which
matches each event against every open listen). What the reference servers did before
``asyncai_watch.server.SubscriptionRegistry``.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourceUpdated

BUS = InMemorySubscriptionBus()
TOOL = types.Tool(
    name="memo_set",
    input_schema={"type": "object", "properties": {"key": {"type": "string"}, "value": {}}},
)


async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
    return types.ListResourcesResult(resources=[])


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[TOOL])


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    key = (params.arguments or {})["key"]
    await BUS.publish(ResourceUpdated(uri=f"memo://notes/{key}"))
    return types.CallToolResult(content=[types.TextContent(type="text", text="ok")])


async def main() -> None:
    server = Server(
        "sdk-memo",
        on_list_resources=list_resources,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_subscriptions_listen=ListenHandler(BUS, max_subscriptions=1_000_000),
    )
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
