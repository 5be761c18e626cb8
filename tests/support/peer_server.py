"""A third-party-style MCP server on the SDK's low-level ``Server``, in the variants peers ship.

Run: ``python tests/support/peer_server.py VARIANT`` (stdio). Variants:

- ``no-templates``: list, read and listen handlers, and no templates handler (the SDK's
  default answers ``resources/templates/list`` with -32601);
- ``no-listen``: serves 2026-07-28 and advertises ``resources.subscribe`` but has no
  ``subscriptions/listen`` handler (as fastmcp 4.x does): a listen gets -32601;
- ``no-subscribe``: no listen handler and no ``resources.subscribe`` (the SDK derives it).

Every variant has one state resource ``peer://state`` and a ``peer_set`` tool that changes
it and publishes ``notifications/resources/updated`` on the subscription bus.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourceUpdated

STATE: dict[str, Any] = {}
URI = "peer://state"
bus = InMemorySubscriptionBus()


async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
    return types.ListResourcesResult(
        resources=[types.Resource(uri=URI, name="state", mime_type="application/json")]
    )


async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    return types.ReadResourceResult(
        contents=[
            types.TextResourceContents(uri=params.uri, mime_type="application/json", text=json.dumps(STATE))
        ]
    )


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    schema = {"type": "object", "properties": {"key": {"type": "string"}, "value": {}}, "required": ["key"]}
    return types.ListToolsResult(tools=[types.Tool(name="peer_set", input_schema=schema)])


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    args = params.arguments or {}
    STATE[str(args["key"])] = args.get("value")
    await bus.publish(ResourceUpdated(uri=URI))
    return types.CallToolResult(content=[types.TextContent(type="text", text="ok")])


class _ClaimsSubscribe(Server):
    """Advertises resources.subscribe although it serves no subscriptions/listen."""

    def get_capabilities(self, *args: Any, **kwargs: Any) -> types.ServerCapabilities:
        caps = super().get_capabilities(*args, **kwargs)
        caps.resources = types.ResourcesCapability(subscribe=True, list_changed=False)
        return caps


def build(variant: str) -> Server:
    common: dict[str, Any] = {
        "on_list_resources": list_resources,
        "on_read_resource": read_resource,
        "on_list_tools": list_tools,
        "on_call_tool": call_tool,
    }
    if variant == "no-templates":
        return Server("peer", version="1", on_subscriptions_listen=ListenHandler(bus), **common)
    if variant == "no-listen":
        return _ClaimsSubscribe("peer", version="1", **common)
    if variant == "no-subscribe":
        return Server("peer", version="1", **common)
    raise SystemExit(f"peer_server: unknown variant {variant!r}")


async def main(variant: str) -> None:
    server = build(variant)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
