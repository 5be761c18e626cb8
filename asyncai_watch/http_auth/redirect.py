"""The person-in-the-loop step of the authorization-code flow for a terminal (RFC 8252 loopback redirect)."""

from __future__ import annotations

import contextlib
import sys
import urllib.parse
from collections.abc import Callable
from typing import Final

import anyio
import anyio.abc
from mcp.client.auth import OAuthFlowError
from mcp.shared.auth import AuthorizationCodeResult

__all__ = ["DEFAULT_AUTHORIZATION_TIMEOUT", "DEFAULT_REDIRECT_PORT", "LoopbackAuthorization"]

DEFAULT_REDIRECT_PORT: Final = 33418
"""Where :class:`LoopbackAuthorization` waits for the browser (``http://127.0.0.1:33418/callback``)."""
DEFAULT_AUTHORIZATION_TIMEOUT: Final = 300.0
"""Seconds :class:`LoopbackAuthorization` waits for the person to finish in the browser."""
CLIENT_NAME: Final = "asyncai-watch"
_MAX_REQUEST: Final = 65536


class LoopbackAuthorization:
    """The person-in-the-loop part of the authorization-code flow, for a terminal.

    ``redirect`` starts listening on ``127.0.0.1:PORT`` and shows the authorization
    URL (``show``; default: two lines on stderr); the person opens it, signs in, and
    the browser is redirected to ``http://127.0.0.1:PORT/callback?code=...``, which
    ``callback`` receives (RFC 8252 loopback redirect) within ``timeout`` seconds.
    Pass ``redirect`` and ``callback`` to ``OAuthClientProvider`` as
    ``redirect_handler`` and ``callback_handler``. Several servers may share one: their
    authorizations take turns on the port.
    """

    def __init__(
        self,
        port: int = DEFAULT_REDIRECT_PORT,
        *,
        show: Callable[[str], None] | None = None,
        timeout: float = DEFAULT_AUTHORIZATION_TIMEOUT,
    ) -> None:
        if not 0 < port <= 65535:
            raise ValueError(f"the OAuth redirect port must be 1..65535, got {port}")
        if timeout <= 0:
            raise ValueError(f"the OAuth authorization timeout must be > 0 seconds, got {timeout!r}")
        self.port = port
        self.timeout = timeout
        self._show = show if show is not None else _show_on_stderr
        self._turn = anyio.Semaphore(1)  # taken from redirect to the end of callback
        self._listener: anyio.abc.SocketListener | None = None

    @property
    def redirect_uri(self) -> str:
        return f"http://127.0.0.1:{self.port}/callback"

    async def redirect(self, authorization_url: str) -> None:
        """Listen for the browser's return, then show ``authorization_url`` to the person."""
        await self._turn.acquire()
        try:
            multi = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=self.port)
        except BaseException as exc:
            self._turn.release()
            if isinstance(exc, OSError):
                raise OAuthFlowError(
                    f"cannot listen on 127.0.0.1:{self.port} for the OAuth redirect ({exc.strerror or exc}); "
                    "choose another port with --oauth-redirect-port"
                ) from None
            raise
        (listener,) = multi.listeners  # one address: 127.0.0.1
        assert isinstance(listener, anyio.abc.SocketListener)
        try:
            self._show(authorization_url)
        except BaseException:
            await listener.aclose()
            self._turn.release()
            raise
        self._listener = listener

    async def callback(self) -> AuthorizationCodeResult:
        """Wait for the browser's return to the redirect URI and return its code and state."""
        listener, self._listener = self._listener, None
        if listener is None:
            raise OAuthFlowError("the OAuth callback was awaited before the redirect was shown")
        try:
            with anyio.fail_after(self.timeout):
                while True:
                    async with await listener.accept() as stream:
                        result = await _serve_callback(stream)
                    if result is not None:
                        return result
        except TimeoutError:
            raise OAuthFlowError(
                f"no OAuth authorization arrived at {self.redirect_uri} within {self.timeout:g} s"
            ) from None
        finally:
            with anyio.CancelScope(shield=True):
                await listener.aclose()
            self._turn.release()


def _show_on_stderr(url: str) -> None:
    print(
        f"To authorize access to the MCP server, open this URL in a browser:\n{url}",
        file=sys.stderr,
        flush=True,
    )


async def _serve_callback(stream: anyio.abc.SocketStream) -> AuthorizationCodeResult | None:
    """Answer one browser request; the authorization result if it was the callback."""
    head = b""
    while b"\r\n\r\n" not in head and len(head) < _MAX_REQUEST:
        try:
            head += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return None
    method, _, rest = head.split(b"\r\n", 1)[0].decode("latin-1").partition(" ")
    target = rest.rsplit(" ", 1)[0]
    parts = urllib.parse.urlsplit(target)
    if method != "GET" or parts.path != "/callback":
        await _respond(stream, 404, "Not found.")
        return None
    query = urllib.parse.parse_qs(parts.query)
    first = {k: v[0] for k, v in query.items() if v}
    if "error" in first:
        await _respond(stream, 400, "Authorization failed; you can close this window.")
        detail = first.get("error_description", "")
        raise OAuthFlowError(f"the authorization server refused: {first['error']} {detail}".strip())
    if "code" not in first:
        await _respond(stream, 400, "No authorization code in this request.")
        return None
    await _respond(stream, 200, "Authorized. You can close this window.")
    return AuthorizationCodeResult(code=first["code"], state=first.get("state"), iss=first.get("iss"))


async def _respond(stream: anyio.abc.SocketStream, status: int, text: str) -> None:
    body = f"<!doctype html><title>asyncai-watch</title><p>{text}</p>\n".encode()
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}[status]
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/html; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
        await stream.send(head + body)
