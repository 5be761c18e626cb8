"""Typed errors. Each message says what was wrong and what would be accepted."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Literal

from asyncai_watch.echo import clip, redact

__all__ = [
    "MAX_SERVED",
    "BaselineError",
    "ConnectionKind",
    "FilterEngineError",
    "FilterError",
    "FilterTimeoutError",
    "InvalidWatchNameError",
    "LimitError",
    "NotWatchableError",
    "ProtocolVersionError",
    "RoutingError",
    "ServerConnectionError",
    "ServerError",
    "ServerTimeoutError",
    "StateFileError",
    "SubscriptionLostError",
    "WatchError",
    "describe",
]


class WatchError(Exception):
    """Base class for every error this library raises on purpose."""


class RoutingError(WatchError):
    """No connected server can serve a URI."""


class NotWatchableError(WatchError):
    """The server cannot carry a watch: no ``resources.subscribe`` or no ``subscriptions/listen``.

    Its tools and reads still work. docs/server-contract.md says what makes a server watchable.
    """

    @staticmethod
    def for_server(server: str, protocol_version: str) -> NotWatchableError:
        """The error for ``watch_start`` on a server that cannot carry watches, saying why."""
        return not_watchable(
            server,
            f"it speaks MCP {protocol_version} and does not advertise resources.subscribe (it serves "
            "neither subscriptions/listen nor resources/subscribe). Its tools and read_resource still "
            f"work; {WATCHABLE_DOC}.",
            prefix="watch_start: ",
        )


class ProtocolVersionError(NotWatchableError):
    """A request needs a newer MCP version than the server speaks (e.g. ``subscriptions/listen``,
    which 2025-era servers do not serve; their watches ride ``resources/subscribe`` instead)."""


class InvalidWatchNameError(WatchError):
    """A watch name is empty, too long, or has characters outside ``[A-Za-z0-9_.-]``."""


class FilterError(WatchError):
    """An ``on_event`` filter is not acceptable (not source text, SyntaxError, NameError, ...)."""


class FilterTimeoutError(FilterError):
    """A filter ran out of time on its sample event at start: perhaps only for now (a catalog
    read of a server that is still starting), so a restore tries it again."""


class FilterEngineError(FilterError):
    """The filter engine failed (its worker could not start, died or stopped answering), not the filter.

    Unlike other :class:`FilterError` cases this may pass: a restored watch that hits it is kept.
    """


class LimitError(WatchError, ValueError):
    """A configured limit (see :class:`asyncai_watch.Limits`) would be exceeded, or a
    :class:`~asyncai_watch.Limits` value itself is out of range."""


class StateFileError(WatchError):
    """The ``--watch-state`` file cannot be read or written; it is left untouched."""


class SubscriptionLostError(WatchError):
    """A ``subscriptions/listen`` stream ended abruptly; the caller should re-listen and re-read."""


MAX_SERVED: Final = 100
"""The most URIs and templates a :class:`ServerError` keeps in ``served``."""


class ServerError(WatchError):
    """The server answered a request with an error. Its parts, for a program (never parse the
    message): ``server`` (its name), ``what`` (the request as the message names it, e.g.
    ``subscriptions/listen 'memo://x'``), ``method`` (``subscriptions/listen``), ``uris`` (the
    URIs the request named, in order; :attr:`uri` when it named one), ``code`` (the JSON-RPC
    error code, None when the error is not a JSON-RPC answer), ``server_message`` (its own
    text, whole) and, when it refused a subscription, ``served``: the URIs and URI templates the
    server lists (at most :data:`MAX_SERVED`; empty when it lists none or the listing failed)."""

    def __init__(
        self,
        server: str,
        what: str,
        code: int | None,
        server_message: str,
        *,
        uris: Sequence[str] = (),
        served: Sequence[str] = (),
    ) -> None:
        self.server = server
        self.served = tuple(served[:MAX_SERVED])
        self.what = what
        self.method = what.split(" ", 1)[0]  # ``what`` is always "METHOD[ TARGET]", made here
        self.uris = tuple(uris)
        self.code = code
        self.server_message = server_message
        shown_code = f" ({code})" if code is not None else ""
        # The server's text may quote what it was sent (a 4 MB URI): shown capped, kept whole above.
        super().__init__(f"server {server!r}: {what} failed{shown_code}: {clip(server_message, 1000)}")

    @property
    def uri(self) -> str | None:
        """The one URI the request named, if it named exactly one."""
        return self.uris[0] if len(self.uris) == 1 else None


ConnectionKind = Literal["command", "url", "in-memory"]
"""How a server is reached: a command started as a stdio server, a Streamable HTTP URL, or a
server object in this process."""


class ServerConnectionError(WatchError):
    """The connection to a server could not be made, or was lost.

    Its parts, for a program (each None where unknown): ``server`` (its name), ``target`` (the
    URL, or the command as a shell would read it), ``kind`` (:data:`ConnectionKind`),
    ``http_status`` (the last HTTP error status the server answered with) and ``method`` (the
    request that failed; None when the connection itself could not be made)."""

    def __init__(
        self,
        message: str,
        *,
        server: str | None = None,
        target: str | None = None,
        kind: ConnectionKind | None = None,
        http_status: int | None = None,
        method: str | None = None,
    ) -> None:
        super().__init__(message)
        self.server = server
        self.target = target
        self.kind: ConnectionKind | None = kind
        self.http_status = http_status
        self.method = method


class ServerTimeoutError(ServerConnectionError):
    """A request got no answer within ``request_timeout``; the connection was dropped and is remade."""


# -- error factories: each failure worded once, wherever it is raised ------------------------------

WATCHABLE_DOC: Final = "docs/server-contract.md says what makes a server watchable"


def not_watchable(server: str, why: str, *, prefix: str = "") -> NotWatchableError:
    """``server 'S' is not watchable: WHY``: every "not watchable" message starts so."""
    return NotWatchableError(f"{prefix}server {server!r} is not watchable: {why}")


def not_advertised(server: str, capability: str) -> NotWatchableError:
    """The server does not advertise ``capability`` (``resources.subscribe``, ``resources.listChanged``)."""
    return not_watchable(server, f"it does not advertise {capability} ({WATCHABLE_DOC})")


def refused_when_tried(server: str, protocol_version: str, method: str, reason: str) -> NotWatchableError:
    """A server that does not advertise ``resources.subscribe`` refused the ``method`` it was tried with."""
    return not_watchable(
        server,
        f"it speaks MCP {protocol_version} and does not advertise resources.subscribe, and refused the "
        f"{method} it was tried with ({reason}); its tools and reads still work "
        "(docs/existing-servers.md says what makes a server watchable)",
    )


def advertised_but_missing(server: str, method: str, detail: str = "") -> NotWatchableError:
    """A server advertises ``resources.subscribe`` but answers ``method`` with 'Method not found'."""
    shown = f" ({detail})" if detail else ""
    return not_watchable(
        server,
        f"it advertises resources.subscribe but answers {method} with 'Method not found'{shown}; "
        + WATCHABLE_DOC,
    )


def protocol_too_old(server: str, protocol_version: str, needed: str) -> ProtocolVersionError:
    """A server speaking ``protocol_version`` cannot serve ``subscriptions/listen`` (MCP ``needed``)."""
    return ProtocolVersionError(
        f"server {server!r} speaks {protocol_version}; watches need MCP {needed} (subscriptions/listen)"
    )


# -- errors a watch's start tells apart by type (never by message text) ----------------------------


class BaselineError(WatchError):
    """A URI's first read cannot be a watch's baseline (an event log whose body is not one, a
    state served as JSON that does not parse). ``reason`` says why, without the ``watch_start: ``
    that the message leads with: it is also the start failure the watch's connection reports."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"watch_start: {reason}")

    def __reduce__(self) -> tuple[type[BaselineError], tuple[str]]:
        # Made from its reason, not its message: it comes back whole from the large-body worker.
        return type(self), (self.reason,)


_DESCRIBE_CAP: Final = 2000  # an error's text in a notice or log: several quotes of input, capped


def describe(exc: BaseException) -> str:
    """``Type: message`` (or just the type): how errors are named in notices, logs and tool
    results; URLs in the message lose their secrets (:func:`~asyncai_watch.echo.redact`)."""
    text = clip(redact(str(exc)), _DESCRIBE_CAP)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
