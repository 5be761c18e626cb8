"""Serve subscriptions to clients of both MCP eras, from one change source, at O(listeners) a change.

A :class:`SubscriptionRegistry` is a server's one place for "who listens to what":

- **2026-07-28**: it serves ``subscriptions/listen`` (``registry.listen``). One listen may
  hold any number of URIs (up to ``max_uris``, 100,000 by default): a client puts every URI
  it watches on a connection into one listen, and replaces that listen when the set changes.
  The wire is the SDK's ``ListenHandler``'s: the acknowledgment is the first frame, every
  frame carries the listen's id under ``_meta["io.modelcontextprotocol/subscriptionId"]``,
  :meth:`SubscriptionRegistry.close` ends every stream gracefully with the final
  ``SubscriptionsListenResult``, a stream whose client stopped reading is ended once
  ``max_backlog`` notifications queued up while it could not send one, and the list-changed
  flags are honored.
- **2025-11-25** (and 2025-06-18, 2025-03-26): it serves ``resources/subscribe`` and
  ``resources/unsubscribe`` (``registry.subscribe`` / ``registry.unsubscribe``) and pushes
  ``notifications/resources/updated`` on that client's session: the stdio connection, or a
  Streamable HTTP session's standalone GET stream. A session's subscriptions end with it.

:meth:`SubscriptionRegistry.publish` (a URI, or an SDK ``ServerEvent``) reaches the
listeners of that URI only, through the pure :class:`~asyncai_watch.server.index.SubscriptionIndex`.
Notifications are level triggers ("re-read it"), so a listener's pending ones are a set:
a URI that changes ten times before its stream is written is sent once.

The server supplies, all optional: ``refuse(uri)`` (why a URI is not served, or ``None``;
a listen or subscribe naming one fails with -32602 before anything is acknowledged),
``on_first(uri)`` / ``on_last(uri)`` (a URI gained its first listener / lost its last: start
or stop its change source), and ``ready(uris)`` (awaited before the acknowledgment, so a
change made once the client has it is always seen).

Wiring into a low-level :class:`mcp.server.Server`::

    registry = SubscriptionRegistry("memo", refuse=memo.refuse)
    server = Server("memo", ..., **registry.handlers())

``handlers()`` also sets the server's ``lifespan`` to :meth:`SubscriptionRegistry.running`,
which owns the tasks that write 2025-era sessions; the SDK enters it once per ``run`` (stdio)
or once per HTTP app. Capabilities then follow from the handlers, as the SDK derives them:
``resources.subscribe: true`` for both eras.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager, nullcontext
from typing import Any, Final, Protocol

import anyio
import anyio.abc
import anyio.lowlevel
import attrs
import mcp_types as types
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import (
    SUBSCRIPTION_ID_META_KEY,
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ServerEvent,
    ToolsListChanged,
    event_to_notification,
)
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST

from .index import ListKind, SubscriptionIndex
from .policy import DEFAULT_MAX_LISTENS, DEFAULT_MAX_LISTENS_PER_CLIENT, DEFAULT_MAX_TOTAL_URIS, client_key

__all__ = [
    "DEFAULT_MAX_BACKLOG",
    "DEFAULT_MAX_LISTENS",
    "DEFAULT_MAX_LISTENS_PER_CLIENT",
    "DEFAULT_MAX_PUSHES",
    "DEFAULT_MAX_TOTAL_URIS",
    "DEFAULT_MAX_URIS",
    "ListenStream",
    "Listener",
    "SubscriptionRegistry",
    "SubscriptionStats",
    "honored_filter",
]

logger = logging.getLogger(__name__)


def honored_filter(requested: types.SubscriptionFilter, uris: list[str]) -> types.SubscriptionFilter:
    """What a listen's acknowledgment says the server will report: the list changes asked for,
    and ``uris`` (the resource subscriptions it accepted)."""
    return types.SubscriptionFilter(
        tools_list_changed=True if requested.tools_list_changed else None,
        prompts_list_changed=True if requested.prompts_list_changed else None,
        resources_list_changed=True if requested.resources_list_changed else None,
        resource_subscriptions=uris or None,
    )


DEFAULT_MAX_URIS: Final = 100_000
"""URIs one listen (or one 2025-era session) may hold. About 190 bytes of server memory each
(``bench/subscriptions.py``: 19 MB for one listen of 100,000), so the default costs a server
at most that per connection a client keeps open."""

DEFAULT_MAX_BACKLOG: Final = 1024
"""Distinct notifications that may queue up on one stream while its writer cannot complete a single
send (its client stopped reading): one more and the stream is ended (the client re-listens and
re-reads), as the SDK's ``max_buffered_events`` does. A slow but reading client is never ended:
every notification it takes resets the count, and what waits is a set, bounded by the listen's URIs."""

