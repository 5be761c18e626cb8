"""Connection ownership for :class:`~asyncai_watch.mcp.client.McpResourceSource`: one SDK client
at a time, held by an owner task, replaced when it is known to be dead.

The SDK client holds task groups open while connected, so it is held by an owner task of ours
(entered, then parked until close). That keeps a transport crash inside the SDK from cancelling
the caller, and lets the next call reconnect (respawning a stdio server). Nothing here retries on
its own: the manager's resubscribe backoff paces reconnects.

A transport is made in one function per kind: :meth:`Connector.http_transport` (Streamable
HTTP) and :meth:`Connector.stdio_transport` (our own, see :mod:`asyncai_watch.mcp.stdio`); an
in-process SDK server (:meth:`~asyncai_watch.mcp.client.McpResourceSource.in_memory`, for tests)
is spoken to on the SDK's memory streams.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from typing import Any, TextIO

import anyio
import anyio.abc
import anyio.lowlevel
import httpx2
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client import ClientExtension, Transport
from mcp.client._memory import InMemoryTransport  # the SDK's own, used by Client(server) too
from mcp.client.streamable_http import streamable_http_client
from mcp.server import Server
from mcp.server.mcpserver import MCPServer

from asyncai_watch.clock import Clock, fail_after
from asyncai_watch.errors import ServerConnectionError
from asyncai_watch.http_auth.local import local_headers
from asyncai_watch.mcp.body_cap import BodyCap
from asyncai_watch.mcp.convert import describe_error, is_connection_closed
from asyncai_watch.mcp.legacy import GetStreamWatch, Subscriptions
from asyncai_watch.mcp.stdio import StdioTransport

__all__ = ["Connection", "Connector", "Target"]

Target = StdioServerParameters | str | Server[Any] | MCPServer
"""What a source connects to: a command (stdio), an http(s) URL, or an in-process SDK server."""

_log = logging.getLogger(__name__)


class Connection:
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

    def lost_to(self, exc: BaseException) -> bool:
        """Whether ``exc`` says this connection is closed; if so it is dead, and the next call
        reconnects. The one place a closed connection is noticed."""
        if is_connection_closed(exc):
            self.dead = True
            return True
        return False

    def notifications_lost(self, reason: str) -> None:
        """The session's notifications stopped (the connection ended, or its HTTP GET stream did):
        its legacy subscriptions are lost, and the next call makes a new session."""
        self.dead = True
        self.legacy.end(reason)

    @property
    def advertises_subscribe(self) -> bool:
        resources = self.capabilities.resources
        return resources is not None and bool(resources.subscribe)

    async def close(self) -> None:
        self.closing.set()
        await self.done.wait()

    def abort(self) -> None:
        """Drop the connection at once: a server that stopped answering gets no goodbye (an HTTP
        session ``DELETE`` would wait on it too); the SDK's bounded, shielded teardown still
        ends a stdio server process."""
        self.dead = True
        self.scope.cancel()


class Connector:
    """Makes, holds and replaces the :class:`Connection` to one server."""

    def __init__(
        self,
        *,
        target: Target,
        description: str,
        headers: Mapping[str, str] | None,
        auth: httpx2.Auth | None,
        extensions: Sequence[ClientExtension],
        connect_timeout: float,
        max_message: int | None,
        clock: Clock,
        errlog: TextIO | None,
        legacy: bool,
    ) -> None:
        self.target = target
        self.description = description
        self.headers = dict(headers) if headers is not None else None
        self.auth = auth
        self.extensions = list(extensions)
        self.connect_timeout = connect_timeout
        self.max_message = max_message
        self.clock = clock
        self.errlog = errlog
        self.legacy = legacy  # the 2025 handshake only (the capability fallback may turn it on)
        self.current: Connection | None = None
        self.reconnects = 0
        self._tg: anyio.abc.TaskGroup | None = None
        self._reconnect_lock = anyio.Lock()

    async def open(self, tg: anyio.abc.TaskGroup) -> Connection:
        """The first connection, owned by a task in ``tg``."""
        self._tg = tg
        self.current = await self._start()
        return self.current

    async def close(self) -> None:
        if self.current is not None:
            await self.current.close()

    def forget(self) -> None:
        self._tg = self.current = None

    def connection(self) -> Connection:
        """The current connection, dead or alive."""
        if self.current is None:
            raise RuntimeError(f"McpResourceSource for {self.description} is not open; use `async with`")
        return self.current

    async def live(self) -> Connection:
        """The current connection, reconnecting first if the last one is known to be dead."""
        conn = self.connection()
        if not conn.dead:
            return conn
        async with self._reconnect_lock:
            if self.current is conn:  # no other task reconnected meanwhile
                await conn.close()
                self.current = await self._start()
                self.reconnects += 1
                _log.info("reconnected to MCP server %s", self.description)
            assert self.current is not None
            return self.current

    async def _start(self) -> Connection:
        assert self._tg is not None
        conn = Connection()
        try:
            async with fail_after(self.clock, self.connect_timeout):
                conn.client = await self._tg.start(self._own, conn)
        except TimeoutError as exc:
            raise ServerConnectionError(
                f"cannot connect to MCP server {self.description}: no answer to the connect "
                f"handshake within {self.connect_timeout:g} s"
            ) from exc
        conn.protocol_version = conn.client.protocol_version
        conn.capabilities = conn.client.server_capabilities
        return conn

    async def _own(self, conn: Connection, *, task_status: anyio.abc.TaskStatus[Client]) -> None:
        """Connect, hand the client to ``_start``, and hold it until closed."""
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
            _log.debug("MCP connection to %s ended with an error", self.description, exc_info=True)
        finally:
            conn.notifications_lost("the connection to the server ended")
            conn.done.set()

    async def http_transport(
        self, url: str, stack: AsyncExitStack, conn: Connection
    ) -> tuple[Transport, list[str]]:
        """The Streamable HTTP transport to ``url``, and the list its HTTP error statuses go to."""
        http_errors: list[str] = []
        # The SDK's default timeouts: 30 s to connect/write, 300 s between reads (a
        # listen stream is idle between events; modern servers ping it every 15 s).
        http_client = httpx2.AsyncClient(
            # A loopback server's token for this run, read at each connect (a restarted server has a new one).
            headers=local_headers(url, self.headers, has_auth=self.auth is not None),
            auth=self.auth,
            timeout=httpx2.Timeout(30.0, read=300.0),
            transport=GetStreamWatch(
                httpx2.AsyncHTTPTransport()
                if self.max_message is None
                else BodyCap(httpx2.AsyncHTTPTransport(), self.max_message),
                lambda: conn.notifications_lost("the server's notification stream (HTTP GET) ended"),
            ),
        )
        await stack.enter_async_context(http_client)

        async def note_status(response: httpx2.Response) -> None:
            # The SDK maps HTTP errors to a generic JSON-RPC error; keep the status to name it.
            if response.status_code >= 400:
                http_errors.append(f"HTTP {response.status_code} {response.reason_phrase}".strip())

        http_client.event_hooks["response"].append(note_status)
        transport = streamable_http_client(url, http_client=http_client, max_sse_event_size=self.max_message)
        return transport, http_errors

    def stdio_transport(self, params: StdioServerParameters, conn: Connection) -> Transport:
        """Our own stdio transport (a new one, so a new process, per connection): see mcp/stdio.py."""
        transport = conn.stdio = StdioTransport(
            params.command,
            params.args,
            env=params.env,
            cwd=params.cwd,
            errlog=self.errlog,
            max_line=self.max_message,
            # Nothing else tells a 2025-era session with no request in flight that its
            # server died: its subscriptions would stay silent for good.
            on_exit=lambda: conn.notifications_lost("the server process exited"),
        )
        return transport

    async def _open_client(self, stack: AsyncExitStack, conn: Connection) -> Client:
        http_errors: list[str] = []
        server: Transport
        if isinstance(self.target, str):
            server, http_errors = await self.http_transport(self.target, stack, conn)
        elif isinstance(self.target, StdioServerParameters):
            server = self.stdio_transport(self.target, conn)
        else:
            # In process: JSON-RPC messages on the SDK's memory streams, so only the wire is fake.
            server = InMemoryTransport(self.target)

        async def on_message(message: Any) -> None:
            # 2025-era servers announce changes on the session, not on a listen stream.
            if isinstance(message, types.ResourceUpdatedNotification):
                conn.legacy.updated(message.params.uri)
            await anyio.lowlevel.checkpoint()

        client = Client(
            server,
            mode="legacy" if self.legacy else "auto",
            cache=None,  # a cached read would hide the change just announced
            extensions=self.extensions or None,
            message_handler=on_message,
        )
        try:
            await stack.enter_async_context(client)
        except OSError as exc:
            raise ServerConnectionError(
                f"cannot start MCP server {self.description}: {exc.strerror or exc}"
            ) from exc
        except Exception as exc:
            if http_errors:
                reason = f"{http_errors[-1]} ({describe_error(exc)})"
            elif is_connection_closed(exc):
                reason = "the server closed the connection before answering (did it exit? see its stderr)"
            else:
                reason = describe_error(exc)
            raise ServerConnectionError(f"cannot connect to MCP server {self.description}: {reason}") from exc
        return client
