"""Test helpers for code that uses asyncai-watch: a clock that moves on command, and an
in-memory ResourceSource that behaves like an MCP server seen through the SDK.

:class:`FakeClock` only moves when a test calls :meth:`FakeClock.advance`, and lets the test
wait until a task is parked on it, so debounce and backoff are tested without real waits and
without polling.

:class:`FakeSource` is faithful to what the manager relies on (see source.py):

- ``subscribe(uris)`` is an async context manager; entering it is the server's ack
  (in ``subscription_mode="subscribe"``, the legacy era, one URI per subscription).
  Its iterator yields the URI of each *pending* update: signals of one URI that arrive
  before the consumer asks again coalesce into one (the SDK keeps pending events as a set).
- A subscription ends gracefully (:meth:`FakeSource.end`: the iterator stops)
  or is lost (:meth:`FakeSource.lose`: the iterator raises
  :class:`SubscriptionLostError`).
- ``read`` returns the current text (never cached); it can be made to fail or
  be held behind a gate.
- A protocol version that cannot carry watches makes ``subscribe`` raise
  :class:`ProtocolVersionError`, and ``subscribable=False`` :class:`NotWatchableError`, as
  McpResourceSource does. :meth:`FakeSource.list_changed` rings every
  ``listen_list_changed`` listener.

Every request is counted in :attr:`FakeSource.requests` and appended
to :attr:`FakeSource.calls`, so tests can check ordering and idleness.
Waiting helpers (``wait_listeners``) use events, never polling.
"""

from __future__ import annotations

import builtins
import collections
import heapq
import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel

from asyncai_watch.core.echo import quoted
from asyncai_watch.core.events import EVENTS_MIME_TYPE
from asyncai_watch.core.resources import ListedResource, ListedTemplate
from asyncai_watch.errors import SubscriptionLostError, not_advertised, protocol_too_old
from asyncai_watch.mcp.source import (
    MODERN_PROTOCOL_VERSION,
    SUBSCRIPTION_METHODS,
    ReadResult,
    SubscriptionMode,
    ToolInfo,
    ToolResult,
    Updates,
    subscription_mode_for,
)

__all__ = ["FakeClock", "FakeSource", "ReadGate", "ToolHandler"]

if TYPE_CHECKING:
    from asyncai_watch.clock import Clock
    from asyncai_watch.mcp.source import ResourceSource

ToolHandler = Callable[[Mapping[str, Any]], Awaitable[Any] | Any]


class _Listener:
    """One open subscription: its URIs, the updated URIs pending (a set: level-triggered, as
    the SDK's), and an end/lost state."""

    def __init__(self, uris: frozenset[str]) -> None:
        self.uris = uris
        self.honored: frozenset[str] | None = None
        self.pending: dict[str, None] = {}  # insertion-ordered set
        self.ended = False
        self.lost: BaseException | None = None
        self._wake = anyio.Event()

    def signal(self, uri: str) -> None:
        self.pending[uri] = None
        self._wake.set()

    def end(self) -> None:
        self.ended = True
        self._wake.set()

    def lose(self, exc: BaseException) -> None:
        self.lost = exc
        self._wake.set()

    def __aiter__(self) -> _Listener:
        return self

    async def __anext__(self) -> Any:
        while True:
            if self.lost is not None:
                raise self.lost
            if self.pending:
                uri = next(iter(self.pending))
                del self.pending[uri]
                return uri if self.uris else None
            if self.ended:
                raise StopAsyncIteration
            await self._wake.wait()
            self._wake = anyio.Event()


class ReadGate:
    """Holds reads of one URI until :meth:`open`; tells the test when a read is waiting."""

    def __init__(self) -> None:
        self._open = anyio.Event()
        self._waiting = anyio.Event()

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    async def wait_blocked(self) -> None:
        """Return once a read is parked at the gate."""
        await self._waiting.wait()

    def open(self) -> None:
        """Let every held and later read through."""
        self._open.set()

    async def pass_through(self) -> None:
        """Called by a read: wait here until the gate is open."""
        self._waiting.set()
        await self._open.wait()