DEFAULT_MAX_PUSHES: Final = 256
"""Server-specific notifications (:meth:`ListenStream.push`) waiting on one stream; more are refused."""

_KIND_OF: Final[dict[type[ServerEvent], ListKind]] = {
    ToolsListChanged: "tools",
    PromptsListChanged: "prompts",
    ResourcesListChanged: "resources",
}
_SHOWN: Final = 5  # refused URIs a refusal names; the rest are counted
_CHUNK: Final = 4096  # URIs of one listen handled between two checkpoints: other clients are served meanwhile

UriCheck = Callable[[str], str | None]
UriHook = Callable[[str], None]
ReadyHook = Callable[[Sequence[str]], Awaitable[None]]


class Listener(Protocol):
    """Anything :meth:`SubscriptionRegistry.attach` can subscribe: it is handed each matching event.

    ``deliver`` is called synchronously from :meth:`SubscriptionRegistry.publish`; it must not
    block or raise (an exception is logged and the other listeners still get the event).
    """

    def deliver(self, event: ServerEvent) -> None:
        """Take one event for a URI this listener holds."""
        ...


@attrs.frozen
class SubscriptionStats:
    """How many URIs and listeners a :class:`SubscriptionRegistry` holds now."""

    uris: int
    """Distinct URIs with at least one listener."""
    subscriptions: int
    """(listener, URI) pairs over every listen, session and attached listener."""
    listens: int
    """Open ``subscriptions/listen`` streams."""
    sessions: int
    """2025-era sessions holding at least one ``resources/subscribe``."""
    delivered: int
    """Events handed to listeners since start: one per listener of each published URI."""


class _Outbox:
    """One listener's pending events: a set in arrival order (they are level triggers).

    Bounded by what the listener subscribed to: each URI (and list kind) is pending at most once.
    """

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending: dict[ServerEvent, None] = {}

    def add(self, event: ServerEvent) -> bool:
        """Queue ``event``; False when it was already pending (the one notification covers both)."""
        if event in self._pending:
            return False
        self._pending[event] = None
        return True

    def take(self) -> list[ServerEvent]:
        taken = list(self._pending)
        self._pending.clear()
        return taken

    def __len__(self) -> int:
        return len(self._pending)


