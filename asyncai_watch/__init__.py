"""asyncai-watch: watch MCP resources, turn changes into notices, never poll.

The public API lives here; modules are one concept each (see docs/architecture.md).
"""

from __future__ import annotations

from asyncai_watch.errors import (
    FilterError,
    LimitError,
    ProtocolVersionError,
    RoutingError,
    StateFileError,
    SubscriptionLostError,
    WatchError,
)
from asyncai_watch.events import (
    ADDED,
    CHANGED,
    DELETED,
    ERROR,
    EVENTS_MIME_TYPE,
    GAP,
    MODIFIED,
    Event,
    Shape,
    shape_for_mime_type,
)
from asyncai_watch.limits import Limits
from asyncai_watch.notice import SOURCE_CHANNEL, SOURCE_RESTORE, SOURCE_WATCH, Notice
from asyncai_watch.source import (
    MODERN_PROTOCOL_VERSION,
    ReadResult,
    ResourceInfo,
    ResourceSource,
    TemplateInfo,
    ToolInfo,
    ToolResult,
)

__all__ = [
    "ADDED",
    "CHANGED",
    "DELETED",
    "ERROR",
    "EVENTS_MIME_TYPE",
    "GAP",
    "MODERN_PROTOCOL_VERSION",
    "MODIFIED",
    "SOURCE_CHANNEL",
    "SOURCE_RESTORE",
    "SOURCE_WATCH",
    "Event",
    "FilterError",
    "LimitError",
    "Limits",
    "Notice",
    "ProtocolVersionError",
    "ReadResult",
    "ResourceInfo",
    "ResourceSource",
    "RoutingError",
    "Shape",
    "StateFileError",
    "SubscriptionLostError",
    "TemplateInfo",
    "ToolInfo",
    "ToolResult",
    "WatchError",
    "shape_for_mime_type",
]
