"""The upstream servers of ``serve``: each connected in the background and retried for good.

A host such as Claude Code gives an MCP server a few seconds to answer ``initialize``, so
``serve`` answers at once and connects its upstreams meanwhile. Each is an
:class:`UpstreamLink`: a :class:`~asyncai_watch.mcp.source.ResourceSource` the watch manager
uses like any other, whose connection a supervisor task makes, and remakes with the usual
backoff (:data:`RETRY`, on the injectable clock) after a failed attempt or a lost connection.
One unreachable or crashing upstream therefore never ends the bridge, and the others keep
working.

A request through a link that is still connecting waits for it, at most ``wait`` seconds from
the start of the attempt (so a burst of calls, or a restore of many watches, waits once, not
once each); a link that failed, or is still connecting after that, raises
:class:`UpstreamUnavailableError` at once, naming the reason and the next attempt.
:class:`UpstreamStatus` (pure) is what ``watch_list`` shows of each.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime, timedelta
from typing import Any, Final, Literal, TypeVar

import anyio
import attrs

from asyncai_watch import log
from asyncai_watch.clock import Clock, SystemClock, fail_after
from asyncai_watch.core.backoff import Backoff
from asyncai_watch.errors import NotWatchableError, ServerConnectionError
from asyncai_watch.exception_groups import leaves
from asyncai_watch.mcp.source import (
    MODERN_PROTOCOL_VERSION,
    ListedResource,
    ListedTemplate,
    ReadResult,
    ResourceSource,
    SubscriptionMode,
    ToolInfo,
    ToolResult,
    TriableSource,
    Updates,
    Watchability,
)

__all__ = ["DEFAULT_WAIT", "RETRY", "UpstreamLink", "UpstreamStatus", "UpstreamUnavailableError"]

RETRY: Final = Backoff(initial=1.0, cap=30.0, attempts=None)
"""Between connect attempts: 1, 2, 4, 8, 16, then every 30 s, for as long as serve runs."""

DEFAULT_WAIT: Final = 10.0
"""Seconds a request waits for an upstream that is still connecting (from the attempt's start)."""

Status = Literal["connecting", "connected", "failed"]
_T = TypeVar("_T")
_U = TypeVar("_U")


class UpstreamUnavailableError(ServerConnectionError):
    """The upstream is not connected now: still connecting, or failed and waiting to retry."""


@attrs.frozen(kw_only=True)
class UpstreamStatus:
    """Where one upstream's connection stands; times are on the link's (monotonic) clock."""

    name: str
    target: str
    """What it connects to, e.g. ``command 'asyncai-mcp-files /srv'``."""
    status: Status
    attempt: int
    """The attempt in progress (connecting), that succeeded (connected) or that failed."""
    since: float
    """When this status began."""
    error: str | None = None
    """Why the last attempt failed or the connection was lost (until one succeeds)."""
    retry_at: float | None = None
    """When the next attempt starts (``failed``)."""
    protocol_version: str = ""

    def summary(self, now: float) -> str:
        """One sentence, for errors and the log."""
        if self.status == "connected":
            return f"upstream {self.name!r} is connected ({self.target})"
        if self.status == "connecting":
            last = "" if self.error is None else f"; the last attempt failed: {self.error}"
            return (
                f"upstream {self.name!r} is still connecting ({self.target}; attempt {self.attempt}, "
                f"{max(now - self.since, 0.0):.1f} s so far{last})"
            )
        retry = "" if self.retry_at is None else f"; next attempt in {max(self.retry_at - now, 0.0):.1f} s"
        return f"upstream {self.name!r} is not connected ({self.target}): {self.error}{retry}"

    def as_dict(self, now: float, wall: datetime) -> dict[str, Any]:
        """The ``watch_list`` entry: ``now`` on the clock is the wall-clock time ``wall``."""

        def at(t: float) -> str:
            return (wall + timedelta(seconds=t - now)).isoformat(timespec="milliseconds")

        out: dict[str, Any] = {"name": self.name, "state": self.status, "target": self.target}
        out["attempt"] = self.attempt
        out["since"] = at(self.since)
        if self.status == "connected":
            out["protocol_version"] = self.protocol_version
        if self.error is not None:
            out["error"] = self.error
        if self.retry_at is not None:
            out["retry_at"] = at(self.retry_at)
            out["retry_in_s"] = round(max(self.retry_at - now, 0.0), 1)
        return out


Connect = Callable[[], AbstractAsyncContextManager[ResourceSource]]


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(dict.fromkeys(_describe(e) for e in leaves(exc)))
    text = str(exc)
    if isinstance(exc, ServerConnectionError):
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class UpstreamLink:
    """One upstream: a :class:`ResourceSource` whose connection :meth:`run` makes and remakes.

    ``connect()`` returns a fresh, unentered source per attempt (e.g. an
    :class:`~asyncai_watch.McpResourceSource`); entering it is the attempt. ``name`` is fixed
    up front: catalogs, routing and saved watches key on it while the server is away.
    """

    def __init__(
        self,
        name: str,
        connect: Connect,
        *,
        target: str,
        clock: Clock | None = None,
        backoff: Backoff = RETRY,
        wait: float = DEFAULT_WAIT,
    ) -> None:
        if wait < 0:
            raise ValueError(f"UpstreamLink: wait must be >= 0 seconds, got {wait!r}")
        self._name = name
        self._connect = connect
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._backoff = backoff
        self._wait = wait
        self._source: ResourceSource | None = None
        self._lost: anyio.Event = anyio.Event()
        self._lost_reason = ""
        self._changed = anyio.Event()
        self._protocol_version = ""
        self._watchable = False
        self._watchability: Watchability = "untried"
        self._status = UpstreamStatus(
            name=name, target=target, status="connecting", attempt=1, since=self._clock.now()
        )

    # -- the supervisor ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Connect, and reconnect after a failure or a loss, until cancelled. Never raises."""
        failures = 0  # attempts in a row that failed (or connections lost without a request served)
        attempt = 0
        while True:
            attempt += 1
            self._set(status="connecting", attempt=attempt, retry_at=None)  # the last error stays shown
            try:
                async with self._connect() as source:
                    self._lost = anyio.Event()
                    self._protocol_version = source.protocol_version
                    self._watchable = source.watchable
                    self._watchability = _watchability(source)
                    self._source = source
                    failures = 0
                    self._set(status="connected", error=None, protocol_version=self._protocol_version)
                    try:
                        await self._lost.wait()
                    finally:
                        self._source = None
                    error = f"the connection was lost: {self._lost_reason}"
            except Exception as exc:  # a failed attempt (or a teardown error): retried below
                error = _describe(exc)
            delay = self._backoff.delay(failures)
            failures += 1
            assert delay is not None  # RETRY never gives up
            retry_at = self._clock.now() + delay
            self._set(status="failed", error=error, retry_at=retry_at)
            await self._clock.sleep_until(retry_at)

    def _set(self, **changes: Any) -> None:
        self._status = attrs.evolve(self._status, since=self._clock.now(), **changes)
        self._changed.set()
        self._changed = anyio.Event()
        status = self._status
        log.emit(
            "serve.upstream",
            server=self._name,
            state=status.status,
            attempt=status.attempt,
            error=status.error,
            retry_in=None if status.retry_at is None else round(status.retry_at - self._clock.now(), 3),
        )

    def _lose(self, source: ResourceSource, exc: BaseException) -> None:
        """A request found the connection gone: the supervisor closes it and reconnects."""
        if source is self._source and not self._lost.is_set():
            self._lost_reason = _describe(exc)
            self._lost.set()

    async def _use(self) -> ResourceSource:
        """The connected source; waits (bounded) while an attempt is under way."""
        while True:
            source, status = self._source, self._status
            if source is not None:
                return source
            now = self._clock.now()
            deadline = status.since + self._wait
            if status.status != "connecting" or now >= deadline:
                raise UpstreamUnavailableError(status.summary(now))
            try:
                async with fail_after(self._clock, deadline - now):
                    await self._changed.wait()
            except TimeoutError:
                raise UpstreamUnavailableError(self._status.summary(self._clock.now())) from None

    async def _call(self, call: Callable[[ResourceSource], Awaitable[_T]]) -> _T:
        source = await self._use()
        try:
            return await call(source)
        except ServerConnectionError as exc:
            self._lose(source, exc)
            raise

    # -- what serve shows -------------------------------------------------------------------------

    @property
    def status(self) -> UpstreamStatus:
        return self._status

    async def changed(self) -> UpstreamStatus:
        """Wait for the next status change and return the new status (for tests and the log)."""
        await self._changed.wait()
        return self._status

    # -- ResourceSource ---------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def protocol_version(self) -> str:
        """The version of the current connection, else the last one's, else ``""`` (never connected)."""
        return self._source.protocol_version if self._source is not None else self._protocol_version

    @property
    def watchable(self) -> bool:
        return self._source.watchable if self._source is not None else self._watchable

    @property
    def watchability(self) -> Watchability:
        """The capability fallback's answer on the current connection, else on the last one."""
        if self._source is not None:
            self._watchability = _watchability(self._source)
        return self._watchability

    async def try_subscription(self, uri: str) -> None:
        """The capability fallback (:class:`~asyncai_watch.mcp.source.TriableSource`), tried on
        the connected upstream: a server that subscribes without advertising it is watched
        through the bridge as it is directly."""
        await self._call(lambda s: _try_subscription(s, uri))

    async def list_resources(self) -> list[ListedResource]:
        return await self._call(lambda s: s.list_resources())

    async def list_templates(self) -> list[ListedTemplate]:
        return await self._call(lambda s: s.list_templates())

    async def read(self, uri: str, *, after: tuple[str, int] | None = None) -> ReadResult:
        return await self._call(lambda s: s.read(uri, after=after))

    async def list_tools(self) -> list[ToolInfo]:
        return await self._call(lambda s: s.list_tools())

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> ToolResult:
        return await self._call(lambda s: s.call_tool(name, arguments))

    @property
    def subscription_mode(self) -> SubscriptionMode:
        """The current connection's, else the last one's; ``"listen"`` before the first."""
        if self._source is not None:
            return self._source.subscription_mode
        return "subscribe" if self._protocol_version not in ("", MODERN_PROTOCOL_VERSION) else "listen"

    def subscribe(self, uris: Collection[str]) -> AbstractAsyncContextManager[Updates]:
        return self._listen(lambda s: s.subscribe(uris), wait=True)

    def listen_list_changed(self) -> AbstractAsyncContextManager[AsyncIterator[None]]:
        # The catalog's follower is no request anyone waits on: it waits for the connection as
        # long as it takes, so a long outage does not use up its retries.
        return self._listen(lambda s: s.listen_list_changed(), wait=False)

    @asynccontextmanager
    async def _listen(
        self,
        open_: Callable[[ResourceSource], AbstractAsyncContextManager[_U]],
        *,
        wait: bool,
    ) -> AsyncIterator[_U]:
        if wait:
            source = await self._use()
        else:
            while (source_ := self._source) is None:
                await self._changed.wait()
            source = source_
        try:
            async with open_(source) as updates:
                yield updates
        except ServerConnectionError as exc:
            self._lose(source, exc)
            raise


def _watchability(source: ResourceSource) -> Watchability:
    if isinstance(source, TriableSource):
        return source.watchability
    return "advertised" if source.watchable else "untried"


async def _try_subscription(source: ResourceSource, uri: str) -> None:
    if isinstance(source, TriableSource):
        await source.try_subscription(uri)
    elif not source.watchable:
        raise NotWatchableError.for_server(source.name, source.protocol_version)
