"""What enforces an :class:`~asyncai_watch.server.policy.HttpPolicy` in front of an MCP app.

- :class:`HttpGuard` (ASGI): ``Host`` and ``Origin`` against the allowlist (421 / 403), then the
  bearer token through the SDK's ``BearerAuthBackend`` (401 with ``WWW-Authenticate``), then
  the request goes on with ``scope["user"]`` set (the SDK ties each session to that principal)
  and :data:`CLIENT_KEY` naming the client (principal at address) the per-client limits count.
- :func:`guarded_protocol`: uvicorn's h11 protocol with what uvicorn lacks: a header-read
  timeout (408 naming ``--header-timeout``), a body-read timeout (408 naming ``--body-timeout``: a
  client that sends its headers and then trickles the body), and a connection cap that closes the oldest
  connection still waiting for a request before it refuses a new one (503 naming
  ``--max-connections``), so held half-open connections never fill the fd table.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from typing import ClassVar, Final

import h11
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, BearerAuthBackend
from mcp.server.auth.routes import build_resource_metadata_url, create_protected_resource_routes
from pydantic import AnyHttpUrl
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from .policy import CLIENT_KEY, HttpLimits, HttpPolicy

__all__ = ["HttpGuard", "guarded_protocol"]

_LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost", "[::1]")
_UNSPECIFIED: Final = ("0.0.0.0", "::", "[::]")


def _host_port(value: str, default_port: int) -> tuple[str, int] | None:
    text = value.strip().lower()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None
        host, rest = text[: end + 1], text[end + 1 :]
        if not rest:
            return host, default_port
        if not rest.startswith(":") or not rest[1:].isdigit():
            return None
        return host, int(rest[1:])
    host, sep, port = text.rpartition(":")
    if not sep:
        return text, default_port
    return (host, int(port)) if port.isdigit() and host else None


class HttpGuard:
    """ASGI: Host/Origin allowlist and authentication before ``app`` sees a request."""

    def __init__(self, app: ASGIApp, policy: HttpPolicy, *, host: str, port: int, path: str = "/mcp") -> None:
        self.app = app
        self.policy = policy
        self.port = port
        shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
        names = {*_LOOPBACK_NAMES} | ({shown.lower()} if shown not in _UNSPECIFIED else set())
        self.hosts: frozenset[tuple[str, int]] = frozenset({(name, port) for name in names})
        self.extra_hosts = frozenset(
            hp for entry in policy.allow_hosts if (hp := _host_port(entry, port)) is not None
        )
        origins = {f"http://{name}:{p}" for name, p in self.hosts | self.extra_hosts}
        origins |= {f"http://{name}" for name, p in self.hosts | self.extra_hosts if p == 80}
        self.origins = frozenset(origins) | policy.allow_origins
        self.backend = BearerAuthBackend(policy.verifier) if policy.verifier is not None else None
        self.metadata_app: ASGIApp | None = None
        self.metadata_path: str | None = None
        self.resource_metadata: str | None = None
        if policy.verifier is not None and policy.authorization_servers:
            resource = AnyHttpUrl(f"http://{shown}:{port}{path}")
            routes = create_protected_resource_routes(
                resource, [AnyHttpUrl(a) for a in policy.authorization_servers], list(policy.required_scopes)
            )
            self.metadata_app, self.metadata_path = routes[0].app, routes[0].path
            self.resource_metadata = str(build_resource_metadata_url(resource))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = HTTPConnection(scope).headers
        host = headers.get("host")
        # A Host without a port names an allowed host too (a DNS-rebinding page sends its own name).
        parsed = _host_port(host, self.port) if host is not None else None
        if parsed is None or (parsed not in self.hosts and parsed not in self.extra_hosts):
            await _json_rpc_error(
                send,
                421,
                f"Host header {host!r} is not served here; accepted: {', '.join(sorted(_show(self.hosts)))} "
                "(add one with --allow-host HOST[:PORT])",
            )
            return
        origin = headers.get("origin")
        if origin is not None and origin.strip().lower().rstrip("/") not in self.origins:
            await _json_rpc_error(
                send,
                403,
                f"Origin {origin!r} is not allowed (a web page may not call this server); add it with "
                "--allow-origin SCHEME://HOST[:PORT] if it should",
            )
            return
        if self.metadata_app is not None and scope["path"] == self.metadata_path:
            await self.metadata_app(scope, receive, send)
            return
        principal = "anonymous"
        if self.backend is not None:
            found = await self.backend.authenticate(HTTPConnection(scope))
            if found is None:
                await self._unauthorized(send, 401, "invalid_token", "missing or unknown bearer token")
                return
            credentials, user = found
            missing = [s for s in self.policy.required_scopes if s not in credentials.scopes]
            if missing:
                await self._unauthorized(send, 403, "insufficient_scope", f"required scope: {missing[0]}")
                return
            scope["user"], scope["auth"] = user, credentials
            principal = user.display_name if isinstance(user, AuthenticatedUser) else "bearer"
        client = scope.get("client")
        scope[CLIENT_KEY] = f"{principal}@{client[0] if client else 'unknown'}"
        await self.app(scope, receive, send)

    async def _unauthorized(self, send: Send, status: int, error: str, description: str) -> None:
        parts = [f'error="{error}"', f'error_description="{description}"']
        if self.resource_metadata is not None:
            parts.append(f'resource_metadata="{self.resource_metadata}"')
        body = json.dumps({"error": error, "error_description": description}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", ("Bearer " + ", ".join(parts)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _show(hosts: frozenset[tuple[str, int]]) -> list[str]:
    return [f"{h}:{p}" for h, p in hosts]


async def _json_rpc_error(send: Send, status: int, message: str) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _raw_response(status: int, reason: str, message: str) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": message}}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


class _GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol plus a header-read timeout and a connection cap (see the module)."""

    header_timeout: ClassVar[float]
    body_timeout: ClassVar[float]
    max_connections: ClassVar[int]
    waiting: ClassVar[OrderedDict[_GuardedH11Protocol, None]]
    """Connections waiting for a request's headers (new, or kept alive between requests), oldest first."""

    _header_timer: asyncio.TimerHandle | None = None
    _body_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            victim = next(iter(self.waiting), None)
            message = (
                f"the server holds --max-connections {self.max_connections:,} connections; "
                "this one sent no request"
            )
            if victim is None:
                self._refuse(
                    503, "Service Unavailable", message.replace("this one sent no request", "try later")
                )
                return
            victim._refuse(503, "Service Unavailable", message)
        self._await_headers()

    def _await_headers(self) -> None:
        self.waiting[self] = None
        self.waiting.move_to_end(self)
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout, self._headers_late)

    def _done_waiting(self) -> None:
        self.waiting.pop(self, None)
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE and self._header_timer is None:
            self._await_headers()  # a request begins on a kept-alive connection
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._done_waiting()
        self._watch_body()

    def _watch_body(self) -> None:
        """A body timer runs while the request's body is arriving (h11 ``SEND_BODY``), from its headers on."""
        if self.conn.their_state is h11.SEND_BODY:
            if self._body_timer is None:
                self._body_timer = self.loop.call_later(self.body_timeout, self._body_late)
        elif self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_late(self) -> None:
        self._body_timer = None
        if self.conn.their_state is not h11.SEND_BODY or self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_started:
            message = (
                f"request body not received within {self.body_timeout:g} s of its headers (--body-timeout)"
            )
            self.transport.write(_raw_response(408, "Request Timeout", message))
        self.connections.discard(self)
        self.transport.close()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            # Idle between requests (uvicorn's keep-alive timer governs it): the first to go at the cap.
            self.waiting[self] = None
            self.waiting.move_to_end(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._done_waiting()
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        super().connection_lost(exc)

    def _headers_late(self) -> None:
        self._header_timer = None
        self._refuse(
            408,
            "Request Timeout",
            f"request headers not received within {self.header_timeout:g} s (--header-timeout)",
        )

    def _refuse(self, status: int, reason: str, message: str) -> None:
        self._done_waiting()
        self.connections.discard(self)  # counted out now, not when the loop reports the close
        if self.transport.is_closing():
            return
        if self.conn.their_state is h11.IDLE and self.conn.our_state is h11.IDLE:
            self.transport.write(_raw_response(status, reason, message))
        self.transport.close()


def guarded_protocol(limits: HttpLimits) -> type[H11Protocol]:
    """A protocol class for ``uvicorn.Config(http=...)`` holding ``limits`` (its own waiting list)."""
    return type(
        "GuardedH11Protocol",
        (_GuardedH11Protocol,),
        {
            "header_timeout": limits.header_timeout,
            "body_timeout": limits.body_timeout,
            "max_connections": limits.max_connections,
            "waiting": OrderedDict(),
        },
    )
