"""A :class:`~asyncai_watch.mcp.source.ResourceSource` over a real MCP connection.

:class:`McpResourceSource` connects with the ``mcp`` 2.3 SDK client, to a
server started as a subprocess (stdio), at a Streamable HTTP URL, or (for tests) an SDK server in
this process on the SDK's memory streams (:meth:`McpResourceSource.in_memory`)::

    async with McpResourceSource.stdio([sys.executable, "-m", "asyncai_servers.memo"]) as src:
        async with src.subscribe(["memo://notes"]) as updates:
            async for uri in updates:
                print((await src.read(uri)).text)

Connecting sends ``server/discover`` (MCP 2026-07-28) and falls back to the
``initialize`` handshake for an older server. Either can be watched when it advertises
``resources.subscribe``: :meth:`McpResourceSource.subscribe` opens one ``subscriptions/listen``
for any number of URIs on a 2026-07-28 connection, and one ``resources/subscribe`` (for one URI,
``resources/unsubscribe`` when it ends) on a 2025-era one (:mod:`asyncai_watch.mcp.legacy`).

The SDK's response cache is off for the whole connection: a cached read would
hide the change an ``updated`` signal just announced.

The SDK client is held by an owner task (:mod:`asyncai_watch.mcp.connection`), so a transport
failure inside the SDK never cancels the caller. When the connection dies (a stdio
server exits, an HTTP server goes away) the failing call raises, and the next
call reconnects first (respawning a stdio server): the manager's resubscribe
backoff is what paces reconnects; nothing here retries on its own.

Errors: the server's own errors become :class:`ServerError` (with the server's
message), and so does a result the SDK refuses (not valid for the negotiated
protocol version, or a tool result that does not meet the tool's output schema),
naming the method; a 2026-07-28 tool result without ``resultType`` is read as
complete, as the spec says. A connection that cannot be made, or is gone, becomes
:class:`ServerConnectionError` naming the command or URL. Both are
:class:`~asyncai_watch.errors.WatchError`.
"""

from __future__ import annotations

import codecs
import functools
import logging
import os
import shlex
import shutil
import sys
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal, TextIO, TypeVar

import anyio
import httpx2
import mcp_types as types
import pydantic
from mcp import Client, MCPError, StdioServerParameters
from mcp.client import ClientExtension
from mcp.client.subscriptions import (
    ListenNotSupportedError,
    ResourcesListChanged,
    ResourceUpdated,
    Subscription,
    SubscriptionLost,
)
from mcp.server import Server
from mcp.server.mcpserver import MCPServer

from asyncai_watch._tasks import enter_task_group
from asyncai_watch.clock import Clock, SystemClock, fail_after
from asyncai_watch.core.echo import clip, quoted, redact_url
from asyncai_watch.core.eventlog import AFTER_META_KEY
from asyncai_watch.core.resources import ListedResource, ListedTemplate
from asyncai_watch.errors import (
    NotWatchableError,
    ServerConnectionError,
    ServerError,
    ServerTimeoutError,
    SubscriptionLostError,
    WatchError,
    advertised_but_missing,
    not_advertised,
    protocol_too_old,
    refused_when_tried,
)
from asyncai_watch.http_auth import refresh_first
from asyncai_watch.mcp.body_cap import DEFAULT_MAX_MESSAGE_BYTES
from asyncai_watch.mcp.connection import Connection, Connector, Target
from asyncai_watch.mcp.convert import (
    UnreadableResult,
    complete_without_result_type,
    describe_error,
    listed_resources,
    listed_templates,
    named_uris,
    read_result,
    server_error,
    tool_info,
    tool_result,
)
from asyncai_watch.mcp.legacy import LegacyUpdates
from asyncai_watch.mcp.source import (
    MODERN_PROTOCOL_VERSION,
    ReadResult,
    SubscriptionMode,
    ToolInfo,
    ToolResult,
    Updates,
    Watchability,
    subscription_mode_for,
)

__all__ = [
    "DEFAULT_ACK_TIMEOUT",
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_REQUEST_TIMEOUT",
    "McpResourceSource",
    "tool_result",
]

