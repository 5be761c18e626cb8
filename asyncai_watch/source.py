"""The seam between the watch machinery and a server: the ResourceSource protocol.

:class:`asyncai_watch.McpResourceSource` implements it over a real MCP
connection; tests implement it in memory. Everything the manager needs from a
server goes through here, so the manager has no MCP-specific code.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, runtime_checkable

import attrs

__all__ = [
    "MODERN_PROTOCOL_VERSION",
    "ReadResult",
    "ResourceInfo",
    "ResourceSource",
    "TemplateInfo",
    "ToolInfo",
    "ToolResult",
]

MODERN_PROTOCOL_VERSION = "2026-07-28"
"""The MCP version whose ``subscriptions/listen`` carries watches."""


@attrs.frozen(kw_only=True)
class ResourceInfo:
    uri: str
    name: str = ""
    description: str = ""
    mime_type: str | None = None


@attrs.frozen(kw_only=True)
class TemplateInfo:
    uri_template: str
    name: str = ""
    description: str = ""
    mime_type: str | None = None


@attrs.frozen(kw_only=True)
class ReadResult:
    """One ``resources/read``: the first content's text and mimeType."""

    uri: str
    text: str
    mime_type: str | None = None


@attrs.frozen(kw_only=True)
class ToolInfo:
    name: str
    description: str = ""
    input_schema: Mapping[str, Any] = attrs.field(factory=dict, hash=False)
    read_only: bool = False
    """True only when the server annotates the tool ``readOnlyHint: true``."""
    destructive: bool = False


@attrs.frozen(kw_only=True)
class ToolResult:
    """A tool call's result: the text content joined, plus structured content if any."""

    text: str
    structured: Any = None
    is_error: bool = False


@runtime_checkable
class ResourceSource(Protocol):
    """One connected server, as the watch machinery sees it."""

    @property
    def name(self) -> str:
        """A short, unique server name (used in routing results and errors)."""
        ...

    @property
    def protocol_version(self) -> str:
        """The negotiated MCP version, e.g. ``"2026-07-28"`` or ``"2025-11-25"``."""
        ...

    @property
    def subscribable(self) -> bool:
        """``capabilities.resources.subscribe`` as the server advertised it."""
        ...

    async def list_resources(self) -> list[ResourceInfo]: ...

    async def list_templates(self) -> list[TemplateInfo]: ...

    async def read(self, uri: str) -> ReadResult:
        """Read ``uri`` fresh (never from a cache). Raises on a server error."""
        ...

    def listen(self, uri: str) -> AbstractAsyncContextManager[AsyncIterator[None]]:
        """Subscribe to ``uri``.

        Entering waits until the server has acknowledged the subscription.
        The iterator yields once per (possibly coalesced) ``updated`` signal,
        ends when the server closes the subscription gracefully, and raises
        :class:`SubscriptionLostError` when it is lost. Raises
        :class:`ProtocolVersionError` on a connection that is not 2026-07-28.
        """
        ...

    async def list_tools(self) -> list[ToolInfo]: ...

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> ToolResult: ...