class FakeSource:
    """An in-memory server: resources, templates, tools, and listeners."""

    def __init__(
        self,
        name: str = "fake",
        *,
        protocol_version: str = MODERN_PROTOCOL_VERSION,
        subscribable: bool = True,
        subscription_mode: SubscriptionMode | None = None,
        resources: Sequence[ListedResource] = (),
        templates: Sequence[ListedTemplate] = (),
        tools: Sequence[tuple[ToolInfo, ToolHandler]] = (),
    ) -> None:
        self._name = name
        self._protocol_version = protocol_version
        self._subscribable = subscribable
        self._mode: SubscriptionMode = (
            subscription_mode if subscription_mode is not None else subscription_mode_for(protocol_version)
        )
        self.resources: list[ListedResource] = list(resources)
        self.templates: list[ListedTemplate] = list(templates)
        self.tools: dict[str, tuple[ToolInfo, ToolHandler]] = {t.name: (t, h) for t, h in tools}
        self.contents: dict[str, tuple[str, str | None]] = {}
        self.requests: collections.Counter[str] = collections.Counter()
        self.calls: list[tuple[str, str]] = []
        self.tool_calls: list[tuple[str, dict[str, Any]]] = []
        self.positions: list[tuple[str, int] | None] = []
        """The ``after`` of every read, in order."""
        self.read_errors: dict[str, BaseException] = {}
        self.read_gates: dict[str, ReadGate] = {}
        self.listen_failures: list[BaseException] = []
        """Exceptions the next subscribe attempts raise, one per attempt, in order."""
        self.refused: builtins.set[str] = set()
        """URIs the server does not honor (left out of a subscription's ack)."""
        self.connected = True
        self.list_changed_supported = True
        """Whether ``listen_list_changed`` works (a server advertising ``resources.listChanged``)."""
        self._listeners: list[_Listener] = []
        self._catalog_listeners: list[_Listener] = []
        self._listeners_changed = anyio.Event()
        self._reads_changed = anyio.Event()

    # -- ResourceSource ------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @property
    def protocol_version(self) -> str:
        return self._protocol_version

    @property
    def watchable(self) -> bool:
        return self._subscribable and (
            subscription_mode_for(self._protocol_version) == "listen" or self._mode == "subscribe"
        )

    @property
    def subscription_mode(self) -> SubscriptionMode:
        return self._mode

    async def list_resources(self) -> list[ListedResource]:
        """The fake's fixed resources."""
        self._count("resources/list", "")
        self._check_connected()
        return list(self.resources)

    async def list_templates(self) -> list[ListedTemplate]:
        """The fake's resource templates."""
        self._count("resources/templates/list", "")
        self._check_connected()
        return list(self.templates)

    async def read(self, uri: str, *, after: tuple[str, int] | None = None) -> ReadResult:
        """The current content (a position ``after`` is recorded in :attr:`positions`, not used)."""
        self._count("resources/read", uri)
        self.positions.append(after)
        gate = self.read_gates.get(uri)
        if gate is not None and not gate.is_open:
            await gate.pass_through()
        self._check_connected()
        if uri in self.read_errors:
            raise self.read_errors[uri]
        if uri not in self.contents:
            raise LookupError(f"fake server {self._name!r}: unknown resource {quoted(uri)}")
        text, mime = self.contents[uri]
        return ReadResult(uri=uri, text=text, mime_type=mime)

    @asynccontextmanager
    async def _subscribe(self, uris: frozenset[str]) -> AsyncIterator[_Listener]:
        method = SUBSCRIPTION_METHODS[self._mode]
        self._count(method, " ".join(sorted(uris)))
        if not self.watchable:
            if self._mode == "listen" and subscription_mode_for(self._protocol_version) != "listen":
                raise protocol_too_old(self._name, self._protocol_version, MODERN_PROTOCOL_VERSION)
            raise not_advertised(self._name, "resources.subscribe")
        if self._mode == "subscribe" and len(uris) != 1:
            raise ValueError(f"a legacy subscription holds one URI, got {sorted(uris)}")
        self._check_connected()
        if self.listen_failures:
            raise self.listen_failures.pop(0)
        listener = _Listener(uris)
        listener.honored = uris - self.refused
        self._listeners.append(listener)
        self._notify_listeners()
        try:
            yield listener
        finally:
            self._listeners.remove(listener)
            self._notify_listeners()

    def subscribe(self, uris: Collection[str]) -> AbstractAsyncContextManager[Updates]:
        """A listen on ``uris``: its updates arrive on each :meth:`set` of one of them."""
        return self._subscribe(frozenset(uris))

    @asynccontextmanager
    async def _listen_list_changed(self) -> AsyncIterator[AsyncIterator[None]]:
        if subscription_mode_for(self._protocol_version) != "listen" or not self.list_changed_supported:
            raise not_advertised(self._name, "resources.listChanged")
        self._check_connected()
        listener = _Listener(frozenset())
        self._catalog_listeners.append(listener)
        try:
            yield listener
        finally:
            self._catalog_listeners.remove(listener)

    def listen_list_changed(self) -> AbstractAsyncContextManager[AsyncIterator[None]]:
        """A listen for ``resources/list_changed``."""
        return self._listen_list_changed()

    async def list_tools(self) -> list[ToolInfo]:
        """The fake's tools."""
        self._count("tools/list", "")
        self._check_connected()
        return [info for info, _ in self.tools.values()]

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> ToolResult:
        """Call one of the fake's tools; an unknown name is an error result."""
        self._count("tools/call", name)
        self._check_connected()
        if name not in self.tools:
            return ToolResult(text=f"unknown tool {quoted(name)}", is_error=True)
        self.tool_calls.append((name, dict(arguments)))
        _, handler = self.tools[name]
        try:
            value = handler(arguments)
            if isinstance(value, Awaitable):
                value = await value
        except Exception as exc:
            return ToolResult(text=f"{type(exc).__name__}: {exc}", is_error=True)
        if isinstance(value, str):
            return ToolResult(text=value)
        return ToolResult(text=json.dumps(value), structured=value)

    # -- test controls -------------------------------------------------------------
    def set(self, uri: str, content: Any, *, mime_type: str | None = "application/json") -> None:
        """Set what ``read(uri)`` returns (non-str content is JSON-encoded); does not notify."""
        text = content if isinstance(content, str) else json.dumps(content)
        self.contents[uri] = (text, mime_type)

    def set_events(self, uri: str, events: Sequence[Mapping[str, Any]]) -> None:
        """Set an event-log body ``{"events": [...]}`` with the event-log mimeType."""
        self.set(uri, {"events": list(events)}, mime_type=EVENTS_MIME_TYPE)

    def push(self, uri: str, *, stamped: str | None = None) -> int:
        """Send ``notifications/resources/updated`` to every subscription holding ``uri`` (stamped
        with ``stamped``, e.g. a sub-resource's URI, when given); returns how many got it."""
        targets = self._holding(uri)
        for lst in targets:
            lst.signal(stamped if stamped is not None else uri)
        return len(targets)

    def update(self, uri: str, content: Any, *, mime_type: str | None = "application/json") -> int:
        """``set`` then ``push``: a change on the server's write path."""
        self.set(uri, content, mime_type=mime_type)
        return self.push(uri)

    def list_changed(self) -> int:
        """Send ``notifications/resources/list_changed``; returns how many listeners got it."""
        for lst in self._catalog_listeners:
            lst.signal("")
        return len(self._catalog_listeners)

    def end(self, uri: str) -> int:
        """End every subscription holding ``uri`` gracefully (the server closed it)."""
        targets = self._holding(uri)
        for lst in targets:
            lst.end()
        return len(targets)

    def lose(self, uri: str, message: str = "Connection closed") -> int:
        """Drop every subscription holding ``uri`` abruptly (the iterator raises SubscriptionLostError)."""
        targets = self._holding(uri)
        for lst in targets:
            lst.lose(SubscriptionLostError(f"subscription to {uri} lost: {message}"))
        return len(targets)

    def disconnect(self) -> None:
        """The server goes away: listens are lost and every request fails until reconnect()."""
        self.connected = False
        for lst in list(self._listeners):
            lst.lose(
                SubscriptionLostError(
                    f"subscription to {sorted(lst.uris)} lost: server {self._name} went away"
                )
            )

    def reconnect(self) -> None:
        """Mark the fake connected again."""
        self.connected = True

    def gate_reads(self, uri: str) -> ReadGate:
        """Hold the next reads of ``uri`` until the returned gate is opened."""
        gate = ReadGate()
        self.read_gates[uri] = gate
        return gate

    def listeners(self, uri: str | None = None) -> int:
        """How many subscriptions are open (holding ``uri``, or in total)."""
        return sum(1 for lst in self._listeners if uri is None or uri in lst.uris)

    def subscribed(self) -> builtins.set[str]:
        """Every URI some open subscription holds."""
        return {uri for lst in self._listeners for uri in lst.uris}

    async def wait_listeners(self, uri: str, n: int) -> None:
        """Return once exactly ``n`` open subscriptions hold ``uri``."""
        while self.listeners(uri) != n:
            await self._listeners_changed.wait()

    async def wait_requests(self, method: str, n: int) -> None:
        """Return once ``method`` has been requested at least ``n`` times."""
        while self.requests[method] < n:
            await self._reads_changed.wait()

    def _holding(self, uri: str) -> list[_Listener]:
        return [lst for lst in self._listeners if uri in lst.uris]

    def _count(self, method: str, target: str) -> None:
        self.requests[method] += 1
        self.calls.append((method, target))
        self._reads_changed.set()
        self._reads_changed = anyio.Event()

    def _notify_listeners(self) -> None:
        self._listeners_changed.set()
        self._listeners_changed = anyio.Event()

    def _check_connected(self) -> None:
        if not self.connected:
            raise ConnectionError(f"fake server {self._name!r} is not reachable")