DEFAULT_CONNECT_TIMEOUT: Final = 30.0
"""Seconds to wait for a server to answer the connect handshake before giving up."""

DEFAULT_ACK_TIMEOUT: Final = 30.0
"""Seconds to wait for a ``subscriptions/listen`` acknowledgment."""

DEFAULT_REQUEST_TIMEOUT: Final = 60.0
"""Seconds to wait for the answer to one request (a read, a list page, a tool call)."""

_MAX_PAGES: Final = 1000
"""Page cap for list walks, so a server whose cursor never ends cannot hang a call."""

_T = TypeVar("_T")

_log = logging.getLogger(__name__)


class _Updates:
    """An open ``subscriptions/listen``: the honored URIs, then one URI per ``updated`` signal
    (``None`` per ``list_changed`` when ``uris`` is ``None``)."""

    def __init__(
        self,
        source: McpResourceSource,
        conn: Connection,
        uris: frozenset[str] | None,
        subscription: Subscription,
        honored: frozenset[str] | None,
    ) -> None:
        self._source = source
        self._conn = conn
        self._uris = uris
        self._subscription = subscription
        self.honored = honored

    def __aiter__(self) -> _Updates:
        return self

    async def __anext__(self) -> Any:
        while True:
            try:
                event = await self._subscription.__anext__()
            except SubscriptionLost as exc:
                cause = exc.__cause__ if exc.__cause__ is not None else exc
                self._conn.lost_to(cause)  # then the re-listen reconnects first
                lost = named_uris(self._uris) if self._uris is not None else "resource list changes"
                raise SubscriptionLostError(
                    f"server {self._source.name!r}: subscription to {lost} was lost ({cause}); "
                    "re-listen and re-read"
                ) from exc
            if self._uris is None:
                if isinstance(event, ResourcesListChanged):
                    return None
            elif isinstance(event, ResourceUpdated):
                return event.uri


