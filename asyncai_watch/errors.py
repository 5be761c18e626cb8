"""Typed errors. Each message says what was wrong and what would be accepted."""

from __future__ import annotations

__all__ = [
    "FilterEngineError",
    "FilterError",
    "LimitError",
    "ProtocolVersionError",
    "RoutingError",
    "StateFileError",
    "SubscriptionLostError",
    "WatchError",
]


class WatchError(Exception):
    """Base class for every error this library raises on purpose."""


class RoutingError(WatchError):
    """No connected server can serve a URI."""


class ProtocolVersionError(WatchError):
    """A server's negotiated MCP version cannot carry watches (needs 2026-07-28)."""


class FilterError(WatchError):
    """An ``on_event`` filter is not acceptable (not source text, SyntaxError, NameError, ...)."""


class FilterEngineError(FilterError):
    """The filter engine failed (its worker could not start, died or stopped answering), not the filter.

    Unlike other :class:`FilterError` cases this may pass: a restored watch that hits it is kept.
    """


class LimitError(WatchError):
    """A configured limit (see :class:`asyncai_watch.Limits`) would be exceeded."""


class StateFileError(WatchError):
    """The ``--watch-state`` file cannot be read or written; it is left untouched."""


class SubscriptionLostError(WatchError):
    """A ``subscriptions/listen`` stream ended abruptly; the caller should re-listen and re-read."""
