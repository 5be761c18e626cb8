"""An in-memory ResourceSource that behaves like an MCP server seen through the SDK.

Faithful to what the manager relies on (see the mcp-sdk crib and source.py):

- ``listen(uri)`` is an async context manager; entering it is the server's ack.
  Its iterator yields once per *pending* update: signals that arrive before the
  consumer asks again coalesce into one (the SDK keeps pending events as a set).
- A listen ends gracefully (:meth:`FakeResourceSource.end`: the iterator stops)
  or is lost (:meth:`FakeResourceSource.lose`: the iterator raises
  :class:`SubscriptionLostError`).
- ``read`` returns the current text (never cached); it can be made to fail or
  be held behind a gate.
- A non-2026-07-28 protocol version makes ``listen`` raise
  :class:`ProtocolVersionError`, as McpResourceSource does.

Every request is counted in :attr:`FakeResourceSource.requests` and appended
to :attr:`FakeResourceSource.calls`, so tests can check ordering and idleness.
Waiting helpers (``wait_listeners``) use events, never polling.
"""

from __future__ import annotations

import collections
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio

from asyncai_watch.errors import ProtocolVersionError, SubscriptionLostError
from asyncai_watch.events import EVENTS_MIME_TYPE
from asyncai_watch.source import (
    MODERN_PROTOCOL_VERSION,
    ReadResult,
    ResourceInfo,
    TemplateInfo,
    ToolInfo,
    ToolResult,
)

__all__ = ["FakeResourceSource", "ReadGate", "ToolHandler"]

if TYPE_CHECKING:
    from asyncai_watch.source import ResourceSource

ToolHandler = Callable[[Mapping[str, Any]], Awaitable[Any] | Any]


