"""Authentication for Streamable HTTP MCP servers: bearer tokens and OAuth 2.1 (the SDK's client).

:meth:`McpResourceSource.http <asyncai_watch.mcp.client.McpResourceSource.http>`
takes ``headers=`` (a plain ``Authorization: Bearer ...``) or ``auth=``, an
``httpx2.Auth``; for OAuth that is the MCP SDK's ``OAuthClientProvider``
(protected-resource and authorization-server metadata discovery, dynamic client
registration or a client ID metadata document, authorization code with PKCE,
scope selection and step-up, token refresh) or its client-credentials provider.
This module adds what a program around them needs:

- :class:`FileTokenStorage` / :class:`MemoryTokenStorage`: the ``TokenStorage``
  the SDK asks the caller for.
- :class:`LoopbackAuthorization`: the interactive step of the authorization-code
  flow for a terminal (print the URL, catch the browser's redirect on 127.0.0.1).
- :func:`refresh_first`: on a 401 for a token the client still believed valid
  (it expired early, or the server's clock runs ahead), refresh it before falling
  back to a new authorization. The SDK alone starts a new authorization, which
  for the authorization-code flow means a person at a browser: a long-running
  watch must not need one just because its access token ran out.
- :func:`add_http_auth_arguments` / :func:`http_auth_from_args`: the command-line
  options (``--token-file``, ``--auth oauth|client-credentials`` and friends),
  shared by every CLI that connects to ``--mcp-http`` servers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import stat
import sys
import threading
import urllib.parse
from collections.abc import AsyncGenerator, Callable, Mapping
from pathlib import Path
from typing import Any, Final, TypeVar

import anyio
import anyio.abc
import attrs
import httpx2
from mcp.client.auth import OAuthClientProvider, OAuthFlowError, TokenStorage
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from pydantic import AnyUrl, BaseModel, ValidationError

from asyncai_watch.core.echo import quoted
from asyncai_watch.small_file import read_small_file

__all__ = [
    "AUTH_MODES",
    "DEFAULT_AUTHORIZATION_TIMEOUT",
    "DEFAULT_REDIRECT_PORT",
    "FileTokenStorage",
    "HttpAuth",
    "LoopbackAuthorization",
    "MemoryTokenStorage",
    "add_http_auth_arguments",
    "http_auth_from_args",
    "oauth_provider",
    "refresh_first",
]

AUTH_MODES: Final = ("oauth", "client-credentials")
DEFAULT_REDIRECT_PORT: Final = 33418
"""Where :class:`LoopbackAuthorization` waits for the browser (``http://127.0.0.1:33418/callback``)."""
DEFAULT_AUTHORIZATION_TIMEOUT: Final = 300.0
"""Seconds :class:`LoopbackAuthorization` waits for the person to finish in the browser."""
CLIENT_NAME: Final = "asyncai-watch"
_EXPIRED: Final = 1.0  # a token expiry time long past (0 and None mean "never expires" to the SDK)
_MAX_REQUEST: Final = 65536
MAX_SECRET_FILE: Final = 65536
"""Bytes a ``--token-file`` or ``--oauth-client-secret-file`` may hold (a JWT is a few KB)."""


# -- token storage ----------------------------------------------------------------------------------


class MemoryTokenStorage(TokenStorage):
    """Tokens and the client registration in memory: they last as long as the process."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


_file_locks: dict[str, threading.Lock] = {}
_file_locks_guard = threading.Lock()


def _lock_for(path: Path) -> threading.Lock:
    with _file_locks_guard:
        return _file_locks.setdefault(str(path), threading.Lock())


class FileTokenStorage(TokenStorage):
    """Tokens and the client registration of one server in a JSON file (mode 0600).

    One file can hold several servers (keyed by server URL), so one ``--oauth-store``
    serves every ``--mcp-http``. Writes replace the file atomically. The file holds
    secrets (refresh tokens): keep it private.
    """

    def __init__(self, path: str | os.PathLike[str], server_url: str) -> None:
        self.path = Path(path).expanduser()
        self.server_url = server_url

    def _load_all(self) -> dict[str, Any]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise OAuthFlowError(f"OAuth token store {str(self.path)!r} is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise OAuthFlowError(f"OAuth token store {str(self.path)!r} must hold a JSON object")
        return data

    def _entry(self) -> dict[str, Any]:
        with _lock_for(self.path):
            entry = self._load_all().get(self.server_url)
        return entry if isinstance(entry, dict) else {}

    def _update(self, key: str, value: dict[str, Any]) -> None:
        with _lock_for(self.path):
            data = self._load_all()
            entry = data.get(self.server_url)
            entry = dict(entry) if isinstance(entry, dict) else {}
            entry[key] = value
            data[self.server_url] = entry
            _make_private_dirs(self.path.parent)
            part = self.path.with_name(self.path.name + ".part")
            fd = _create_private(part)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as out:
                    json.dump(data, out, indent=1, sort_keys=True)
                    out.flush()
                    os.fsync(out.fileno())
                part.replace(self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    part.unlink()
                raise

    async def get_tokens(self) -> OAuthToken | None:
        raw = (await anyio.to_thread.run_sync(self._entry)).get("tokens")
        return _parse(OAuthToken, raw)

    async def set_tokens(self, tokens: OAuthToken) -> None:
        await anyio.to_thread.run_sync(
            self._update, "tokens", tokens.model_dump(mode="json", exclude_none=True)
        )

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        raw = (await anyio.to_thread.run_sync(self._entry)).get("client_info")
        return _parse(OAuthClientInformationFull, raw)

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        value = client_info.model_dump(mode="json", exclude_none=True)
        await anyio.to_thread.run_sync(self._update, "client_info", value)


def _make_private_dirs(directory: Path) -> None:
    """Create ``directory`` (and missing parents) 0700; an existing one is left as the user made it."""
    missing = [d for d in (directory, *directory.parents) if not d.exists()]
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            d.mkdir(mode=0o700)
            d.chmod(0o700)  # mkdir's mode is masked by the umask


def _create_private(part: Path) -> int:
    """A new file at ``part``, 0600, written by no one else: whatever is there is removed, never followed.

    A ``.part`` left by a killed run may be 0644 (its tokens would stay readable after the
    rename) or a symlink (writing through it would put the tokens in the link's target).
    ``O_EXCL | O_NOFOLLOW`` refuses both; we remove the leftover (``unlink`` removes a link,
    not its target) and try once more. Something recreating it in between is an error.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(part, flags, 0o600)
    except FileExistsError:
        part.unlink()
        try:
            fd = os.open(part, flags, 0o600)
        except FileExistsError:
            raise OAuthFlowError(
                f"OAuth token store: {str(part)!r} reappeared as soon as it was removed; is another "
                "program writing there? Choose another --oauth-store"
            ) from None
    os.fchmod(fd, 0o600)  # the umask may have taken bits, never added any; be exact
    return fd


_M = TypeVar("_M", bound=BaseModel)


def _parse(model: type[_M], raw: Any) -> _M | None:
    if raw is None:
        return None
    try:
        return model.model_validate(raw)
    except ValidationError:
        return None  # a record this version cannot read: start over (re-register, re-authorize)


# -- interactive authorization ---------------------------------------------------------------------


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


# -- refresh before re-authorizing ------------------------------------------------------------------


class _RefreshFirst(httpx2.Auth):
    """An OAuth provider that answers a 401 with a refresh when it holds a refresh token."""

    def __init__(self, provider: OAuthClientProvider) -> None:
        self.provider = provider
        self.requires_request_body = provider.requires_request_body
        self.requires_response_body = provider.requires_response_body

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        flow = self.provider.async_auth_flow(request)
        retried = False
        try:
            outgoing = await flow.__anext__()
            while True:
                response = yield outgoing
                if (
                    outgoing is request
                    and response.status_code == 401
                    and not retried
                    and self.provider.context.can_refresh_token()
                ):
                    # The server no longer takes a token we thought valid. The provider would
                    # start a new authorization; a refresh first needs no one at a browser.
                    retried = True
                    await flow.aclose()
                    self.provider.context.token_expiry_time = _EXPIRED
                    flow = self.provider.async_auth_flow(request)
                    outgoing = await flow.__anext__()
                    continue
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return
        finally:
            await flow.aclose()


def refresh_first(auth: httpx2.Auth) -> httpx2.Auth:
    """``auth``, refreshing on a 401 before re-authorizing when it is an SDK OAuth provider."""
    return _RefreshFirst(auth) if isinstance(auth, OAuthClientProvider) else auth


# -- command-line options ---------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class HttpAuth:
    """How to authenticate to every ``--mcp-http`` server: bearer headers and/or an OAuth provider per URL."""

    headers: Mapping[str, str] | None = None
    make_auth: Callable[[str], httpx2.Auth] | None = None
    """Builds the OAuth provider for one server URL (each server gets its own)."""
    connect_timeout: float | None = None
    """A connect may take this long (a person authorizing in a browser); ``None``: the usual bound."""

    def auth_for(self, url: str) -> httpx2.Auth | None:
        """The OAuth provider for the server at ``url``, or ``None`` without OAuth."""
        return self.make_auth(url) if self.make_auth is not None else None


def add_http_auth_arguments(parser: argparse.ArgumentParser, *, servers: str = "--mcp-http") -> None:
    """The options that say how to authenticate to Streamable HTTP servers (see :func:`http_auth_from_args`).

    ``servers`` names those servers in the help (the agent's ``--mcp-http``; the
    ``asyncai-watch`` CLI's http(s) ``--server``).
    """
    group = parser.add_argument_group(f"authentication for {servers} servers")
    group.add_argument(
        "--token-file",
        type=Path,
        metavar="PATH",
        help=f"send 'Authorization: Bearer <file contents>' to every {servers} server",
    )
    group.add_argument(
        "--auth",
        choices=AUTH_MODES,
        help=f"OAuth 2.1 for every {servers} server: 'oauth' (authorization code with PKCE: open the "
        "printed URL in a browser once; then tokens are refreshed) or 'client-credentials' "
        "(--oauth-client-id and --oauth-client-secret-file, no person involved)",
    )
    group.add_argument(
        "--oauth-store",
        type=Path,
        metavar="PATH",
        help="keep OAuth tokens and client registrations in this JSON file (mode 0600) so the next run "
        "needs no new authorization (default: in memory, for this run only)",
    )
    group.add_argument("--oauth-scope", metavar="SCOPES", help="space-separated scopes to request")
    group.add_argument(
        "--oauth-client-id",
        metavar="ID",
        help="a client ID registered with the authorization server (default: register dynamically, "
        "or --oauth-client-metadata-url)",
    )
    group.add_argument(
        "--oauth-client-secret-file", type=Path, metavar="PATH", help="the client secret of --oauth-client-id"
    )
    group.add_argument(
        "--oauth-issuer",
        metavar="URL",
        help="--auth client-credentials: the authorization server the client ID belongs to; the "
        "secret is only ever sent there",
    )
    group.add_argument(
        "--oauth-client-metadata-url",
        metavar="URL",
        help="an HTTPS URL serving this client's metadata document, used as its client ID where the "
        "authorization server supports that",
    )
    group.add_argument(
        "--oauth-redirect-port",
        type=int,
        default=DEFAULT_REDIRECT_PORT,
        metavar="PORT",
        help=f"--auth oauth: the browser is sent back to http://127.0.0.1:PORT/callback "
        f"(default {DEFAULT_REDIRECT_PORT})",
    )


def _read_secret(path: Path, option: str, warn: Callable[[str], None]) -> str:
    """The one-line secret in ``path``: a regular file of at most :data:`MAX_SECRET_FILE` bytes,
    read by :func:`~asyncai_watch.small_file.read_small_file` (a FIFO, a device such as
    ``/dev/zero`` or a directory is refused before a byte is read; a symlink is followed: a
    mounted secret, Kubernetes', is one). Errors are one line and never quote the content.
    """
    where = f"{option}: {str(path)!r}"
    try:
        raw, info = read_small_file(
            path, cap=MAX_SECRET_FILE, where=where, holds="a token file holds one token"
        )
    except FileNotFoundError as exc:
        raise ValueError(f"{option}: cannot read {str(path)!r}: {exc.strerror or exc}") from None
    try:
        value = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ValueError(f"{where} is not UTF-8 text; it must hold the secret on one line") from None
    if not value:
        raise ValueError(f"{where} is empty")
    bad = next((c for c in value if c in "\r\n\x00" or not c.isprintable()), None)
    if bad is not None:
        what = {"\r": "a line break", "\n": "a line break", "\x00": "a NUL"}.get(bad, "a control character")
        raise ValueError(
            f"{where} holds {what} inside the secret; it must be one line of printable text "
            "(a trailing newline is fine)"
        )
    if info.st_mode & 0o077:
        warn(
            f"{where} can be read by others (mode {stat.S_IMODE(info.st_mode):04o}); "
            f"it holds a secret: chmod 600 {shlex.quote(str(path))}"
        )
    return value


def _warn_on_stderr(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


def http_auth_from_args(
    args: argparse.Namespace,
    *,
    show_url: Callable[[str], None] | None = None,
    warn: Callable[[str], None] | None = None,
) -> HttpAuth:
    """The :class:`HttpAuth` the options of :func:`add_http_auth_arguments` describe.

    Raises ``ValueError`` with a one-line message for a bad combination or an unreadable file.
    ``show_url`` shows ``--auth oauth``'s authorization URL to the person (default: stderr);
    ``warn`` says that a secret file can be read by others (default: a line on stderr).
    """
    warn = warn if warn is not None else _warn_on_stderr
    mode: str | None = args.auth
    headers = None
    if args.token_file is not None:
        if mode is not None:
            raise ValueError("use either --token-file (a fixed bearer token) or --auth, not both")
        headers = {"Authorization": f"Bearer {_read_secret(args.token_file, '--token-file', warn)}"}
    oauth_only = {
        "--oauth-store": args.oauth_store,
        "--oauth-scope": args.oauth_scope,
        "--oauth-client-id": args.oauth_client_id,
        "--oauth-client-secret-file": args.oauth_client_secret_file,
        "--oauth-client-metadata-url": args.oauth_client_metadata_url,
        "--oauth-issuer": args.oauth_issuer,
    }
    if mode is None:
        given = [name for name, value in oauth_only.items() if value is not None]
        if given:
            raise ValueError(f"{', '.join(given)} need --auth oauth or --auth client-credentials")
        return HttpAuth(headers=headers)
    secret = None
    if args.oauth_client_secret_file is not None:
        if args.oauth_client_id is None:
            raise ValueError("--oauth-client-secret-file needs --oauth-client-id")
        secret = _read_secret(args.oauth_client_secret_file, "--oauth-client-secret-file", warn)
    store: Path | None = args.oauth_store
    scope: str | None = args.oauth_scope
    client_id: str | None = args.oauth_client_id

    def storage(url: str) -> TokenStorage:
        return FileTokenStorage(store, url) if store is not None else MemoryTokenStorage()

    if mode == "client-credentials":
        if client_id is None or secret is None or args.oauth_issuer is None:
            raise ValueError(
                "--auth client-credentials needs --oauth-client-id, --oauth-client-secret-file and "
                "--oauth-issuer (the authorization server the client belongs to)"
            )
        if args.oauth_client_metadata_url is not None:
            raise ValueError("--oauth-client-metadata-url is for --auth oauth, not client-credentials")
        cc_id, cc_secret, issuer = client_id, secret, str(args.oauth_issuer)

        def client_credentials(url: str) -> httpx2.Auth:
            # Imported when chosen: it loads PyJWT and cryptography, a third of the library's import.
            from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider

            return ClientCredentialsOAuthProvider(
                server_url=url,
                storage=storage(url),
                client_id=cc_id,
                client_secret=cc_secret,
                scope=scope,
                issuer=issuer,
            )

        return HttpAuth(make_auth=client_credentials)

    if not 0 < args.oauth_redirect_port <= 65535:
        raise ValueError(f"--oauth-redirect-port must be 1..65535, got {args.oauth_redirect_port}")
    if args.oauth_issuer is not None:
        raise ValueError(
            "--oauth-issuer is for --auth client-credentials (--auth oauth discovers its server)"
        )
    loopback = LoopbackAuthorization(args.oauth_redirect_port, show=show_url)
    metadata_url: str | None = args.oauth_client_metadata_url
    if metadata_url is not None and not metadata_url.startswith("https://"):
        raise ValueError(f"--oauth-client-metadata-url must be an https:// URL, got {quoted(metadata_url)}")

    def authorization_code(url: str) -> httpx2.Auth:
        return oauth_provider(
            url,
            storage=storage(url),
            redirect_uri=loopback.redirect_uri,
            redirect_handler=loopback.redirect,
            callback_handler=loopback.callback,
            scope=scope,
            client_id=client_id,
            client_secret=secret,
            client_metadata_url=metadata_url,
        )

    # The first connect waits for the person in the browser; a connect is otherwise bounded tighter.
    return HttpAuth(make_auth=authorization_code, connect_timeout=loopback.timeout + 30)


def oauth_provider(
    server_url: str,
    *,
    storage: TokenStorage,
    redirect_uri: str,
    redirect_handler: Callable[[str], Any],
    callback_handler: Callable[[], Any],
    scope: str | None = None,
    client_id: str | None = None,
    client_secret: str | None = None,
    client_metadata_url: str | None = None,
) -> OAuthClientProvider:
    """The SDK's authorization-code provider for ``server_url``, set up as this project's clients use it.

    With ``client_id`` the client is taken as pre-registered (with ``client_secret`` it
    authenticates with HTTP Basic); otherwise it registers itself (dynamic client
    registration), or uses ``client_metadata_url`` as its ID where the server supports that.
    """
    metadata = OAuthClientMetadata(
        client_name=CLIENT_NAME,
        redirect_uris=[AnyUrl(redirect_uri)],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        scope=scope,
    )
    if client_id is not None:
        storage = _PreRegistered(
            storage,
            OAuthClientInformationFull(
                client_id=client_id,
                client_secret=client_secret,
                redirect_uris=[AnyUrl(redirect_uri)],
                grant_types=["authorization_code", "refresh_token"],
                token_endpoint_auth_method="client_secret_basic" if client_secret else "none",
            ),
        )
    return OAuthClientProvider(
        server_url=server_url,
        client_metadata=metadata,
        storage=storage,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
        client_metadata_url=client_metadata_url,
    )


class _PreRegistered(TokenStorage):
    """A storage whose client registration is a given one (the SDK then skips registering)."""

    def __init__(self, inner: TokenStorage, client_info: OAuthClientInformationFull) -> None:
        self._inner = inner
        self._client_info = client_info

    async def get_tokens(self) -> OAuthToken | None:
        return await self._inner.get_tokens()

    async def set_tokens(self, tokens: OAuthToken) -> None:
        await self._inner.set_tokens(tokens)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self._client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self._client_info = client_info
