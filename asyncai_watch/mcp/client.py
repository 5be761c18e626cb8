"""A :class:`~asyncai_watch.mcp.source.ResourceSource` over a real MCP connection.

:class:`McpResourceSource` connects with the ``mcp`` 2.3 SDK client, to a
server started as a subprocess (stdio) or at a Streamable HTTP URL::

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

The SDK client is held by an owner task of this object, so a transport failure
inside the SDK never cancels the caller. When the connection dies (a stdio
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

import base64
import binascii
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
import anyio.abc
import httpx2
import mcp_types as types
import pydantic
from mcp import Client, MCPError, StdioServerParameters
from mcp.client import ClientExtension, Transport
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import (
    ListenNotSupportedError,
    ResourcesListChanged,
    ResourceUpdated,
    Subscription,
    SubscriptionLost,
)

from asyncai_watch._tasks import enter_task_group
from asyncai_watch.clock import Clock, SystemClock, fail_after
from asyncai_watch.core.echo import clip, quoted, redact, redact_url
from asyncai_watch.core.eventlog import AFTER_META_KEY
from asyncai_watch.core.resources import ListedResource, ListedTemplate
from asyncai_watch.errors import (
    NotWatchableError,
    ProtocolVersionError,
    ServerConnectionError,
    ServerError,
    ServerTimeoutError,
    SubscriptionLostError,
    WatchError,
)
from asyncai_watch.http_auth import refresh_first
from asyncai_watch.http_auth.local import local_headers
from asyncai_watch.mcp.body_cap import DEFAULT_MAX_MESSAGE_BYTES, MESSAGE_TOO_LARGE, BodyCap
from asyncai_watch.mcp.legacy import GetStreamWatch, LegacyUpdates, Subscriptions
from asyncai_watch.mcp.source import (
    MODERN_PROTOCOL_VERSION,
    ReadResult,
    SubscriptionMode,
    ToolInfo,
    ToolResult,
    Updates,
    Watchability,
)
from asyncai_watch.mcp.stdio import StdioTransport

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


class _Connection:
    """One SDK client, held open by an owner task until ``close()``."""

    def __init__(self) -> None:
        self.closing = anyio.Event()
        self.done = anyio.Event()
        self.scope = anyio.CancelScope()  # cancelled to drop the connection without a goodbye
        self.dead = False
        self.client: Client
        self.protocol_version = ""
        self.capabilities = types.ServerCapabilities()
        self.legacy = Subscriptions()  # resources/subscribe subscriptions (2025-era servers)
        self.stdio: StdioTransport | None = None  # its transport, on stdio (it knows why it ended)

    def closed_because(self) -> str:
        """`` (why)`` when the transport knows why the connection ended, else nothing."""
        refused = self.stdio.refused if self.stdio is not None else None
        return f" ({refused})" if refused else ""

    def notifications_lost(self, reason: str) -> None:
        """The session's notifications stopped (the connection ended, or its HTTP GET stream did):
        its legacy subscriptions are lost, and the next call makes a new session."""
        self.dead = True
        self.legacy.end(reason)

    async def close(self) -> None:
        self.closing.set()
        await self.done.wait()

    def abort(self) -> None:
        """Drop the connection at once: a server that stopped answering gets no goodbye (an HTTP
        session ``DELETE`` would wait on it too); the SDK's bounded, shielded teardown still
        ends a stdio server process."""
        self.dead = True
        self.scope.cancel()


class _Updates:
    """An open ``subscriptions/listen``: the honored URIs, then one URI per ``updated`` signal
    (``None`` per ``list_changed`` when ``uris`` is ``None``)."""

    def __init__(
        self,
        source: McpResourceSource,
        conn: _Connection,
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
                if _is_connection_closed(cause):
                    self._conn.dead = True  # the re-listen reconnects first
                what = _what(self._uris) if self._uris is not None else "resource list changes"
                raise SubscriptionLostError(
                    f"server {self._source.name!r}: subscription to {what} was lost ({cause}); "
                    "re-listen and re-read"
                ) from exc
            if self._uris is None:
                if isinstance(event, ResourcesListChanged):
                    return None
            elif isinstance(event, ResourceUpdated):
                return event.uri


def _what(uris: Collection[str]) -> str:
    """How a listen's URIs are named in errors: the URI, or the count and the first."""
    if len(uris) == 1:
        return quoted(next(iter(uris)))
    return f"{len(uris)} URIs ({quoted(min(uris))}, ...)"


