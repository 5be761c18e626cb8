"""asyncai-watch: watch MCP resources, turn changes into notices, never poll.

The public API lives here; modules are one concept each (see docs/architecture.md).
"""

from __future__ import annotations

from asyncai_watch.changes import annotate, changed_paths
from asyncai_watch.clock import Clock, FakeClock, SystemClock
from asyncai_watch.codemode import ToolCallError, builtins, tool_functions
from asyncai_watch.debounce import Debouncer
from asyncai_watch.dedupe import Deduper
from asyncai_watch.diff import diff_state, item_key, parse_state
from asyncai_watch.errors import (
    FilterEngineError,
    FilterError,
    LimitError,
    ProtocolVersionError,
    RoutingError,
    StateFileError,
    SubscriptionLostError,
    WatchError,
)
from asyncai_watch.eventlog import BodyError, FeedResult, Sequencer
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
from asyncai_watch.filters import (
    Catalog,
    FilterEngine,
    FilterOutcome,
    FilterSession,
    RestrictedPythonEngine,
    default_engine,
    validate_on_event,
)
from asyncai_watch.limits import Limits
from asyncai_watch.lines import default_line
from asyncai_watch.log import configure_ndjson
from asyncai_watch.manager import InvalidWatchNameError, WatchManager
from asyncai_watch.mcp_source import McpResourceSource, ServerConnectionError, ServerError, ServerTimeoutError
from asyncai_watch.notice import SOURCE_CHANNEL, SOURCE_RESTORE, SOURCE_WATCH, Notice
from asyncai_watch.routing import Route, ServerCatalog, Template, route
from asyncai_watch.source import (
    MODERN_PROTOCOL_VERSION,
    ReadResult,
    ResourceInfo,
    ResourceSource,
    TemplateInfo,
    ToolInfo,
    ToolResult,
)
from asyncai_watch.state_file import StateFile, WatchSpec

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
    "BodyError",
    "Catalog",
    "Clock",
    "Debouncer",
    "Deduper",
    "Event",
    "FakeClock",
    "FeedResult",
    "FilterEngine",
    "FilterEngineError",
    "FilterError",
    "FilterOutcome",
    "FilterSession",
    "InvalidWatchNameError",
    "LimitError",
    "Limits",
    "McpResourceSource",
    "Notice",
    "ProtocolVersionError",
    "ReadResult",
    "ResourceInfo",
    "ResourceSource",
    "RestrictedPythonEngine",
    "Route",
    "RoutingError",
    "Sequencer",
    "ServerCatalog",
    "ServerConnectionError",
    "ServerError",
    "ServerTimeoutError",
    "Shape",
    "StateFile",
    "StateFileError",
    "SubscriptionLostError",
    "SystemClock",
    "Template",
    "TemplateInfo",
    "ToolCallError",
    "ToolInfo",
    "ToolResult",
    "WatchError",
    "WatchManager",
    "WatchSpec",
    "annotate",
    "builtins",
    "changed_paths",
    "configure_ndjson",
    "default_engine",
    "default_line",
    "diff_state",
    "item_key",
    "parse_state",
    "route",
    "shape_for_mime_type",
    "tool_functions",
    "validate_on_event",
]
