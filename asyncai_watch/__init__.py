"""asyncai-watch: watch MCP resources, turn their changes into notices, never poll.

The public API is the names here plus these public submodules (docs/architecture.md):

- :mod:`asyncai_watch.codemode`: code mode for model-written Python (``CodeMode``, the watch
  built-ins, every MCP tool as a function);
- :mod:`asyncai_watch.integrations`: PydanticAI, OpenAI Agents SDK and LangGraph (extras);
- :mod:`asyncai_watch.http_auth`: bearer tokens and OAuth for Streamable HTTP servers, with the
  command-line options that configure them;
- :mod:`asyncai_watch.log`: the NDJSON log (``configure_ndjson``, ``emit``, ``logger``);
- :mod:`asyncai_watch.log_flags`: ``-v``/``-q``/``--log-level``/``--log-file``, one set for every console script;
- :mod:`asyncai_watch.signals`: SIGTERM as an orderly shutdown for a process embedding watches;
- :mod:`asyncai_watch.clock`: the injectable clocks (``SystemClock``, ``WallClock``) and the
  deadlines on them (``fail_after``, ``move_on_at``);
- :mod:`asyncai_watch.cli_help`: ``--help`` with a description and examples for a command line
  (``HelpFormatter``, ``examples``), shared by every command the distribution installs;
- :mod:`asyncai_watch.extras`: optional dependencies imported on demand, with a one-line hint
  naming the extra that installs a missing one;
- :mod:`asyncai_watch.server`: helpers for writing a watchable MCP server (subscriptions of both
  MCP eras at O(listeners) per change, stdio and Streamable HTTP serving, the event ring, the
  protocol errors);
- :mod:`asyncai_watch.exception_groups`: the exceptions a task group wrapped (``leaves``), for a
  program that reports the error inside one;
- :mod:`asyncai_watch.small_file`: read a small file the way a token or state file is read
  (regular files only, size-capped, a FIFO or device refused before a byte is read);
- :mod:`asyncai_watch.testing`: a fake clock and a fake source for tests.

Everything else is internal and may change: the pure core (``asyncai_watch.core``), the
subscriptions, the catalog, the sandbox, the CLI's and ``serve``'s insides.

Importing this package loads nothing but this file: each name below is imported on first use
(PEP 562), so ``import asyncai_watch.core`` stays free of the SDK and a plain
``import asyncai_watch`` costs next to nothing. It does check, at once, that the installed
``mcp`` is one this release is tested with (:mod:`asyncai_watch._mcp_version`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Final

from asyncai_watch._mcp_version import check_mcp_version

if TYPE_CHECKING:
    from asyncai_watch.clock import Clock, SystemClock
    from asyncai_watch.core.backoff import Backoff
    from asyncai_watch.core.events import EVENTS_MIME_TYPE, Event
    from asyncai_watch.core.limits import Limits
    from asyncai_watch.core.notice import Notice, NoticeEvent
    from asyncai_watch.core.turns import (
        NO_REPLY,
        RenderedNotice,
        Turns,
        is_no_reply,
        render_notice,
        render_turn,
    )
    from asyncai_watch.errors import (
        FilterEngineError,
        FilterError,
        FilterTimeoutError,
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
    "FilterTimeoutError",
    "InvalidWatchNameError",
    "LimitError",
    "Limits",
    "McpResourceSource",
    "NotWatchableError",
    "Notice",
    "NoticeEvent",
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

_ERRORS: Final = "asyncai_watch.errors"
_TURNS: Final = "asyncai_watch.core.turns"
_HOME: Final[dict[str, str]] = {
    "Clock": "asyncai_watch.clock",
    "SystemClock": "asyncai_watch.clock",
    "Backoff": "asyncai_watch.core.backoff",
    "EVENTS_MIME_TYPE": "asyncai_watch.core.events",
    "Event": "asyncai_watch.core.events",
    "Limits": "asyncai_watch.core.limits",
    "Notice": "asyncai_watch.core.notice",
    "NoticeEvent": "asyncai_watch.core.notice",
    "NO_REPLY": _TURNS,
    "RenderedNotice": _TURNS,
    "Turns": _TURNS,
    "is_no_reply": _TURNS,
    "render_notice": _TURNS,
    "render_turn": _TURNS,
    "FilterEngineError": _ERRORS,
    "FilterTimeoutError": _ERRORS,
    "FilterError": _ERRORS,
    "InvalidWatchNameError": _ERRORS,
    "LimitError": _ERRORS,
    "NotWatchableError": _ERRORS,
    "ProtocolVersionError": _ERRORS,
    "RoutingError": _ERRORS,
    "ServerConnectionError": _ERRORS,
    "ServerError": _ERRORS,
    "ServerTimeoutError": _ERRORS,
    "StateFileError": _ERRORS,
    "SubscriptionLostError": _ERRORS,
    "WatchError": _ERRORS,
    "ResourceInfo": "asyncai_watch.info",
    "WatchInfo": "asyncai_watch.info",
    "configure_ndjson": "asyncai_watch.log",
    "McpResourceSource": "asyncai_watch.mcp.client",
    "ResourceSource": "asyncai_watch.mcp.source",
    "WatchManager": "asyncai_watch.runtime.manager",
    "ToolCallError": "asyncai_watch.runtime.tools",
}
"""Where each public name lives; ``tests/test_public_api.py`` checks this against ``__all__``."""

_SUBMODULES: Final = frozenset(
    {"clock", "codemode", "extras", "http_auth", "integrations", "log", "server", "signals", "testing"}
)
"""The public submodules, reachable as attributes (``asyncai_watch.log.emit``) without an import."""

check_mcp_version()


def __getattr__(name: str) -> object:
    home = _HOME.get(name)
    if home is not None:
        value = getattr(importlib.import_module(home), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_SUBMODULES})