class FakeClock:
    """A clock that moves only on :meth:`advance`.

    Sleepers park on an :class:`anyio.Event`; ``advance`` sets the events of
    every sleeper whose deadline has been reached. A cancelled sleeper removes
    itself. Tests call ``await clock.wait_for_sleepers(n)`` to know that ``n``
    tasks are parked before advancing.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        # heap of (deadline, tiebreak, event); cancelled entries are removed lazily by identity.
        self._sleepers: list[tuple[float, int, anyio.Event]] = []
        self._counter = itertools.count()
        self._changed: anyio.Event | None = None

    def now(self) -> float:
        """The fake time: moves only on :meth:`advance`."""
        return self._now

    @property
    def sleepers(self) -> int:
        """How many tasks are parked in :meth:`sleep_until` right now."""
        return len(self._sleepers)

    @property
    def next_deadline(self) -> float | None:
        """The earliest deadline a parked task waits for, or None."""
        return self._sleepers[0][0] if self._sleepers else None

    def deadlines(self) -> list[float]:
        """Every parked task's deadline, earliest first."""
        return sorted(d for d, _, _ in self._sleepers)

    async def sleep_until(self, deadline: float) -> None:
        """Park until :meth:`advance` reaches ``deadline``."""
        if deadline <= self._now:
            await anyio.lowlevel.checkpoint()
            return
        event = anyio.Event()
        entry = (float(deadline), next(self._counter), event)
        heapq.heappush(self._sleepers, entry)
        self._notify()
        try:
            await event.wait()
        finally:
            if not event.is_set():
                # Cancelled while parked: drop our entry so the count stays true.
                self._sleepers.remove(entry)
                heapq.heapify(self._sleepers)
                self._notify()

    def advance(self, seconds: float) -> None:
        """Move time forward and wake every sleeper whose deadline has passed."""
        if seconds < 0:
            raise ValueError(f"FakeClock.advance expects seconds >= 0, got {seconds!r}")
        self.set_time(self._now + seconds)

    def set_time(self, now: float) -> None:
        """Jump to ``now`` (not backwards) and wake the sleepers that are due."""
        if now < self._now:
            raise ValueError(f"FakeClock cannot go backwards: {now!r} < {self._now!r}")
        self._now = float(now)
        woke = False
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, event = heapq.heappop(self._sleepers)
            event.set()
            woke = True
        if woke:
            self._notify()

    async def wait_for_sleepers(self, n: int = 1) -> None:
        """Return once at least ``n`` tasks are parked in :meth:`sleep_until`."""
        while len(self._sleepers) < n:
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()

    async def wait_for_deadline(self, deadline: float) -> None:
        """Return once some task is parked until exactly ``deadline``."""
        while not any(d == deadline for d, _, _ in self._sleepers):
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def __repr__(self) -> str:
        return f"FakeClock(now={self._now!r}, sleepers={len(self._sleepers)})"


if TYPE_CHECKING:
    _check: ResourceSource = FakeSource()  # the fake implements the protocol (checked by mypy)
    _clock: Clock = FakeClock()
