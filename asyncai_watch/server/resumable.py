"""A Streamable HTTP app for an MCP server, with resumable SSE streams for 2025-era clients.

On the 2025-11-25 wire a server SHOULD open each SSE stream with a *priming
event* (an event id and empty data) and a ``retry:`` field, so a client whose
stream drops can reconnect with ``Last-Event-ID`` and get what it missed. The
SDK does all of that once it has an :class:`~mcp.server.streamable_http.EventStore`
(it ships only the interface); :class:`EventBuffer` is ours. The 2026-07-28
wire has no resumption; it never touches the store.

The SDK hands one store to every session, but a stream id is only a request id
(``"1"``, or ``"_GET_stream"``), the same in every session: a shared store
could replay one session's messages to another. So each session gets its own
partition: :class:`_SessionManager` returns a new :class:`SessionEvents` view
each time the SDK reads ``event_store``, which it does once per new session.
All partitions share one bound (event count and bytes), oldest first out; a
resume from an evicted event gets nothing replayed.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import Any, Final

import attrs
from mcp.server import Server
from mcp.server.streamable_http import (
    EventCallback,
    EventId,
    EventMessage,
    EventStore,
    StreamId,
)
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import JSONRPCError, JSONRPCMessage, JSONRPCResponse
from starlette.applications import Starlette
from starlette.routing import Route

__all__ = ["MAX_BYTES", "MAX_EVENTS", "RETRY_MS", "EventBuffer", "SessionEvents", "streamable_http_app"]

RETRY_MS: Final = 1000
"""The ``retry:`` a priming event carries: how long a client waits before reconnecting a dropped stream."""

MAX_EVENTS: Final = 4096
"""Events kept for replay, over all sessions."""

MAX_BYTES: Final = 16 * 1024 * 1024
"""Serialized bytes kept for replay, over all sessions (a files server read can be 4 MiB)."""


@attrs.frozen
class _Stored:
    partition: int
    stream_id: StreamId
    message: JSONRPCMessage | None  # None: a priming event
    size: int


class EventBuffer:
    """Recent SSE events of every session, bounded by count and bytes; the oldest go first."""

    def __init__(self, *, max_events: int = MAX_EVENTS, max_bytes: int = MAX_BYTES) -> None:
        if max_events < 1 or max_bytes < 1:
            raise ValueError(f"max_events and max_bytes must be >= 1, got {max_events}, {max_bytes}")
        self.max_events = max_events
        self.max_bytes = max_bytes
        self._events: OrderedDict[int, _Stored] = OrderedDict()
        self._bytes = 0
        self._seq = itertools.count(1)
        self._partitions = itertools.count(1)

    def __len__(self) -> int:
        return len(self._events)

    @property
    def bytes(self) -> int:
        return self._bytes

    def session(self) -> SessionEvents:
        """A new partition, for one session."""
        return SessionEvents(self, next(self._partitions))

    def store(self, partition: int, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        seq = next(self._seq)
        size = 0 if message is None else len(message.model_dump_json(by_alias=True, exclude_unset=True))
        self._events[seq] = _Stored(partition, stream_id, message, size)
        self._bytes += size
        while len(self._events) > self.max_events or (self._bytes > self.max_bytes and len(self._events) > 1):
            _seq, dropped = self._events.popitem(last=False)
            self._bytes -= dropped.size
        return f"{partition}.{seq}"

    async def replay(self, partition: int, last_event_id: EventId, send: EventCallback) -> StreamId | None:
        """Send the events of ``last_event_id``'s stream that came after it.

        Returns the stream id when the stream may still get more events (the SDK then keeps the
        reconnected stream open for them), ``None`` when nothing is known about that id (another
        session's, malformed, or evicted) or the stream already ended with its response.
        """
        part, _, seq_text = last_event_id.partition(".")
        if not seq_text.isdigit() or part != str(partition):
            return None
        last = self._events.get(int(seq_text))
        if last is None or last.partition != partition:
            return None
        later = [
            (seq, event)
            for seq, event in self._events.items()
            if seq > int(seq_text) and event.partition == partition and event.stream_id == last.stream_id
        ]  # a snapshot: storing goes on while we await the sends
        ended = isinstance(last.message, JSONRPCResponse | JSONRPCError)
        for seq, event in later:
            if event.message is None:
                continue
            await send(EventMessage(event.message, f"{partition}.{seq}"))
            ended = isinstance(event.message, JSONRPCResponse | JSONRPCError)
        return None if ended else last.stream_id


class SessionEvents(EventStore):
    """One session's view of an :class:`EventBuffer`: it replays only that session's events."""

    def __init__(self, buffer: EventBuffer, partition: int) -> None:
        self._buffer = buffer
        self._partition = partition

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        return self._buffer.store(self._partition, stream_id, message)

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        return await self._buffer.replay(self._partition, last_event_id, send_callback)


class _SessionManager(StreamableHTTPSessionManager):
    """The SDK's session manager, handing each new session its own partition of one buffer."""

    def __init__(self, app: Server[Any], buffer: EventBuffer, **kwargs: Any) -> None:
        self._buffer = buffer
        super().__init__(app, **kwargs)

    @property  # the SDK reads it once per admitted session
    def event_store(self) -> EventStore | None:
        return self._buffer.session()

    @event_store.setter
    def event_store(self, _value: EventStore | None) -> None:
        pass  # the constructor's assignment; the partitions come from the buffer


def _security(host: str) -> TransportSecuritySettings | None:
    # The SDK's default for a loopback bind: DNS-rebinding protection (Host/Origin allowlist).
    if host not in ("127.0.0.1", "localhost", "::1"):
        return None
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
    )


def streamable_http_app(
    server: Server[Any], *, host: str, path: str = "/mcp", buffer: EventBuffer | None = None
) -> Starlette:
    """``server``'s Streamable HTTP endpoint at ``path``, as ``Server.streamable_http_app`` builds it,
    plus priming events, ``retry:`` and replay for 2025-era clients."""
    manager = _SessionManager(
        server,
        buffer if buffer is not None else EventBuffer(),
        retry_interval=RETRY_MS,
        security_settings=_security(host),
    )
    return Starlette(
        routes=[Route(path, endpoint=StreamableHTTPASGIApp(manager))],
        lifespan=lambda _app: manager.run(),
    )
