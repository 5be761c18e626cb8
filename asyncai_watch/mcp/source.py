"""The seam between the watch machinery and a server: the ResourceSource protocol.

:class:`asyncai_watch.McpResourceSource` implements it over a real MCP connection;
:class:`asyncai_watch.testing.FakeSource` in memory. Everything the manager needs from a
server goes through here, so the manager has no MCP-specific code.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Final, Literal, Protocol, runtime_checkable

import attrs

from asyncai_watch.core.resources import ListedResource, ListedTemplate

__all__ = [
    "MODERN_PROTOCOL_VERSION",
    "SUBSCRIPTION_METHODS",
    "ListedResource",
    "ListedTemplate",
    "ReadResult",
    "ResourceSource",
    "SubscriptionMode",
    "ToolInfo",
    "ToolResult",
    "TriableSource",
    "Updates",
    "Watchability",
    "subscription_mode_for",
]

MODERN_PROTOCOL_VERSION: Final = "2026-07-28"
"""The MCP version whose ``subscriptions/listen`` carries watches."""

SubscriptionMode = Literal["listen", "subscribe"]
"""How a server takes subscriptions: ``"listen"``, any number of URIs per ``subscriptions/listen``
(MCP 2026-07-28); ``"subscribe"``, one ``resources/subscribe`` per URI (MCP 2025-11-25 and older)."""


SUBSCRIPTION_METHODS: Final[dict[SubscriptionMode, str]] = {
    "listen": "subscriptions/listen",
    "subscribe": "resources/subscribe",
}
"""The MCP method each mode subscribes with (for messages: the one name a user can look up)."""


def subscription_mode_for(protocol_version: str) -> SubscriptionMode:
    """The rule, written once: ``"listen"`` on MCP 2026-07-28, else ``"subscribe"``."""
    return "listen" if protocol_version == MODERN_PROTOCOL_VERSION else "subscribe"


class Updates(Protocol):
    """An open subscription: what the server honored, then one updated URI per signal."""

    @property
    def honored(self) -> frozenset[str] | None:
        """The URIs the server said it will report (``None``: every one asked for)."""
        ...

    def __aiter__(self) -> AsyncIterator[str]:
        """The URI of each ``notifications/resources/updated`` (possibly a sub-resource of one
        subscribed); ends when the server closes the subscription gracefully, raises
        :class:`~asyncai_watch.SubscriptionLostError` when it is lost."""
        ...


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
        """The negotiated MCP version, e.g. ``"2026-07-28"`` or ``"2025-11-25"``; ``""`` while a
        source that connects in the background has not connected yet."""
        ...

    @property
    def watchable(self) -> bool:
        """Whether a watch can work here: the server advertises ``capabilities.resources.subscribe``
        in an era whose subscriptions this source speaks."""
        ...

    async def list_resources(self) -> list[ListedResource]:
        """Every fixed resource (``[]`` for a server that serves no ``resources/list``)."""
        ...

    async def list_templates(self) -> list[ListedTemplate]:
        """Every resource template (``[]`` for a server that serves no ``resources/templates/list``)."""
        ...

    async def read(self, uri: str, *, after: tuple[str, int] | None = None) -> ReadResult:
        """Read ``uri`` fresh (never from a cache). Raises on a server error.

        ``after`` is an event-log reader's position ``(log_id, seq)``; a server that knows it
        answers with the events after it (``_meta`` ``asyncai-watch/events-after``), one that
        does not answers the whole log. A source may ignore it.
        """
        ...

    @property
    def subscription_mode(self) -> SubscriptionMode:
        """How this server takes subscriptions (see :data:`SubscriptionMode`)."""
        ...

    def subscribe(self, uris: Collection[str]) -> AbstractAsyncContextManager[Updates]:
        """Subscribe to ``uris`` (one URI in mode ``"subscribe"``) until the block exits.

        Entering waits until the server has acknowledged the subscription (raises
        :class:`~asyncai_watch.ServerError` when it refused it,
        :class:`~asyncai_watch.SubscriptionLostError` when no acknowledgment came,
        :class:`~asyncai_watch.NotWatchableError` on a server that cannot carry watches).
        Updates of the same URI that pile up before the consumer asks again may come as one.
        """
        ...

    def listen_list_changed(self) -> AbstractAsyncContextManager[AsyncIterator[None]]:
        """Subscribe to ``notifications/resources/list_changed``: one ``None`` per change.

        Raises :class:`~asyncai_watch.NotWatchableError` on entry when the server cannot
        tell (then the catalog is refreshed only on a routing miss).
        """
        ...

    async def list_tools(self) -> list[ToolInfo]:
        """Every tool the server serves."""
        ...

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> ToolResult:
        """Call the tool ``name``; a tool's own failure is a result with ``is_error``."""
        ...


Watchability = Literal["advertised", "accepted", "untried", "refused"]
"""Why a server is, or is not, watchable: it advertises ``resources.subscribe``; it does not,
but a subscription tried once was ``accepted``; it does not and has not been tried yet; or it
does not and ``refused`` the one it was tried with."""


@runtime_checkable
class TriableSource(Protocol):
    """A source whose server may carry watches without advertising ``resources.subscribe``
    (the Python SDK 1.x never advertises it, even with a subscribe handler): a subscription is
    tried once, and the answer decides."""

    @property
    def watchability(self) -> Watchability: ...

    async def try_subscription(self, uri: str) -> None:
        """Subscribe to ``uri`` once and end it, unless already tried; raises
        :class:`~asyncai_watch.NotWatchableError` (one line: what was tried, what the server
        said) when the server refused it, now or before."""
        ...