def _leaf_errors(exc: BaseException) -> list[BaseException]:
    """The non-group exceptions inside ``exc`` (the SDK raises task-group errors as groups)."""
    if isinstance(exc, BaseExceptionGroup):
        leaves: list[BaseException] = []
        for inner in exc.exceptions:
            leaves.extend(_leaf_errors(inner))
        return leaves
    return [exc]


def _describe_error(exc: BaseException) -> str:
    parts = []
    for leaf in _leaf_errors(exc):
        text = str(leaf) or type(leaf).__name__
        parts.append(text if isinstance(leaf, MCPError) else f"{type(leaf).__name__}: {text}")
    # The SDK's and httpx's messages may hold the request URL (and so its secret parameters).
    return redact("; ".join(dict.fromkeys(parts)))


def _is_connection_closed(exc: BaseException) -> bool:
    return any(
        isinstance(leaf, MCPError) and leaf.code == types.CONNECTION_CLOSED for leaf in _leaf_errors(exc)
    )


class McpResourceSource:
    """One MCP server connection, as the watch machinery sees it.

    Build it with :meth:`stdio` or :meth:`http` and use it as an async
    context manager; the connection lives until the block exits.
    """

    def __init__(
        self,
        *,
        target: StdioServerParameters | str,
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
        self._target = target
        self._description = description
        self._fallback_name = fallback_name
        self._name_override = name
        self._headers = dict(headers) if headers is not None else None
        self._auth = auth
        self._extensions = list(extensions)
        self._connect_timeout = connect_timeout
        self._ack_timeout = ack_timeout
        self._request_timeout = request_timeout
        self._max_message = max_message_bytes
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._errlog = errlog
        self._legacy = legacy
        self._stack: AsyncExitStack | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._conn: _Connection | None = None
        self._reconnect_lock = anyio.Lock()
        self._reconnects = 0
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

        ``env`` is merged over the SDK's safe default environment (``PATH``,
        ``HOME``, ...). The server's stderr goes to ``errlog`` (default: ours).
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
            command=_resolve(argv[0]), args=argv[1:], env=dict(env) if env is not None else None, cwd=cwd
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

    # -- lifecycle ------------------------------------------------------------------------------

    async def __aenter__(self) -> McpResourceSource:
        if self._stack is not None:
            raise RuntimeError(f"McpResourceSource for {self._description} is already open")
        stack = AsyncExitStack()
        try:
            # The SDK client holds task groups open while connected, so it is held by an
            # owner task of ours (entered, then parked until close). That keeps a transport
            # crash inside the SDK from cancelling the caller, and lets us reconnect.
            self._tg = tg = await enter_task_group(stack)
            # Exit order (LIFO): close the current connection cleanly, then cancel a
            # reconnect that another task may still have in flight, then join.
            stack.callback(tg.cancel_scope.cancel)
            self._conn = await self._start_connection()
            stack.push_async_callback(self._close_current)
        except BaseException:
            await stack.aclose()
            self._tg = self._conn = None
            raise
        self._stack = stack
        info = self._conn.client.server_info
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
            self._tg = self._conn = None

    async def _close_current(self) -> None:
        if self._conn is not None:
            await self._conn.close()

    async def _start_connection(self) -> _Connection:
        assert self._tg is not None
        conn = _Connection()
        try:
            async with fail_after(self._clock, self._connect_timeout):
                conn.client = await self._tg.start(self._own_connection, conn)
        except TimeoutError as exc:
            raise ServerConnectionError(
                f"cannot connect to MCP server {self._description}: no answer to the connect "
                f"handshake within {self._connect_timeout:g} s"
            ) from exc
        conn.protocol_version = conn.client.protocol_version
        conn.capabilities = conn.client.server_capabilities
        return conn

    async def _own_connection(self, conn: _Connection, *, task_status: anyio.abc.TaskStatus[Client]) -> None:
        """Connect, hand the client to ``_start_connection``, and hold it until closed."""
        started = False
        try:
            with conn.scope:
                async with AsyncExitStack() as stack:
                    client = await self._open_client(stack, conn)
                    task_status.started(client)
                    started = True
                    await conn.closing.wait()
        except Exception:
            if not started:
                raise
            # The SDK's transport failed (e.g. an HTTP server went away) or its teardown
            # raised after the server died: the connection is gone, which callers learn
            # from their requests; it must not crash the caller's task.
            _log.debug("MCP connection to %s ended with an error", self._description, exc_info=True)
        finally:
            conn.notifications_lost("the connection to the server ended")
            conn.done.set()

    async def _live(self) -> _Connection:
        """The current connection, reconnecting first if the last one is known to be dead."""
        conn = self._conn
        if conn is None:
            raise RuntimeError(f"McpResourceSource for {self._description} is not open; use `async with`")
        if not conn.dead:
            return conn
        async with self._reconnect_lock:
            if self._conn is conn:  # no other task reconnected meanwhile
                await conn.close()
                self._conn = await self._start_connection()
                self._reconnects += 1
                _log.info("reconnected to MCP server %s", self._description)
            assert self._conn is not None
            return self._conn

    async def _open_client(self, stack: AsyncExitStack, conn: _Connection) -> Client:
        http_errors: list[str] = []
        transport: Transport
        if isinstance(self._target, str):
            # The SDK's default timeouts: 30 s to connect/write, 300 s between reads (a
            # listen stream is idle between events; modern servers ping it every 15 s).
            http_client = httpx2.AsyncClient(
                # A loopback server's token for this run, read at each connect (a restarted server has a new one).
                headers=local_headers(self._target, self._headers, has_auth=self._auth is not None),
                auth=self._auth,
                timeout=httpx2.Timeout(30.0, read=300.0),
                transport=GetStreamWatch(
                    httpx2.AsyncHTTPTransport()
                    if self._max_message is None
                    else BodyCap(httpx2.AsyncHTTPTransport(), self._max_message),
                    lambda: conn.notifications_lost("the server's notification stream (HTTP GET) ended"),
                ),
            )
            await stack.enter_async_context(http_client)

            async def note_status(response: httpx2.Response) -> None:
                # The SDK maps HTTP errors to a generic JSON-RPC error; keep the status to name it.
                if response.status_code >= 400:
                    http_errors.append(f"HTTP {response.status_code} {response.reason_phrase}".strip())

            http_client.event_hooks["response"].append(note_status)
            transport = streamable_http_client(
                self._target, http_client=http_client, max_sse_event_size=self._max_message
            )
        else:
            # Our own transport (a new one, so a new process, per connection): see mcp/stdio.py.
            params = self._target
            transport = conn.stdio = StdioTransport(
                params.command,
                params.args,
                env=params.env,
                cwd=params.cwd,
                errlog=self._errlog,
                max_line=self._max_message,
                # Nothing else tells a 2025-era session with no request in flight that its
                # server died: its subscriptions would stay silent for good.
                on_exit=lambda: conn.notifications_lost("the server process exited"),
            )

        async def on_message(message: Any) -> None:
            # 2025-era servers announce changes on the session, not on a listen stream.
            if isinstance(message, types.ResourceUpdatedNotification):
                conn.legacy.updated(message.params.uri)
            await anyio.lowlevel.checkpoint()

        client = Client(
            transport,
            mode="legacy" if self._legacy else "auto",
            cache=None,  # a cached read would hide the change just announced
            extensions=self._extensions or None,
            message_handler=on_message,
        )
        try:
            await stack.enter_async_context(client)
        except OSError as exc:
            raise ServerConnectionError(
                f"cannot start MCP server {self._description}: {exc.strerror or exc}"
            ) from exc
        except Exception as exc:
            if http_errors:
                reason = f"{http_errors[-1]} ({_describe_error(exc)})"
            elif _is_connection_closed(exc):
                reason = "the server closed the connection before answering (did it exit? see its stderr)"
            else:
                reason = _describe_error(exc)
            raise ServerConnectionError(
                f"cannot connect to MCP server {self._description}: {reason}"
            ) from exc
        return client

    # -- identity -------------------------------------------------------------------------------

    @property
    def client(self) -> Client:
        """The current SDK client (for extensions and anything this class does not wrap).

        After a reconnect this is a new object; do not keep it across calls.
        """
        return self._current().client

    def _current(self) -> _Connection:
        if self._conn is None:
            raise RuntimeError(f"McpResourceSource for {self._description} is not open; use `async with`")
        return self._conn

    @property
    def reconnects(self) -> int:
        """How many times a dead connection was replaced (a stdio server respawned, ...)."""
        return self._reconnects

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
        if self._advertised(self._current()):
            return "advertised"
        return self._trial if self._trial is not None else "untried"

    @staticmethod
    def _advertised(conn: _Connection) -> bool:
        resources = conn.capabilities.resources
        return resources is not None and bool(resources.subscribe)

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
            if self.subscription_mode != "listen" or self._legacy:
                raise
            # An SDK 2.x server with only the 2025-era subscribe handler advertises subscriptions
            # to 2025-era clients alone: try that handshake once, and keep it if it carries watches.
            if not await self._try_legacy_era(uri):
                raise

    async def _try_legacy_era(self, uri: str) -> bool:
        refusal = self._refusal
        self._legacy, self._trial = True, None
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
        self._legacy, self._trial, self._refusal = False, "refused", refusal
        self._current().dead = True  # back to the 2026-07-28 connection it had
        return False

    def _refused(self, conn: _Connection, method: str, reason: str) -> NotWatchableError:
        self._trial = "refused"
        self._refusal = (
            f"server {self.name!r} is not watchable: it speaks MCP {conn.protocol_version} and does not "
            f"advertise resources.subscribe, and refused the {method} it was tried with ({reason}); "
            "its tools and reads still work (docs/existing-servers.md says what makes a server watchable)"
        )
        return NotWatchableError(self._refusal)

    @property
    def subscription_mode(self) -> SubscriptionMode:
        """``"listen"`` on MCP 2026-07-28 (one ``subscriptions/listen`` carries any number of
        URIs), else ``"subscribe"`` (one ``resources/subscribe`` per URI)."""
        return "listen" if self._current().protocol_version == MODERN_PROTOCOL_VERSION else "subscribe"

    # -- requests -------------------------------------------------------------------------------

    async def _request(
        self, what: str, call: Callable[[Client], Awaitable[_T]], *, conn: _Connection | None = None
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
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                conn.dead = True  # the next call reconnects
                why = conn.closed_because() or self._sse_failure(exc.message)
                raise ServerConnectionError(
                    f"server {self.name!r} ({self._description}): {what} failed: the connection is closed{why}"
                ) from exc
            if exc.code == MESSAGE_TOO_LARGE:  # made by our transport: the server's answer was dropped
                raise ServerError(self.name, what, None, exc.message) from exc
            raise ServerError(self.name, what, exc.code, exc.message) from exc
        except pydantic.ValidationError as exc:
            raise ServerError(
                self.name, what, None, f"its result is not valid MCP {conn.protocol_version}: {_invalid(exc)}"
            ) from exc
        except RuntimeError as exc:
            # The SDK refused a result it did get: structured content that misses the tool's
            # output schema, an input_required exchange that never ends.
            first_line = (str(exc) or type(exc).__name__).splitlines()[0]
            raise ServerError(self.name, what, None, f"its result was refused: {first_line}") from exc
        except (httpx2.TransportError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            conn.dead = True
            raise ServerConnectionError(
                f"server {self.name!r} ({self._description}): {what} failed: {_describe_error(exc)}"
            ) from exc

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
        return [
            ListedResource(
                uri=r.uri,
                name=r.name,
                description=r.description or "",
                mime_type=r.mime_type,
                never_notified=_never_notified(r.meta),
            )
            for page in pages
            for r in page.resources
        ]

    async def list_templates(self) -> list[ListedTemplate]:
        """Every resource template; ``[]`` for a server without a templates handler (-32601)."""
        pages = await self._optional_pages(
            "resources/templates/list", lambda client, c: client.list_resource_templates(cursor=c)
        )
        return [
            ListedTemplate(
                uri_template=t.uri_template,
                name=t.name,
                description=t.description or "",
                mime_type=t.mime_type,
                never_notified=_never_notified(t.meta),
            )
            for page in pages
            for t in page.resource_templates
        ]

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
        if not result.contents:
            raise ServerError(self.name, what, None, "the server returned no contents")
        content = result.contents[0]
        if isinstance(content, types.TextResourceContents):
            return ReadResult(uri=content.uri or uri, text=content.text, mime_type=content.mime_type)
        try:
            text = base64.b64decode(content.blob, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise ServerError(
                self.name,
                what,
                None,
                f"the content is a binary blob ({content.mime_type or 'no mimeType'}), not UTF-8 text",
            ) from exc
        return ReadResult(uri=content.uri or uri, text=text, mime_type=content.mime_type)

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
        return self._listen(f"subscriptions/listen {_what(wanted)}", uris=wanted)

    @asynccontextmanager
    async def _legacy_subscribe(self, uri: str) -> AsyncIterator[LegacyUpdates]:
        conn = await self._live()
        advertised = self._advertised(conn)
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
                    raise NotWatchableError(
                        f"server {self.name!r} is not watchable: it advertises resources.subscribe but "
                        f"answers resources/subscribe with 'Method not found'; docs/server-contract.md "
                        "says what makes a server watchable"
                    ) from exc
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
        if client.protocol_version != MODERN_PROTOCOL_VERSION:
            raise ProtocolVersionError(
                f"server {self.name!r} speaks {client.protocol_version}; "
                f"watches need MCP {MODERN_PROTOCOL_VERSION} (subscriptions/listen)"
            )
        resources = conn.capabilities.resources
        advertised = resources is not None and bool(
            resources.subscribe if uris is not None else resources.list_changed
        )
        if not advertised and uris is not None and self._trial == "refused":
            raise NotWatchableError(self._refusal)
        if not advertised and uris is None:
            raise NotWatchableError(
                f"server {self.name!r} is not watchable: it does not advertise "
                + ("resources.subscribe" if uris is not None else "resources.listChanged")
                + " (docs/server-contract.md says what makes a server watchable)"
            )
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
                raise ProtocolVersionError(
                    f"server {self.name!r} speaks {exc.negotiated_version}; "
                    f"watches need MCP {MODERN_PROTOCOL_VERSION} (subscriptions/listen)"
                ) from exc
            except SubscriptionLost as exc:
                raise SubscriptionLostError(
                    f"server {self.name!r}: {what} ended before it was acknowledged"
                ) from exc
            except MCPError as exc:
                if exc.code == types.CONNECTION_CLOSED:
                    conn.dead = True  # the next call reconnects
                    raise ServerConnectionError(
                        f"server {self.name!r} ({self._description}): {what} failed: the connection is closed"
                    ) from exc
                if not advertised:
                    raise self._refused(conn, "subscriptions/listen", clip(exc.message, 200)) from exc
                if exc.code == types.METHOD_NOT_FOUND:
                    raise NotWatchableError(
                        f"server {self.name!r} is not watchable: it advertises resources.subscribe but "
                        f"answers subscriptions/listen with 'Method not found' ({exc.message}); "
                        "docs/server-contract.md says what makes a server watchable"
                    ) from exc
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
        pages = await self._pages("tools/list", lambda client, c: client.list_tools(cursor=c))
        return [_tool_info(tool) for page in pages for tool in page.tools]

    async def call_tool(self, name: str, arguments: Mapping[str, Any]) -> ToolResult:
        return tool_result(await self.call_tool_result(name, arguments))

    async def call_tool_result(self, name: str, arguments: Mapping[str, Any]) -> types.CallToolResult:
        """:meth:`call_tool`'s result as the server sent it (``asyncai-watch call --json`` prints it)."""
        what = f"tools/call {quoted(name)}"
        try:
            result = await self._request(what, lambda client: client.call_tool(name, dict(arguments)))
        except ServerError as exc:
            # MCP 2026-07-28: a result without resultType is complete. The SDK's schema requires
            # the field, so such a result comes back refused, with the body it refused.
            found = _complete_without_result_type(exc.__cause__)
            if found is None:
                raise
            result = found
            if not result.is_error:  # what the SDK does for a result it accepts
                await self._request(what, lambda client: client.session.validate_tool_result(name, found))
        return result

    def __repr__(self) -> str:
        state = "open" if self._conn is not None else "closed"
        return f"<McpResourceSource {self._name!r} {self._description} {state}>"


async def _with_cursor(
    fetch: Callable[[Client, str | None], Awaitable[_T]], cursor: str | None, client: Client
) -> _T:
    return await fetch(client, cursor)


_NOTIFIED_META_KEY: Final = "io.github.asyncai-watch/notified"  # asyncai_watch.server.kit.NOTIFIED_META_KEY


def _never_notified(meta: Mapping[str, Any] | None) -> bool:
    """Whether a listed entry's ``_meta`` says no change of it was announced yet."""
    return meta is not None and meta.get(_NOTIFIED_META_KEY) is False


def tool_result(result: types.CallToolResult) -> ToolResult:
    """A ``tools/call`` result as :class:`ToolResult`: its text content joined, its structured content."""
    return ToolResult(
        text="\n".join(_content_text(block) for block in result.content),
        structured=result.structured_content,
        is_error=bool(result.is_error),
    )


def _invalid(exc: pydantic.ValidationError) -> str:
    """What made a result invalid, briefly: each field and why (the body itself is not shown)."""
    found = [
        f"{'.'.join(str(part) for part in err['loc']) or 'result'}: {err['msg']}" for err in exc.errors()
    ]
    shown = list(dict.fromkeys(found))
    return "; ".join(shown[:4]) + (f"; +{len(shown) - 4} more" if len(shown) > 4 else "")


def _complete_without_result_type(exc: BaseException | None) -> types.CallToolResult | None:
    """The tool result the SDK refused in ``exc`` when a missing ``resultType`` was its only fault."""
    if not isinstance(exc, pydantic.ValidationError):
        return None
    errors = exc.errors()
    if not errors or any(err["type"] != "missing" or err["loc"][-1:] != ("resultType",) for err in errors):
        return None
    body = errors[0]["input"]
    if not isinstance(body, dict):
        return None
    try:
        return types.CallToolResult.model_validate({**body, "resultType": "complete"}, by_name=False)
    except pydantic.ValidationError:
        return None


def _tool_info(tool: types.Tool) -> ToolInfo:
    notes = tool.annotations
    read_only = notes is not None and notes.read_only_hint is True
    # MCP: destructiveHint defaults to true and only means something for a tool that is not read-only.
    destructive = not read_only and (notes is None or notes.destructive_hint is not False)
    return ToolInfo(
        name=tool.name,
        description=tool.description or "",
        input_schema=dict(tool.input_schema),
        read_only=read_only,
        destructive=destructive,
    )


def _content_text(block: types.ContentBlock) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.EmbeddedResource) and isinstance(block.resource, types.TextResourceContents):
        return block.resource.text
    if isinstance(block, types.ResourceLink):
        return f"[resource {block.uri}]"
    return f"[{block.type}]"


def _resolve(command: str) -> str:
    """``command`` as given, or, when a bare name is not on ``PATH``, the script of that name
    beside the running interpreter: a virtualenv's console scripts (``asyncai-mcp-simple``)
    work without activating it."""
    if os.sep in command or shutil.which(command) is not None:
        return command
    beside = Path(sys.executable).parent / command
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else command