class ListenStream:
    """One open ``subscriptions/listen`` stream (the handler's own task writes it).

    A server that sends notifications of its own on the stream (channel pushes, doorbells)
    gets each stream through ``SubscriptionRegistry(on_stream=...)`` and calls :meth:`push`.
    """

    def __init__(
        self,
        registry: SubscriptionRegistry,
        session: ServerSession,
        subscription_id: types.RequestId,
        honored: types.SubscriptionFilter,
        *,
        max_backlog: int,
        max_pushes: int,
    ) -> None:
        self.session = session
        self.subscription_id = subscription_id
        self.honored = honored
        """The filter the acknowledgment carries."""
        self.sent = 0
        """Change notifications written to the stream."""
        self.pushed = 0
        """:meth:`push` notifications written to the stream."""
        self.overflowed = False
        """The stream was ended because its client stopped reading."""
        self._registry = registry
        self._outbox = _Outbox()
        self._max_backlog = max_backlog
        self._queued_since_send = 0  # distinct events queued since the writer last completed a send
        self._pushes: deque[types.Notification[Any, Any]] = deque()
        self._max_pushes = max_pushes
        self._closed = False
        self._wake = anyio.Event()

    @property
    def closed(self) -> bool:
        return self._closed

    def deliver(self, event: ServerEvent) -> None:
        """Queue ``event`` for this stream's client (dropped once the stream is closed)."""
        if self._closed or not self._outbox.add(event):
            return
        self._queued_since_send += 1
        if self._queued_since_send > self._max_backlog:
            logger.warning(
                "listen stream %r: %d notifications queued while none could be sent; ending it",
                self.subscription_id,
                self._queued_since_send,
            )
            self.overflowed = True
            # Release its URIs and its slot now: the writer may be stuck in a transport write that
            # closing cannot wake (a client that stopped reading).
            self._registry._drop_stream(self)
            self.close()
            return
        self._wake.set()

    def _sent(self) -> None:
        self._queued_since_send = 0

    def push(self, notification: types.Notification[Any, Any]) -> bool:
        """Send ``notification`` on this stream, after what is already queued; False when closed or full.

        Send it stamped (``params._meta`` with :data:`SUBSCRIPTION_ID_META_KEY` = :attr:`subscription_id`),
        as every frame of a listen stream must be.
        """
        if self._closed or len(self._pushes) >= self._max_pushes:
            return False
        self._pushes.append(notification)
        self._wake.set()
        return True

    def close(self) -> None:
        """End the stream gracefully: what is queued is sent, then the final result."""
        self._closed = True
        self._wake.set()

    async def _batches(self) -> AsyncIterator[tuple[list[ServerEvent], list[types.Notification[Any, Any]]]]:
        while True:
            while not (self._outbox or self._pushes):
                if self._closed:
                    return
                await self._wake.wait()
                self._wake = anyio.Event()
            pushes = list(self._pushes)
            self._pushes.clear()
            yield self._outbox.take(), pushes


class _LegacySession:
    """A 2025-era session's subscriptions, written connection-scoped by one task."""

    def __init__(self, session: ServerSession) -> None:
        self.session = session
        self.outbox = _Outbox()
        self.closed = False
        self._wake = anyio.Event()

    def deliver(self, event: ServerEvent) -> None:
        if not self.closed and self.outbox.add(event):
            self._wake.set()

    def close(self) -> None:
        self.closed = True
        self._wake.set()

    async def next_batch(self) -> list[ServerEvent] | None:
        while not self.outbox:
            if self.closed:
                return None
            await self._wake.wait()
            self._wake = anyio.Event()
        return self.outbox.take()


def _chunks(uris: Sequence[str]) -> Iterator[Sequence[str]]:
    for start in range(0, len(uris), _CHUNK):
        yield uris[start : start + _CHUNK]


def _client_of(ctx: ServerRequestContext[Any, Any]) -> str:
    """Who sent the request, as the HTTP guard named it (``local`` on stdio)."""
    scope = getattr(ctx.request, "scope", None)
    return client_key(scope if isinstance(scope, dict) else None)


def _connection_of(ctx: ServerRequestContext[Any, Any]) -> Connection:
    """The connection a request came on, which a 2025-era session's subscriptions live and die with.

    The SDK (2.3, which ``pyproject.toml`` pins) gives a low-level handler no public way to it; the
    request's :class:`ServerSession` holds it (a test covers this, so an SDK that moves it fails there).
    """
    connection = getattr(ctx.session, "_connection", None)
    if not isinstance(connection, Connection):
        raise MCPError(
            INTERNAL_ERROR,
            "resources/subscribe: cannot find the request's connection in this mcp SDK (needs 2.3)",
        )
    return connection