class McpResourceSource:
    """One MCP server connection, as the watch machinery sees it.

    Build it with :meth:`stdio` or :meth:`http` and use it as an async
    context manager; the connection lives until the block exits.
    """

    def __init__(
        self,
        *,
        target: Target,
        description: str,
        fallback_name: str,
        name: str | None = None,
        headers: Mapping[str, str] | None = None,
        auth: httpx2.Auth | None = None,
        extensions: Sequence[ClientExtension] = (),
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        ack_timeout: float = DEFAULT_ACK_TIMEOUT,
        request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
        max_message_bytes: int | None = DEFAULT_MAX_MESSAGE_BYTES,
        clock: Clock | None = None,
        errlog: TextIO | None = None,
        legacy: bool = False,
    ) -> None:
        """Prefer :meth:`stdio` / :meth:`http`; this takes the already-validated target."""
        if max_message_bytes is not None and (type(max_message_bytes) is not int or max_message_bytes < 1):
            raise ValueError(
                f"max_message_bytes must be an int >= 1 (or None for no bound), got {max_message_bytes!r}"
            )
        if name is not None and not name.strip():
            raise ValueError(
                "McpResourceSource name must be a non-empty string (or None for the server's name)"
            )
        if connect_timeout <= 0 or ack_timeout <= 0:
            raise ValueError(
                f"connect_timeout and ack_timeout must be > 0 seconds, got {connect_timeout!r}, {ack_timeout!r}"
            )
        if request_timeout is not None and request_timeout <= 0:
            raise ValueError(
                f"request_timeout must be > 0 seconds (or None for no bound), got {request_timeout!r}"
            )
        if isinstance(target, StdioServerParameters) and codecs.lookup(target.encoding).name != "utf-8":
            raise ValueError(
                f"MCP over stdio is UTF-8; got a server with encoding={target.encoding!r} (leave it unset)"
            )
        self._description = description
        self._fallback_name = fallback_name
        self._name_override = name
        self._ack_timeout = ack_timeout
        self._request_timeout = request_timeout
        self._max_message = max_message_bytes
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._connector = Connector(
            target=target,
            description=description,
            headers=headers,
            auth=auth,
            extensions=extensions,
            connect_timeout=connect_timeout,
            max_message=max_message_bytes,
            clock=self._clock,
            errlog=errlog,
            legacy=legacy,
        )
        self._stack: AsyncExitStack | None = None
        # The capability fallback: a server that does not advertise resources.subscribe is
        # tried once; its answer holds for the source's life (a respawn runs the same server).
        self._trial: Literal["accepted", "refused"] | None = None
        self._refusal = ""
        self._name: str = name if name is not None else fallback_name

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def stdio(
        cls,
        command: str | Sequence[str],
        *,
        name: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        extensions: Sequence[ClientExtension] = (),
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        ack_timeout: float = DEFAULT_ACK_TIMEOUT,
        request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
        max_message_bytes: int | None = DEFAULT_MAX_MESSAGE_BYTES,
        clock: Clock | None = None,
        errlog: TextIO | None = None,
        legacy: bool = False,
    ) -> McpResourceSource:
        """A server started as ``command`` (a string is split like a shell would), spoken to over stdio.

        The server gets the caller's environment (``os.environ`` as it is here), as a command
        started from a shell does, so ``KUBECONFIG`` or a DSN reach it. ``env`` replaces that: the
        server then gets ``env`` over the SDK's safe default (``PATH``, ``HOME``, ...) and nothing
        else (``env={**os.environ, "X": "1"}`` adds one variable). The server's stderr goes to
        ``errlog`` (default: ours).
        The timeouts (seconds), ``max_message_bytes``, ``clock`` and ``legacy`` are described on
        :meth:`http`.
        """
        argv = shlex.split(command) if isinstance(command, str) else list(command)
        if not argv or not argv[0]:
            raise ValueError(
                f"McpResourceSource.stdio: command must name a program, e.g. 'asyncai-mcp-simple', got {quoted(command)}"
            )
        if not all(isinstance(arg, str) for arg in argv):
            raise TypeError(
                f"McpResourceSource.stdio: command must be a str or a sequence of str, got {quoted(command)}"
            )
        params = StdioServerParameters(
            command=_resolve(argv[0]),
            args=argv[1:],
            env=dict(os.environ) if env is None else dict(env),  # as the CLI's --server does
            cwd=cwd,
        )
        return cls(
            target=params,
            description=f"command {shlex.join(argv)!r}",
            fallback_name=os.path.basename(argv[0]) or argv[0],
            name=name,
            extensions=extensions,
            connect_timeout=connect_timeout,
            ack_timeout=ack_timeout,
            request_timeout=request_timeout,
            max_message_bytes=max_message_bytes,
            clock=clock,
            errlog=errlog,
            legacy=legacy,
        )

    @classmethod
    def http(
        cls,
        url: str,
        *,
        name: str | None = None,
        headers: Mapping[str, str] | None = None,
        auth: httpx2.Auth | None = None,
        extensions: Sequence[ClientExtension] = (),
        connect_timeout: float | None = None,
        ack_timeout: float = DEFAULT_ACK_TIMEOUT,
        request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
        max_message_bytes: int | None = DEFAULT_MAX_MESSAGE_BYTES,
        clock: Clock | None = None,
        legacy: bool = False,
    ) -> McpResourceSource:
        """A Streamable HTTP server at ``url`` (e.g. ``http://127.0.0.1:8765/mcp``).

        ``headers`` go on every request, e.g. ``{"Authorization": "Bearer TOKEN"}``. With no
        ``Authorization`` header and no ``auth``, a loopback ``url`` gets the token its server
        published for this user (:mod:`asyncai_watch.http_auth.local`), read at each connect.

        ``auth`` authenticates every request: the SDK's OAuth client provider
        (``mcp.client.auth.OAuthClientProvider``: discovery, registration,
        authorization code with PKCE, refresh; or a client-credentials provider
        from ``mcp.client.auth.extensions``), or any other ``httpx2.Auth``. The
        same object serves every reconnect, so the tokens it holds (and its
        ``TokenStorage``) carry over: a watch whose token expired is
        re-authenticated when it resubscribes, with a refresh first when the
        provider holds a refresh token (:func:`~asyncai_watch.http_auth.refresh_first`).
        See :mod:`asyncai_watch.http_auth`.

        Timeouts, in seconds on ``clock`` (default: the system clock): ``connect_timeout``
        for the connect handshake (``None``: :data:`DEFAULT_CONNECT_TIMEOUT`; an OAuth flow
        that waits for a person passes more), ``ack_timeout`` for a listen's acknowledgment, and
        ``request_timeout`` (``None``: unbounded) for the answer to any one request. A
        request that times out raises :class:`ServerTimeoutError` and drops the
        connection, which ends its listens (their watches resubscribe) and makes the
        next call reconnect (a stdio server is restarted): a server that stopped
        answering must not stall its watches for good.

        ``max_message_bytes`` (default :data:`~asyncai_watch.mcp.body_cap.DEFAULT_MAX_MESSAGE_BYTES`,
        16 MiB; ``None``: unbounded) caps one message from the server, a read's answer included:
        a stdio line, an HTTP JSON body or SSE event. It is enforced as the bytes arrive, so a
        hostile server's 1 GiB answer costs no more than the cap; the request fails with a
        :class:`ServerError` naming the cap, and the connection stays up (on stdio a line whose
        request id cannot be seen ends the connection, and the next call respawns the server).

        ``legacy=True`` connects with the 2025 ``initialize`` handshake only, never probing with
        ``server/discover``: watches then ride ``resources/subscribe``, as a 2025-era host's do.
        """
        try:
            parsed = urllib.parse.urlsplit(url)
            hostname = parsed.hostname
        except ValueError:  # a bad port or bracket: not an http(s) URL either
            hostname = None
        if not hostname or parsed.scheme not in ("http", "https"):
            raise ValueError(
                "McpResourceSource.http: expected an http(s) URL such as http://127.0.0.1:8765/mcp, "
                f"got {quoted(redact_url(url)) if isinstance(url, str) else quoted(url)}"
            )
        for key, value in (headers or {}).items():
            # httpx would refuse it later with the value in its message: a token in an error.
            if any(c in f"{key}{value}" for c in "\r\n\x00"):
                raise ValueError(
                    f"McpResourceSource.http: header {quoted(key)} holds a line break or NUL; "
                    "a header name and value must each be one line"
                )
        return cls(
            target=url,
            description=f"URL {redact_url(url)!r}",
            fallback_name=hostname,
            name=name,
            headers=headers,
            auth=refresh_first(auth) if auth is not None else None,
            extensions=extensions,
            connect_timeout=DEFAULT_CONNECT_TIMEOUT if connect_timeout is None else connect_timeout,
            ack_timeout=ack_timeout,
            request_timeout=request_timeout,
            max_message_bytes=max_message_bytes,
            clock=clock,
            legacy=legacy,
        )

    @classmethod
    def in_memory(
        cls,
        server: Server[Any] | MCPServer,
        *,
        name: str | None = None,
        extensions: Sequence[ClientExtension] = (),
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        ack_timeout: float = DEFAULT_ACK_TIMEOUT,
        request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
        clock: Clock | None = None,
        legacy: bool = False,
    ) -> McpResourceSource:
        """An SDK server in this process (a low-level ``Server`` or an ``MCPServer``), spoken to with
        JSON-RPC messages on the SDK's memory streams: for tests, as httpx's ``MockTransport`` is,
        only the transport is fake and every rule of this class runs. Each connection runs the
        server again (``run`` on new streams); its state is what the server object holds.
        The other arguments are described on :meth:`http`.
        """
        return cls(
            target=server,
            description=f"in-memory server {type(server).__name__}",
            fallback_name="memory",
            name=name,
            extensions=extensions,
            connect_timeout=connect_timeout,
            ack_timeout=ack_timeout,
            request_timeout=request_timeout,
            max_message_bytes=None,  # no bytes cross: messages are objects
            clock=clock,
            legacy=legacy,
        )

    # -- lifecycle ------------------------------------------------------------------------------

    async def __aenter__(self) -> McpResourceSource:
        if self._stack is not None:
            raise RuntimeError(f"McpResourceSource for {self._description} is already open")
        stack = AsyncExitStack()
        try:
            tg = await enter_task_group(stack)
            # Exit order (LIFO): close the current connection cleanly, then cancel a
            # reconnect that another task may still have in flight, then join.
            stack.callback(tg.cancel_scope.cancel)
            conn = await self._connector.open(tg)
            stack.push_async_callback(self._connector.close)
        except BaseException:
            await stack.aclose()
            self._connector.forget()
            raise
        self._stack = stack
        info = conn.client.server_info
        if self._name_override is None and info is not None and info.name:
            self._name = info.name
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        stack, self._stack = self._stack, None
        try:
            if stack is not None:
                await stack.aclose()
        finally:
            self._connector.forget()

    async def _live(self) -> Connection:
        return await self._connector.live()

    def _current(self) -> Connection:
        return self._connector.connection()

    # -- identity -------------------------------------------------------------------------------

    @property
    def client(self) -> Client:
        """The current SDK client (for extensions and anything this class does not wrap).

        After a reconnect this is a new object; do not keep it across calls.
        """
        return self._current().client

    @property
    def reconnects(self) -> int:
        """How many times a dead connection was replaced (a stdio server respawned, ...)."""
        return self._connector.reconnects

    @property
    def name(self) -> str:
        """The ``name=`` given, else the server's ``serverInfo.name``, else the command/URL host."""
        return self._name

    @property
    def description(self) -> str:
        """What this source connects to, e.g. ``command 'asyncai-mcp-simple'``."""
        return self._description

    @property
    def protocol_version(self) -> str:
        return self._current().protocol_version

    @property
    def watchable(self) -> bool:
        """Whether a watch can work here: the server advertises ``capabilities.resources.subscribe``
        (MCP 2026-07-28 serves it with ``subscriptions/listen``, older versions with
        ``resources/subscribe``), or it does not but accepted the subscription it was tried with
        (:meth:`try_subscription`)."""
        return self.watchability in ("advertised", "accepted")

    @property
    def watchability(self) -> Watchability:
        """Why the server is, or is not, watchable (see :data:`~asyncai_watch.mcp.source.Watchability`)."""
        if self._current().advertises_subscribe:
            return "advertised"
        return self._trial if self._trial is not None else "untried"

    async def try_subscription(self, uri: str) -> None:
        """The capability fallback: on a server that does not advertise ``resources.subscribe``,
        subscribe to ``uri`` once (``subscriptions/listen`` or ``resources/subscribe``, as the
        server's era has it) and end it. Success makes the source :attr:`watchable`; a refusal
        raises :class:`NotWatchableError`, now and on every later try."""
        if self.watchability in ("advertised", "accepted"):
            return
        try:
            async with self.subscribe([uri]):
                pass
        except NotWatchableError:
            if self.subscription_mode != "listen" or self._connector.legacy:
                raise
            # An SDK 2.x server with only the 2025-era subscribe handler advertises subscriptions
            # to 2025-era clients alone: try that handshake once, and keep it if it carries watches.
            if not await self._try_legacy_era(uri):
                raise

    async def _try_legacy_era(self, uri: str) -> bool:
        refusal = self._refusal
        self._connector.legacy, self._trial = True, None
        self._current().dead = True  # connect again, with the 2025 handshake
        try:
            await self._live()  # first: subscribe() picks the era's method from the live connection
            async with self.subscribe([uri]):
                pass
        except (NotWatchableError, ServerError, ServerConnectionError) as exc:
            _log.debug("server %s refused subscriptions in the 2025 era too: %s", self._description, exc)
        else:
            _log.info(
                "server %s carries watches only in the 2025 era; connected with its handshake",
                self._description,
            )
            return True
        self._connector.legacy, self._trial, self._refusal = False, "refused", refusal
        self._current().dead = True  # back to the 2026-07-28 connection it had
        return False

    def _refused(self, conn: Connection, method: str, reason: str) -> NotWatchableError:
        self._trial = "refused"
        error = refused_when_tried(self.name, conn.protocol_version, method, reason)
        self._refusal = str(error)
        return error

    @property
    def subscription_mode(self) -> SubscriptionMode:
        """``"listen"`` on MCP 2026-07-28 (one ``subscriptions/listen`` carries any number of
        URIs), else ``"subscribe"`` (one ``resources/subscribe`` per URI)."""
        return subscription_mode_for(self._current().protocol_version)

    # -- requests -------------------------------------------------------------------------------

    async def _request(
        self, what: str, call: Callable[[Client], Awaitable[_T]], *, conn: Connection | None = None
    ) -> _T:
        """``call`` on the live connection (or on ``conn``, whose session a legacy subscription
        belongs to), with the request timeout and the errors mapped to ours."""
        conn = conn if conn is not None else await self._live()
        try:
            async with fail_after(self._clock, self._request_timeout):
                return await call(conn.client)
        except TimeoutError as exc:
            conn.abort()  # its listens end too, so their watches resubscribe on a new connection
            raise ServerTimeoutError(
                f"server {self.name!r} ({self._description}): {what} got no answer within "
                f"{self._request_timeout:g} s; the connection was dropped and the next call reconnects "
                "(pass a larger request_timeout if the server is only slow)"
            ) from exc
        except (MCPError, pydantic.ValidationError, RuntimeError) as exc:
            if conn.lost_to(exc):
                raise self._closed(conn, what, exc) from exc
            error = server_error(self.name, what, exc, conn.protocol_version)
            assert error is not None  # each of these is the server's answer once not a closed connection
            raise error from exc
        except (httpx2.TransportError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            conn.dead = True
            raise ServerConnectionError(
                f"server {self.name!r} ({self._description}): {what} failed: {describe_error(exc)}"
            ) from exc

    def _closed(self, conn: Connection, what: str, exc: MCPError | BaseException) -> ServerConnectionError:
        """The error for request ``what`` on a connection found closed (written once)."""
        message = exc.message if isinstance(exc, MCPError) else ""
        why = conn.closed_because() or self._sse_failure(message)
        return ServerConnectionError(
            f"server {self.name!r} ({self._description}): {what} failed: the connection is closed{why}"
        )

    def _sse_failure(self, message: str) -> str:
        """`` (why)`` for an SSE stream the SDK gave up on (an event over the cap, say), else nothing."""
        if not message.startswith("SSE stream failed"):
            return ""
        cap = (
            f"; one message may hold {self._max_message:,} bytes (max_message_bytes; --max-message-bytes)"
            if self._max_message is not None
            else ""
        )
        return f" ({message}{cap})"

    async def _pages(self, what: str, fetch: Callable[[Client, str | None], Awaitable[Any]]) -> list[Any]:
        pages: list[Any] = []
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(_MAX_PAGES):
            page = await self._request(what, functools.partial(_with_cursor, fetch, cursor))
            pages.append(page)
            cursor = page.next_cursor
            if cursor is None:
                return pages
            if cursor in seen:
                raise ServerError(self.name, what, None, f"pagination cursor {quoted(cursor)} repeated")
            seen.add(cursor)
        raise ServerError(self.name, what, None, f"more than {_MAX_PAGES} pages")

    async def _optional_pages(
        self, what: str, fetch: Callable[[Client, str | None], Awaitable[Any]]
    ) -> list[Any]:
        # A server that does not implement a list method simply has nothing of that kind.
        try:
            return await self._pages(what, fetch)
        except ServerError as exc:
            if exc.code == types.METHOD_NOT_FOUND:
                return []
            raise

    async def list_resources(self) -> list[ListedResource]:
        """Every fixed resource; ``[]`` for a server that serves no ``resources/list`` (-32601)."""
        pages = await self._optional_pages(
            "resources/list", lambda client, c: client.list_resources(cursor=c)
        )
        return listed_resources(pages)

    async def list_templates(self) -> list[ListedTemplate]:
        """Every resource template; ``[]`` for a server without a templates handler (-32601)."""
        pages = await self._optional_pages(
            "resources/templates/list", lambda client, c: client.list_resource_templates(cursor=c)
        )
        return listed_templates(pages)

    async def read(self, uri: str, *, after: tuple[str, int] | None = None) -> ReadResult:
        """Read ``uri`` from the server (never from a cache): its first content as text.

        ``after`` (an event log's ``(log_id, seq)``) goes in the request's ``_meta``, so a server
        that knows positions answers with the newer events only.
        """
        what = f"resources/read {quoted(uri)}"
        meta = {AFTER_META_KEY: {"log_id": after[0], "seq": after[1]}} if after is not None else None
        result = await self._request(
            what,
            lambda client: client.read_resource(uri, cache_mode="bypass", meta=meta),  # type: ignore[arg-type]
        )
        try:
            return read_result(uri, result)
        except UnreadableResult as exc:
            raise ServerError(self.name, what, None, str(exc)) from exc

    def subscribe(self, uris: Collection[str]) -> AbstractAsyncContextManager[Updates]:
        """One ``subscriptions/listen`` for ``uris`` (MCP 2026-07-28), or one ``resources/subscribe``
        for the one URI of a 2025-era server; see :class:`~asyncai_watch.mcp.source.ResourceSource`."""
        wanted = frozenset(uris)
        if not wanted or not all(isinstance(uri, str) and uri for uri in wanted):
            raise ValueError(
                f"McpResourceSource.subscribe: uris must be non-empty strings, got {quoted(uris)}"
            )
        if self.subscription_mode == "subscribe":
            if len(wanted) != 1:
                raise ValueError(
                    f"McpResourceSource.subscribe: server {self.name!r} speaks "
                    f"{self.protocol_version}, whose resources/subscribe takes one URI; got {len(wanted)}"
                )
            return self._legacy_subscribe(next(iter(wanted)))
        return self._listen(f"subscriptions/listen {named_uris(wanted)}", uris=wanted)

    @asynccontextmanager
    async def _legacy_subscribe(self, uri: str) -> AsyncIterator[LegacyUpdates]:
        conn = await self._live()
        advertised = conn.advertises_subscribe
        if not advertised and self._trial == "refused":
            raise NotWatchableError(self._refusal)
        what = f"resources/subscribe {quoted(uri)}"
        updates = conn.legacy.add(uri)  # before the request: an update right after it is kept
        try:
            try:
                await self._request(
                    what,
                    lambda client: client.session.send_request(
                        types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri)),
                        types.EmptyResult,
                    ),
                    conn=conn,
                )
            except ServerError as exc:
                if not advertised:
                    raise self._refused(conn, "resources/subscribe", clip(exc.server_message, 200)) from exc
                if exc.code == types.METHOD_NOT_FOUND:
                    raise advertised_but_missing(self.name, "resources/subscribe") from exc
                raise
            if not advertised:
                self._trial = "accepted"
            yield updates
        finally:
            if conn.legacy.remove(updates) and not conn.dead and not conn.closing.is_set():
                # Best effort: a session that is going away takes its subscriptions with it.
                with anyio.CancelScope(shield=True), anyio.move_on_after(self._ack_timeout):
                    try:
                        await self._request(
                            f"resources/unsubscribe {quoted(uri)}",
                            lambda client: client.session.send_request(
                                types.UnsubscribeRequest(params=types.UnsubscribeRequestParams(uri=uri)),
                                types.EmptyResult,
                            ),
                            conn=conn,
                        )
                    except ServerConnectionError:
                        pass  # the session is gone, and its subscriptions with it
                    except WatchError as exc:
                        _log.debug("unsubscribing %s failed: %s", uri, exc)

    def listen_list_changed(self) -> AbstractAsyncContextManager[AsyncIterator[None]]:
        """Open one ``subscriptions/listen`` for ``notifications/resources/list_changed``."""
        return self._listen("subscriptions/listen resourcesListChanged", uris=None)

    @asynccontextmanager
    async def _listen(self, what: str, *, uris: frozenset[str] | None) -> AsyncIterator[_Updates]:
        conn = await self._live()
        client = conn.client
        if subscription_mode_for(client.protocol_version) != "listen":
            raise protocol_too_old(self.name, client.protocol_version, MODERN_PROTOCOL_VERSION)
        resources = conn.capabilities.resources
        advertised = resources is not None and bool(
            resources.subscribe if uris is not None else resources.list_changed
        )
        if not advertised and uris is not None and self._trial == "refused":
            raise NotWatchableError(self._refusal)
        if not advertised and uris is None:
            raise not_advertised(self.name, "resources.listChanged")
        async with AsyncExitStack() as stack:
            try:
                async with fail_after(self._clock, self._ack_timeout):
                    subscription = await stack.enter_async_context(
                        client.listen(resource_subscriptions=sorted(uris))
                        if uris is not None
                        else client.listen(resources_list_changed=True)
                    )
            except TimeoutError as exc:
                raise SubscriptionLostError(
                    f"server {self.name!r}: {what} was not acknowledged within {self._ack_timeout:g} s"
                ) from exc
            except ListenNotSupportedError as exc:  # pre-checked above; kept for a version the SDK rejects
                raise protocol_too_old(
                    self.name, str(exc.negotiated_version), MODERN_PROTOCOL_VERSION
                ) from exc
            except SubscriptionLost as exc:
                raise SubscriptionLostError(
                    f"server {self.name!r}: {what} ended before it was acknowledged"
                ) from exc
            except MCPError as exc:
                if conn.lost_to(exc):
                    raise self._closed(conn, what, exc) from exc
                if not advertised:
                    raise self._refused(conn, "subscriptions/listen", clip(exc.message, 200)) from exc
                if exc.code == types.METHOD_NOT_FOUND:
                    raise advertised_but_missing(self.name, "subscriptions/listen", exc.message) from exc
                raise ServerError(self.name, what, exc.code, exc.message) from exc
            honored: frozenset[str] | None = None
            if uris is not None:
                honored = frozenset(subscription.honored.resource_subscriptions or ()) & uris
                if not advertised:
                    if not honored:
                        raise self._refused(conn, "subscriptions/listen", "it honored none of its URIs")
                    self._trial = "accepted"
            elif not subscription.honored.resources_list_changed:
                raise NotWatchableError(f"server {self.name!r} did not honor resourcesListChanged")
            yield _Updates(self, conn, uris, subscription, honored)

    async def list_tools(self) -> list[ToolInfo]:
        """Every tool the server serves (every page of ``tools/list``)."""
        pages = await self._pages("tools/list", lambda client, c: client.list_tools(cursor=c))
        return [tool_info(tool) for page in pages for tool in page.tools]

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> ToolResult:
        """Call the tool ``name``; a tool's own failure is a result with ``is_error``."""
        return tool_result(await self.call_tool_result(name, arguments))

    async def call_tool_result(self, name: str, arguments: Mapping[str, Any]) -> types.CallToolResult:
        """:meth:`call_tool`'s result as the server sent it (``asyncai-watch call --json`` prints it)."""
        what = f"tools/call {quoted(name)}"
        try:
            result = await self._request(what, lambda client: client.call_tool(name, dict(arguments)))
        except ServerError as exc:
            # MCP 2026-07-28: a result without resultType is complete. The SDK's schema requires
            # the field, so such a result comes back refused, with the body it refused.
            found = complete_without_result_type(exc.__cause__)
            if found is None:
                raise
            result = found
            if not result.is_error:  # what the SDK does for a result it accepts
                await self._request(what, lambda client: client.session.validate_tool_result(name, found))
        return result

    def __repr__(self) -> str:
        state = "open" if self._connector.current is not None else "closed"
        return f"<McpResourceSource {self._name!r} {self._description} {state}>"


async def _with_cursor(
    fetch: Callable[[Client, str | None], Awaitable[_T]], cursor: str | None, client: Client
) -> _T:
    return await fetch(client, cursor)


_NOTIFIED_META_KEY: Final = "io.github.asyncai-watch/notified"  # asyncai_watch.server.kit.NOTIFIED_META_KEY


def _resolve(command: str) -> str:
    """``command`` as given, or, when a bare name is not on ``PATH``, the script of that name
    beside the running interpreter: a virtualenv's console scripts (``asyncai-mcp-simple``)
    work without activating it."""
    if os.sep in command or shutil.which(command) is not None:
        return command
    beside = Path(sys.executable).parent / command
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else command