class _Listener:
    """One open listen: a level-triggered pending flag plus an end/lost state."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.pending = False
        self.ended = False
        self.lost: BaseException | None = None
        self._wake = anyio.Event()

    def signal(self) -> None:
        self.pending = True
        self._wake.set()

    def end(self) -> None:
        self.ended = True
        self._wake.set()

    def lose(self, exc: BaseException) -> None:
        self.lost = exc
        self._wake.set()

    def __aiter__(self) -> _Listener:
        return self

    async def __anext__(self) -> None:
        while True:
            if self.lost is not None:
                raise self.lost
            if self.pending:
                self.pending = False
                return None
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
        self._open.set()

    async def pass_through(self) -> None:
        self._waiting.set()
        await self._open.wait()


class FakeResourceSource:
    """An in-memory server: resources, templates, tools, and listeners."""

    def __init__(
        self,
        name: str = "fake",
        *,
        protocol_version: str = MODERN_PROTOCOL_VERSION,
        subscribable: bool = True,
        resources: Sequence[ResourceInfo] = (),
        templates: Sequence[TemplateInfo] = (),
        tools: Sequence[tuple[ToolInfo, ToolHandler]] = (),
    ) -> None:
        self._name = name
        self._protocol_version = protocol_version
        self._subscribable = subscribable
        self.resources: list[ResourceInfo] = list(resources)
        self.templates: list[TemplateInfo] = list(templates)
        self.tools: dict[str, tuple[ToolInfo, ToolHandler]] = {t.name: (t, h) for t, h in tools}
        self.contents: dict[str, tuple[str, str | None]] = {}
        self.requests: collections.Counter[str] = collections.Counter()
        self.calls: list[tuple[str, str]] = []
        self.tool_calls: list[tuple[str, dict[str, Any]]] = []
        self.read_errors: dict[str, BaseException] = {}
        self.read_gates: dict[str, ReadGate] = {}
        self.listen_failures: list[BaseException] = []
        """Exceptions the next listen attempts raise, one per attempt, in order."""
        self.connected = True
        self._listeners: list[_Listener] = []
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
    def subscribable(self) -> bool:
        return self._subscribable

    async def list_resources(self) -> list[ResourceInfo]:
        self._count("resources/list", "")
        self._check_connected()
        return list(self.resources)

    async def list_templates(self) -> list[TemplateInfo]:
        self._count("resources/templates/list", "")
        self._check_connected()
        return list(self.templates)

    async def read(self, uri: str) -> ReadResult:
        self._count("resources/read", uri)
        gate = self.read_gates.get(uri)
        if gate is not None and not gate.is_open:
            await gate.pass_through()
        self._check_connected()
        if uri in self.read_errors:
            raise self.read_errors[uri]
        if uri not in self.contents:
            raise LookupError(f"fake server {self._name!r}: unknown resource {uri!r}")
        text, mime = self.contents[uri]
        return ReadResult(uri=uri, text=text, mime_type=mime)

    @asynccontextmanager
    async def _listen(self, uri: str) -> AsyncIterator[AsyncIterator[None]]:
        self._count("subscriptions/listen", uri)
        if self._protocol_version != MODERN_PROTOCOL_VERSION:
            raise ProtocolVersionError(
                f"server {self._name!r} speaks {self._protocol_version}; "
                f"watches need MCP {MODERN_PROTOCOL_VERSION} (subscriptions/listen)"
            )
        self._check_connected()
        if self.listen_failures:
            raise self.listen_failures.pop(0)
        listener = _Listener(uri)
        self._listeners.append(listener)
        self._notify_listeners()
        try:
            yield listener
        finally:
            self._listeners.remove(listener)
            self._notify_listeners()

    def listen(self, uri: str) -> AbstractAsyncContextManager[AsyncIterator[None]]:
        return self._listen(uri)

    async def list_tools(self) -> list[ToolInfo]:
        self._count("tools/list", "")
        self._check_connected()
        return [info for info, _ in self.tools.values()]

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> ToolResult:
        self._count("tools/call", name)
        self._check_connected()
        if name not in self.tools:
            return ToolResult(text=f"unknown tool {name!r}", is_error=True)
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

    def push(self, uri: str) -> int:
        """Send ``notifications/resources/updated`` to every listener of ``uri``; returns how many."""
        targets = [lst for lst in self._listeners if lst.uri == uri]
        for lst in targets:
            lst.signal()
        return len(targets)

    def update(self, uri: str, content: Any, *, mime_type: str | None = "application/json") -> int:
        """``set`` then ``push``: a change on the server's write path."""
        self.set(uri, content, mime_type=mime_type)
        return self.push(uri)

    def end(self, uri: str) -> int:
        """End every listen of ``uri`` gracefully (the server closed the subscription)."""
        targets = [lst for lst in self._listeners if lst.uri == uri]
        for lst in targets:
            lst.end()
        return len(targets)

    def lose(self, uri: str, message: str = "Connection closed") -> int:
        """Drop every listen of ``uri`` abruptly (the iterator raises SubscriptionLostError)."""
        targets = [lst for lst in self._listeners if lst.uri == uri]
        for lst in targets:
            lst.lose(SubscriptionLostError(f"subscription to {uri} lost: {message}"))
        return len(targets)

    def disconnect(self) -> None:
        """The server goes away: listens are lost and every request fails until reconnect()."""
        self.connected = False
        for lst in list(self._listeners):
            lst.lose(SubscriptionLostError(f"subscription to {lst.uri} lost: server {self._name} went away"))

    def reconnect(self) -> None:
        self.connected = True

    def gate_reads(self, uri: str) -> ReadGate:
        """Hold the next reads of ``uri`` until the returned gate is opened."""
        gate = ReadGate()
        self.read_gates[uri] = gate
        return gate

    def listeners(self, uri: str | None = None) -> int:
        """How many listens are open (for ``uri``, or in total)."""
        return sum(1 for lst in self._listeners if uri is None or lst.uri == uri)

    async def wait_listeners(self, uri: str, n: int) -> None:
        """Return once exactly ``n`` listens of ``uri`` are open."""
        while self.listeners(uri) != n:
            await self._listeners_changed.wait()

    async def wait_requests(self, method: str, n: int) -> None:
        """Return once ``method`` has been requested at least ``n`` times."""
        while self.requests[method] < n:
            await self._reads_changed.wait()

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


if TYPE_CHECKING:
    _check: ResourceSource = FakeResourceSource()  # the fake implements the protocol (checked by mypy)
