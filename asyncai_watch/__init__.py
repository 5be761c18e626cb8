"""asyncai-watch: watch MCP resources, turn their changes into notices, never poll.

The public API is the names here plus these public submodules (docs/architecture.md):

- :mod:`asyncai_watch.codemode`: code mode for model-written Python (``CodeMode``, the watch
  built-ins, every MCP tool as a function);
- :mod:`asyncai_watch.integrations`: PydanticAI, OpenAI Agents SDK and LangGraph (extras);
- :mod:`asyncai_watch.http_auth`: bearer tokens and OAuth for Streamable HTTP servers, with the
  command-line options that configure them;
- :mod:`asyncai_watch.log`: the NDJSON log (``configure_ndjson``, ``emit``, ``logger``);
- :mod:`asyncai_watch.signals`: SIGTERM as an orderly shutdown for a process embedding watches;
- :mod:`asyncai_watch.testing`: a fake clock and a fake source for tests.

Everything else is internal and may change: the pure core (``asyncai_watch.core``), the
subscriptions, the catalog, the sandbox, the CLI's and ``serve``'s insides.
"""

from __future__ import annotations

from asyncai_watch.clock import Clock, SystemClock
from asyncai_watch.core.backoff import Backoff
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
from asyncai_watch.mcp.client import McpResourceSource
from asyncai_watch.mcp.source import ResourceSource
from asyncai_watch.runtime.manager import WatchManager
from asyncai_watch.runtime.tools import ToolCallError

__all__ = [
    "EVENTS_MIME_TYPE",
    "NO_REPLY",
    "Backoff",
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
