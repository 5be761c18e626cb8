"""The protocol errors an MCP server answers with, so every server of ours agrees on codes and wording.

Used by the reference servers and by the Channels bridge ``asyncai-watch serve``.

MCP makes an unknown tool name a JSON-RPC protocol error with code -32602
(invalid params), not an ``isError`` tool result: ``isError`` is for a tool
that ran and failed, which the model should read. A URI the server does not
serve is -32602 too (the 2026-07-28 spec retired -32002 for it), and its error
``data`` carries ``{"uri": <the URI asked for>}`` (SEP-2164), so a client can tell
which URI of a batch failed without parsing the message. Raise what these
functions return from a request handler; the SDK turns an ``MCPError`` into the
JSON-RPC error.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from asyncai_watch.echo import clip, quoted

__all__ = ["RESOURCE_NOT_FOUND", "UNKNOWN_TOOL", "resource_error", "resource_not_found", "unknown_tool"]

UNKNOWN_TOOL: Final = INVALID_PARAMS
"""-32602: ``tools/call`` named a tool the server does not offer."""

RESOURCE_NOT_FOUND: Final = INVALID_PARAMS
"""-32602: ``resources/read`` (or a subscription) named a URI the server does not serve."""


def unknown_tool(server: str, name: str, tools: Iterable[str]) -> MCPError:
    """The error for ``tools/call`` of ``name``, which ``server`` does not offer; it lists ``tools``."""
    offered = list(tools)
    accepted = f"its tools are {', '.join(offered)}" if offered else "it offers no tools"
    return MCPError(UNKNOWN_TOOL, f"{server}: unknown tool {quoted(name)}; {accepted}")


def resource_not_found(server: str, uri: str, served: str) -> MCPError:
    """The error for a URI ``server`` does not serve; ``served`` says what it does serve."""
    return resource_error(uri, f"{server}: unknown resource {quoted(uri)}; {served}")


def resource_error(uri: str, message: str) -> MCPError:
    """-32602 for ``uri``, which names no resource this server can serve; ``message`` says why
    and what would be accepted. The URI goes in the error's ``data`` too."""
    return MCPError(RESOURCE_NOT_FOUND, message, data={"uri": clip(uri)})  # caller input, capped
