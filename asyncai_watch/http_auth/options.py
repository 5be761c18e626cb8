"""The command-line options that say how a client authenticates to Streamable HTTP servers."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

import attrs
import httpx2
from mcp.client.auth import TokenStorage

from asyncai_watch.core.echo import quoted

from .oauth import oauth_provider
from .redirect import DEFAULT_REDIRECT_PORT, LoopbackAuthorization
from .secret import read_secret, warn_on_stderr
from .storage import FileTokenStorage, MemoryTokenStorage

__all__ = ["AUTH_MODES", "HttpAuth", "add_http_auth_arguments", "http_auth_from_args"]

AUTH_MODES: Final = ("oauth", "client-credentials")


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
    warn = warn if warn is not None else warn_on_stderr
    mode: str | None = args.auth
    headers = None
    if args.token_file is not None:
        if mode is not None:
            raise ValueError("use either --token-file (a fixed bearer token) or --auth, not both")
        headers = {"Authorization": f"Bearer {read_secret(args.token_file, '--token-file', warn)}"}
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
        secret = read_secret(args.oauth_client_secret_file, "--oauth-client-secret-file", warn)
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
