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
Each partition has its own bound (events and bytes, ``--replay-events`` /
``--replay-bytes``), so a busy session evicts only its own events; all of them
share one overall bound too (oldest first out). A resume from an evicted event
gets nothing replayed.

The session manager also holds the session limits of an
:class:`~asyncai_watch.server.policy.HttpLimits`: sessions in total and per client
(the SDK has only a total, which one client could fill), and the idle timeout; a
refusal is a 503 whose JSON-RPC error names the limit and its option.
"""

from __future__ import annotations

import contextvars
import itertools
from collections import Counter, OrderedDict, deque
from typing import Any, Final

import attrs
from mcp.server import Server
from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.streamable_http import (
    MCP_SESSION_ID_HEADER,
    EventCallback,
    EventId,
    EventMessage,
    EventStore,
    StreamableHTTPServerTransport,
    StreamId,
)
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp_types import INTERNAL_ERROR, ErrorData, JSONRPCError, JSONRPCMessage, JSONRPCResponse
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from .policy import HttpLimits, client_key

__all__ = ["MAX_BYTES", "MAX_EVENTS", "RETRY_MS", "EventBuffer", "SessionEvents", "streamable_http_app"]

RETRY_MS: Final = 1000
"""The ``retry:`` a priming event carries: how long a client waits before reconnecting a dropped stream."""

MAX_EVENTS: Final = 16384
"""Events kept for replay, over all sessions."""

MAX_BYTES: Final = 32 * 1024 * 1024
"""Serialized bytes kept for replay, over all sessions (a files server read can be 4 MiB)."""


@attrs.frozen
class _Stored:
    partition: int
    stream_id: StreamId
    message: JSONRPCMessage | None  # None: a priming event
    size: int


class _Partition:
    __slots__ = ("bytes", "seqs")

    def __init__(self) -> None:
        self.seqs: deque[int] = deque()
        self.bytes = 0


class EventBuffer:
    """Recent SSE events of every session, bounded per session and overall; the oldest go first."""

    def __init__(
        self,
        *,
        max_events: int = MAX_EVENTS,
        max_bytes: int = MAX_BYTES,
        session_events: int | None = None,
        session_bytes: int | None = None,
    ) -> None:
        session_events = max_events if session_events is None else session_events
        session_bytes = max_bytes if session_bytes is None else session_bytes
        if min(max_events, max_bytes, session_events, session_bytes) < 1:
            raise ValueError(
                f"EventBuffer bounds must be >= 1, got {max_events}, {max_bytes}, {session_events}, {session_bytes}"
            )
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.session_events = session_events
        self.session_bytes = session_bytes
        self._events: OrderedDict[int, _Stored] = OrderedDict()
        self._parts: dict[int, _Partition] = {}
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
        part = self._parts.setdefault(partition, _Partition())
        part.seqs.append(seq)
        part.bytes += size
        # This session's own bound first: a busy session evicts its own events, not another's.
        while len(part.seqs) > self.session_events or (
            part.bytes > self.session_bytes and len(part.seqs) > 1
        ):
            self._drop(part.seqs[0])
        while len(self._events) > self.max_events or (self._bytes > self.max_bytes and len(self._events) > 1):
            self._drop(next(iter(self._events)))
        return f"{partition}.{seq}"

    def _drop(self, seq: int) -> None:
        """Forget event ``seq``, the oldest of its partition (sequence numbers only grow)."""
        dropped = self._events.pop(seq)
        self._bytes -= dropped.size
        part = self._parts[dropped.partition]
        part.seqs.popleft()
        part.bytes -= dropped.size
        if not part.seqs:
            del self._parts[dropped.partition]

    def partition_size(self, partition: int) -> tuple[int, int]:
        """Events and bytes one session holds."""
        part = self._parts.get(partition)
        return (0, 0) if part is None else (len(part.seqs), part.bytes)

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
        held = self._parts.get(partition)
        later = [
            (seq, self._events[seq])
            for seq in (held.seqs if held is not None else ())
            if seq > int(seq_text) and self._events[seq].stream_id == last.stream_id
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


_CLIENT: contextvars.ContextVar[str] = contextvars.ContextVar("asyncai_session_client", default="local")


class _SessionManager(StreamableHTTPSessionManager):
    """The SDK's session manager, handing each new session its own partition of one buffer,
    with sessions capped per client as well as in total.

    The SDK (2.3) admits a session in ``_admit_session`` and forgets it in ``_discard_session``,
    both private; the per-client count hooks them (tests cover it, so an SDK that renames them
    fails there).
    """

    def __init__(self, app: Server[Any], buffer: EventBuffer, limits: HttpLimits, **kwargs: Any) -> None:
        self._buffer = buffer
        self._limits = limits
        self._per_client: Counter[str] = Counter()
        self._client_of: dict[str, str] = {}
        super().__init__(
            app, max_sessions=limits.max_sessions, session_idle_timeout=limits.session_idle, **kwargs
        )

    @property  # the SDK reads it once per admitted session
    def event_store(self) -> EventStore | None:
        return self._buffer.session()

    @event_store.setter
    def event_store(self, _value: EventStore | None) -> None:
        pass  # the constructor's assignment; the partitions come from the buffer

    def _refusal(self, client: str) -> str | None:
        if len(self._server_instances) >= self._limits.max_sessions:
            return (
                f"Too many open sessions: {len(self._server_instances):,} are open, the most this server allows "
                "(--max-sessions); try again later"
            )
        if self._per_client[client] >= self._limits.max_sessions_per_client:
            return (
                f"Too many open sessions from this client: {self._per_client[client]:,}, the most one client may "
                "hold (--max-sessions-per-client); end some (HTTP DELETE) or reuse one"
            )
        return None

    async def _handle_stateful_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        client = client_key(scope)
        opening = not any(k == MCP_SESSION_ID_HEADER.encode() for k, _v in scope["headers"])
        if opening and (refusal := self._refusal(client)) is not None:
            await _session_refused(refusal, scope, receive, send)
            return
        token = _CLIENT.set(client)
        try:
            await super()._handle_stateful_request(scope, receive, send)
        finally:
            _CLIENT.reset(token)

    def _admit_session(self, requestor: AuthorizationContext | None) -> StreamableHTTPServerTransport | None:
        client = _CLIENT.get()
        if self._refusal(client) is not None:  # checked again under the SDK's admission lock
            return None
        transport = super()._admit_session(requestor)
        if transport is not None and transport.mcp_session_id is not None:
            self._client_of[transport.mcp_session_id] = client
            self._per_client[client] += 1
        return transport

    async def _discard_session(self, session_id: str, transport: StreamableHTTPServerTransport) -> None:
        client = self._client_of.pop(session_id, None)
        if client is not None:
            self._per_client[client] -= 1
            if self._per_client[client] <= 0:
                del self._per_client[client]
        await super()._discard_session(session_id, transport)


async def _session_refused(message: str, scope: Scope, receive: Receive, send: Send) -> None:
    body = JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=INTERNAL_ERROR, message=message))
    response = Response(
        body.model_dump_json(by_alias=True, exclude_unset=True),
        status_code=503,
        media_type="application/json",
    )
    await response(scope, receive, send)


def streamable_http_app(
    server: Server[Any],
    *,
    host: str,
    path: str = "/mcp",
    buffer: EventBuffer | None = None,
    limits: HttpLimits | None = None,
) -> Starlette:
    """``server``'s Streamable HTTP endpoint at ``path``, as ``Server.streamable_http_app`` builds it,
    plus priming events, ``retry:`` and replay for 2025-era clients, and the session limits of ``limits``.

    Host/Origin checks and authentication are :func:`~asyncai_watch.server.http.serve_http`'s
    (its ``policy``), on every bind; ``host`` is kept for callers that name it.
    """
    del host
    limits = limits if limits is not None else HttpLimits()
    if buffer is None:
        buffer = EventBuffer(session_events=limits.replay_events, session_bytes=limits.replay_bytes)
    manager = _SessionManager(server, buffer, limits, retry_interval=RETRY_MS)
    return Starlette(
        routes=[Route(path, endpoint=StreamableHTTPASGIApp(manager))],
        lifespan=lambda _app: manager.run(),
    )