class SubscriptionRegistry:
    """A server's subscriptions, of both protocol eras, indexed by URI.

    ``name`` prefixes the errors it raises. See the module docstring for the hooks; they are
    called on the event loop and must not raise (an exception is logged and ignored, so every
    ``on_first`` is still matched by one ``on_last``).
    """

    def __init__(
        self,
        name: str,
        *,
        refuse: UriCheck | None = None,
        on_first: UriHook | None = None,
        on_last: UriHook | None = None,
        ready: ReadyHook | None = None,
        on_stream: Callable[[ListenStream], AbstractContextManager[object]] | None = None,
        max_uris: int = DEFAULT_MAX_URIS,
        max_listens: int = DEFAULT_MAX_LISTENS,
        max_backlog: int = DEFAULT_MAX_BACKLOG,
        max_pushes: int = DEFAULT_MAX_PUSHES,
        max_listens_per_client: int = DEFAULT_MAX_LISTENS_PER_CLIENT,
        max_total_uris: int = DEFAULT_MAX_TOTAL_URIS,
    ) -> None:
        for label, value in (
            ("max_uris", max_uris),
            ("max_listens", max_listens),
            ("max_backlog", max_backlog),
            ("max_pushes", max_pushes),
            ("max_listens_per_client", max_listens_per_client),
            ("max_total_uris", max_total_uris),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"SubscriptionRegistry: {label} must be an integer >= 1, got {value!r}")
        self.name = name
        self.max_uris = max_uris
        self.max_listens = max_listens
        self.max_backlog = max_backlog
        self.max_pushes = max_pushes
        self.max_listens_per_client = max_listens_per_client
        self.max_total_uris = max_total_uris
        self._client_listens: Counter[str] = Counter()
        self._refuse = refuse
        self._on_first = on_first
        self._on_last = on_last
        self._ready = ready
        self._on_stream = on_stream
        self._index: SubscriptionIndex[Listener] = SubscriptionIndex()
        self._streams: set[ListenStream] = set()
        self._sessions: dict[Connection, _LegacySession] = {}
        self._groups: list[anyio.abc.TaskGroup] = []
        self._delivered = 0

    # -- wiring ------------------------------------------------------------------------------------

    def set_limits(self, *, max_listens: int, max_listens_per_client: int, max_total_uris: int) -> None:
        """The listen limits of an HTTP policy (``--max-listens``, ``--max-listens-per-client``,
        ``--max-total-uris``), set once before serving."""
        for label, value in (
            ("max_listens", max_listens),
            ("max_listens_per_client", max_listens_per_client),
            ("max_total_uris", max_total_uris),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"SubscriptionRegistry: {label} must be an integer >= 1, got {value!r}")
        self.max_listens = max_listens
        self.max_listens_per_client = max_listens_per_client
        self.max_total_uris = max_total_uris

    def handlers(self) -> dict[str, Any]:
        """The ``mcp.server.Server`` keyword arguments that serve both eras: ``Server(..., **registry.handlers())``."""
        return {
            "on_subscriptions_listen": self.listen,
            "on_subscribe_resource": self.subscribe,
            "on_unsubscribe_resource": self.unsubscribe,
            "lifespan": self.lifespan,
        }

    @asynccontextmanager
    async def running(self) -> AsyncIterator[SubscriptionRegistry]:
        """Own the tasks that write 2025-era sessions while this is entered (it may be, by several transports).

        On exit those tasks end, and with them the sessions they wrote (their URIs lose those listeners).
        """
        async with anyio.create_task_group() as tg:
            self._groups.append(tg)
            try:
                yield self
            finally:
                self._groups.remove(tg)
                tg.cancel_scope.cancel()

    @asynccontextmanager
    async def lifespan(self, _server: object) -> AsyncIterator[dict[str, Any]]:
        """:meth:`running` as a ``Server(lifespan=...)``."""
        async with self.running():
            yield {}

    def close(self) -> None:
        """End every open listen stream gracefully (an HTTP server's shutdown would otherwise wait on them).

        Each sends what it has queued, then its final ``SubscriptionsListenResult``. New listens are
        still accepted.
        """
        for stream in list(self._streams):
            stream.close()

    # -- the change source -------------------------------------------------------------------------

    def publish_nowait(self, change: str | ServerEvent) -> int:
        """Hand ``change`` (a URI that changed, or an SDK ``ServerEvent``) to its listeners; never waits.

        Costs O(listeners of that URI) (of that list kind, for a list change). Returns how many got it.
        """
        event: ServerEvent = ResourceUpdated(uri=change) if isinstance(change, str) else change
        if isinstance(event, ResourceUpdated):
            targets = self._index.listeners(event.uri)
        else:
            targets = self._index.listeners_of_kind(_KIND_OF[type(event)])
        for listener in targets:
            try:
                listener.deliver(event)
            except Exception:  # fan-out boundary: one broken listener must not starve the others
                logger.exception("subscription listener %r raised; continuing", listener)
        self._delivered += len(targets)
        return len(targets)

    async def publish(self, change: str | ServerEvent) -> int:
        """:meth:`publish_nowait`, then a checkpoint so the streams it woke can write between a burst's changes."""
        delivered = self.publish_nowait(change)
        await anyio.lowlevel.checkpoint()
        return delivered

    # -- questions ---------------------------------------------------------------------------------

    def listened(self, uri: str) -> bool:
        """Whether ``uri`` has a listener (a listen, a 2025-era session or an attached listener)."""
        return self._index.listened(uri)

    def listeners(self, uri: str) -> int:
        """How many listeners hold ``uri`` now."""
        return len(self._index.listeners(uri))

    def stats(self) -> SubscriptionStats:
        """The registry's counts now."""
        return SubscriptionStats(
            uris=self._index.uri_count,
            subscriptions=self._index.subscription_count,
            listens=len(self._streams),
            sessions=len(self._sessions),
            delivered=self._delivered,
        )

    def check(self, uris: Iterable[str]) -> None:
        """Raise the -32602 ``MCPError`` a subscription naming ``uris`` gets if ``refuse`` refuses any."""
        refused: dict[str, list[str]] = {}
        self._refusals(uris, refused)
        self._raise_refused(refused)

    def _refusals(self, uris: Iterable[str], refused: dict[str, list[str]]) -> None:
        if self._refuse is None:
            return
        for uri in uris:
            reason = self._refuse(uri)
            if reason is not None:
                refused.setdefault(reason, []).append(uri)

    def _raise_refused(self, refused: dict[str, list[str]]) -> None:
        if not refused:
            return
        clauses = []
        for reason, named in refused.items():
            more = f" (and {len(named) - _SHOWN:,} more)" if len(named) > _SHOWN else ""
            clauses.append(f"cannot subscribe to {named[:_SHOWN]}{more}; {reason}")
        if len(clauses) > 2:
            clauses[2:] = [f"{len(refused) - 2} more reasons"]
        raise MCPError(INVALID_PARAMS, f"{self.name}: " + " / ".join(clauses))

    # -- listeners of any kind ---------------------------------------------------------------------

    @contextmanager
    def attach(
        self, listener: Listener, uris: Iterable[str], kinds: Iterable[ListKind] = ()
    ) -> Iterator[None]:
        """Subscribe ``listener`` to ``uris`` while the block runs (a server's own stream type).

        ``refuse`` and ``max_uris`` are not applied (call :meth:`check` first if they should be);
        ``on_first`` / ``on_last`` are.
        """
        self._add(listener, uris, kinds)
        try:
            yield
        finally:
            self._forget(listener)

    def _add(self, listener: Listener, uris: Iterable[str], kinds: Iterable[ListKind] = ()) -> None:
        for uri in self._index.add(listener, uris, kinds):
            self._hook(self._on_first, uri)

    def _forget(self, listener: Listener) -> None:
        for uri in self._index.remove(listener):
            self._hook(self._on_last, uri)

    @staticmethod
    def _hook(hook: UriHook | None, uri: str) -> None:
        if hook is None:
            return
        try:
            hook(uri)
        except Exception:  # the index is already consistent: a raising hook must not unbalance it
            logger.exception("subscription hook %r raised for %s; continuing", hook, uri)

    def _unique(self, uris: Sequence[str], what: str) -> list[str]:
        unique = list(dict.fromkeys(uris))
        if len(unique) > self.max_uris:
            raise MCPError(
                INVALID_PARAMS,
                f"{self.name}: {what} names {len(unique):,} URIs; this server accepts at most {self.max_uris:,} "
                "per listen (per session for resources/subscribe). Split them over several listens",
            )
        return unique

    # -- 2026-07-28: subscriptions/listen ----------------------------------------------------------

    async def listen(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        """Serve one ``subscriptions/listen`` stream (``Server(on_subscriptions_listen=registry.listen)``)."""
        rid = ctx.request_id
        if rid is None:
            raise MCPError(INVALID_REQUEST, "subscriptions/listen requires a request id")
        if len(self._streams) >= self.max_listens:
            raise MCPError(
                INTERNAL_ERROR,
                f"Subscription limit reached: {self.name} has {len(self._streams):,} listen streams open, the most "
                f"it allows (--max-listens); one listen can hold up to {self.max_uris:,} URIs",
            )
        client = _client_of(ctx)
        if self._client_listens[client] >= self.max_listens_per_client:
            raise MCPError(
                INTERNAL_ERROR,
                f"Subscription limit reached: this client holds {self._client_listens[client]:,} listen streams, "
                f"the most {self.name} allows one client (--max-listens-per-client); one listen can hold up to "
                f"{self.max_uris:,} URIs: put them in one listen and end the others",
            )
        requested = params.notifications
        uris = self._unique(requested.resource_subscriptions or (), "this subscriptions/listen")
        self._check_total(len(uris))
        refused: dict[str, list[str]] = {}
        for chunk in _chunks(uris):  # a 100,000-URI listen must not hold the event loop for its whole check
            self._refusals(chunk, refused)
            await anyio.lowlevel.checkpoint()
        self._raise_refused(refused)
        wanted: dict[ListKind, bool | None] = {
            "tools": requested.tools_list_changed,
            "prompts": requested.prompts_list_changed,
            "resources": requested.resources_list_changed,
        }
        kinds = [kind for kind, on in wanted.items() if on]
        honored = honored_filter(requested, uris)
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: rid}
        stream = ListenStream(
            self, ctx.session, rid, honored, max_backlog=self.max_backlog, max_pushes=self.max_pushes
        )
        self._streams.add(stream)
        self._client_listens[client] += 1
        try:
            # Subscribed before the ack, so a change meanwhile is queued, not lost; this task alone
            # writes the stream, so the ack still goes first.
            self._add(stream, (), kinds)
            for chunk in _chunks(uris):
                self._add(stream, chunk)
                await anyio.lowlevel.checkpoint()
            if self._ready is not None and uris:
                await self._ready(uris)
            with self._on_stream(stream) if self._on_stream is not None else nullcontext():
                await ctx.session.send_notification(
                    types.SubscriptionsAcknowledgedNotification(
                        params=types.SubscriptionsAcknowledgedNotificationParams(
                            notifications=honored, _meta=meta
                        )
                    ),
                    related_request_id=rid,
                )
                async for events, pushes in stream._batches():
                    for event in events:
                        await ctx.session.send_notification(
                            event_to_notification(event, meta), related_request_id=rid
                        )
                        stream.sent += 1
                        stream._sent()
                    for notification in pushes:
                        await ctx.session.send_notification(notification, related_request_id=rid)  # type: ignore[arg-type]  # a server's own method
                        stream.pushed += 1
                        stream._sent()
        finally:
            stream.close()
            self._drop_stream(stream)
            self._client_listens[client] -= 1
            if self._client_listens[client] <= 0:
                del self._client_listens[client]
        return types.SubscriptionsListenResult(_meta=meta)

    def _check_total(self, adding: int) -> None:
        held = self._index.subscription_count
        if adding and held + adding > self.max_total_uris:
            raise MCPError(
                INTERNAL_ERROR,
                f"Subscription limit reached: {self.name} holds {held:,} URI subscriptions over all clients; "
                f"{adding:,} more would pass the most it allows, {self.max_total_uris:,} (--max-total-uris)",
            )

    def _drop_stream(self, stream: ListenStream) -> None:
        self._streams.discard(stream)
        self._forget(stream)

    # -- 2025-11-25 and before: resources/subscribe ------------------------------------------------

    async def subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        """Serve ``resources/subscribe``: ``notifications/resources/updated`` for ``params.uri`` on this session."""
        uri = str(params.uri)
        connection = _connection_of(ctx)
        if not connection.has_standalone_channel:
            raise MCPError(
                INVALID_REQUEST,
                f"{self.name}: resources/subscribe needs a session that can carry notifications; this connection "
                "has none (stateless HTTP). Use a stateful session, or MCP 2026-07-28 subscriptions/listen",
            )
        self.check([uri])
        session = self._sessions.get(connection)
        if session is not None and self._index.holds(session, uri):
            return types.EmptyResult()
        if session is not None and self._index.count(session) >= self.max_uris:
            raise MCPError(
                INVALID_PARAMS,
                f"{self.name}: this session already holds {self.max_uris:,} subscriptions, the most this server "
                "accepts per session; unsubscribe from some first",
            )
        self._check_total(1)
        if session is None:
            session = self._open_session(ctx, connection)
        self._add(session, [uri])
        if self._ready is not None:
            await self._ready([uri])
        return types.EmptyResult()

    async def unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        """Serve ``resources/unsubscribe``; a URI the session does not hold is fine (nothing to do)."""
        session = self._sessions.get(_connection_of(ctx))
        if session is not None:
            for uri in self._index.discard(session, [str(params.uri)]):
                self._hook(self._on_last, uri)
        return types.EmptyResult()

    def _open_session(self, ctx: ServerRequestContext[Any, Any], connection: Connection) -> _LegacySession:
        if not self._groups:
            raise MCPError(
                INTERNAL_ERROR,
                f"{self.name}: resources/subscribe is served only while SubscriptionRegistry.running() is entered "
                "(pass lifespan=registry.lifespan to the Server, as registry.handlers() does)",
            )
        session = _LegacySession(ctx.session)
        self._sessions[connection] = session
        # The SDK unwinds the connection's exit stack when the session ends (stdio EOF, HTTP DELETE or expiry).
        connection.exit_stack.callback(self._end_session, connection, session)
        self._groups[0].start_soon(self._write_session, connection, session)
        return session

    def _end_session(self, connection: Connection, session: _LegacySession) -> None:
        session.close()
        if self._sessions.get(connection) is session:
            del self._sessions[connection]
        self._forget(session)

    async def _write_session(self, connection: Connection, session: _LegacySession) -> None:
        try:
            await self._write_batches(session)
        except Exception:  # this task shares the server's lifespan: one session must not end it
            logger.exception(
                "%s: writing a 2025-era session's updates failed; its subscriptions end", self.name
            )
        finally:
            self._end_session(connection, session)  # nothing writes it any more

    async def _write_batches(self, session: _LegacySession) -> None:
        while (batch := await session.next_batch()) is not None:
            for event in batch:
                if isinstance(event, ResourceUpdated):
                    # Connection-scoped: the stdio pipe, or the HTTP session's standalone GET stream.
                    await session.session.send_notification(
                        types.ResourceUpdatedNotification(
                            params=types.ResourceUpdatedNotificationParams(uri=event.uri)
                        )
                    )
