"""asyncai-watch: watch MCP resources, turn their changes into notices, never poll.

The public API is here; everything else is a submodule (docs/architecture.md):

- ``asyncai_watch.core``: the pure, sans-IO core (diff, event-log sequencer, changed paths,
  notice lines, dedupe, debounce, backoff, routing, and :mod:`asyncai_watch.core.watch`, where a
  notice is made);
- :mod:`asyncai_watch.subscriptions`: where a watch subscribes (one listen per server and URI);
- :mod:`asyncai_watch.manager`: the async shell; :mod:`asyncai_watch.mcp_source`: the MCP client;
- :mod:`asyncai_watch.codemode`: the watch built-ins for model-written code;
- :mod:`asyncai_watch.testing`: a fake clock and a fake source for tests.
"""

from __future__ import annotations

from asyncai_watch.clock import Clock, SystemClock
from asyncai_watch.core.events import EVENTS_MIME_TYPE, Event
from asyncai_watch.core.limits import Limits
from asyncai_watch.core.notice import Notice
from asyncai_watch.core.turns import NO_REPLY, RenderedNotice, Turns, is_no_reply, render_notice, render_turn
from asyncai_watch.errors import (
    FilterEngineError,
    FilterError,
    InvalidWatchNameError,
    LimitError,
    NotWatchableError,
    ProtocolVersionError,
    RoutingError,
    ServerConnectionError,
    ServerError,
    ServerTimeoutError,
    StateFileError,
    SubscriptionLostError,
    WatchError,
)
from asyncai_watch.info import ResourceInfo, WatchInfo
from asyncai_watch.log import configure_ndjson
from asyncai_watch.manager import WatchManager
from asyncai_watch.mcp_source import McpResourceSource
from asyncai_watch.source import ResourceSource
from asyncai_watch.tools import ToolCallError

__all__ = [
    "EVENTS_MIME_TYPE",
    "NO_REPLY",
    "Clock",
    "Event",
    "FilterEngineError",
    "FilterError",
    "InvalidWatchNameError",
    "LimitError",
    "Limits",
    "McpResourceSource",
    "NotWatchableError",
    "Notice",
    "ProtocolVersionError",
    "RenderedNotice",
    "ResourceInfo",
    "ResourceSource",
    "RoutingError",
    "ServerConnectionError",
    "ServerError",
    "ServerTimeoutError",
    "StateFileError",
    "SubscriptionLostError",
    "SystemClock",
    "ToolCallError",
    "Turns",
    "WatchError",
    "WatchInfo",
    "WatchManager",
    "configure_ndjson",
    "is_no_reply",
    "render_notice",
    "render_turn",
]
