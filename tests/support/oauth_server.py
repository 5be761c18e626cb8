"""The memo MCP server behind OAuth 2.1, for tests: the SDK's authorization-server routes and bearer
checks (``mcp.server.auth``) over a small in-memory provider. Run as a subprocess::

    python tests/support/oauth_server.py [--token-ttl SECONDS]

It prints ``READY http://127.0.0.1:PORT/mcp`` on stderr once it listens. The server is its own
authorization server (issuer ``http://127.0.0.1:PORT``): protected-resource and authorization-server
metadata, dynamic client registration, ``/authorize`` (which approves at once, as if the person had
clicked "allow": a redirect to the client's redirect URI with a code), ``/token`` (authorization code
with PKCE, refresh with rotation). Every MCP request needs a bearer token with scope ``memo``.

Test controls, not authenticated:

- ``POST /test/expire``: every access token issued so far expires now (as if the server's clock had
  passed their expiry) and the open listen streams end, as a server ends the streams whose tokens
  ran out. Refresh tokens stay valid.
- ``GET /test/stats``: JSON counts: ``authorize`` (authorization requests), ``code`` and ``refresh``
  (token grants), ``rejected`` (requests with an unknown or expired access token).
"""

from __future__ import annotations

import argparse
import secrets
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable

import anyio
import uvicorn
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    IdentityAssertionParams,
    ProviderTokenVerifier,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from asyncai_servers.memo.server import MemoState, build_server

SCOPE = "memo"


class Provider:
    """An in-memory authorization server that approves every authorization request."""

    def __init__(self, token_ttl: int) -> None:
        self.token_ttl = token_ttl
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.stats: Counter[str] = Counter()

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        self.clients[client_info.client_id] = client_info

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        self.stats["authorize"] += 1
        code = secrets.token_urlsafe(32)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [SCOPE],
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        code = self.codes.get(authorization_code)
        return code if code is not None and code.client_id == client.client_id else None

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        del self.codes[authorization_code.code]
        self.stats["code"] += 1
        return self._issue(client.client_id, authorization_code.scopes, authorization_code.resource)

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        token = self.refresh.get(refresh_token)
        return token if token is not None and token.client_id == client.client_id else None

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        del self.refresh[refresh_token.token]  # rotated: each refresh token works once
        self.stats["refresh"] += 1
        return self._issue(client.client_id, scopes or refresh_token.scopes, refresh_token.resource)

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            self.stats["rejected"] += 1
            return None
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)

    async def exchange_identity_assertion(
        self, client: OAuthClientInformationFull, params: IdentityAssertionParams
    ) -> OAuthToken:
        raise TokenError("unsupported_grant_type", "identity assertions are not accepted here")

    def _issue(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        access, refresh = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        self.access[access] = AccessToken(
            token=access,
            client_id=client_id,
            scopes=scopes,
            expires_at=int(time.time()) + self.token_ttl,
            resource=resource,
        )
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource
        )
        return OAuthToken(
            access_token=access, expires_in=self.token_ttl, refresh_token=refresh, scope=" ".join(scopes)
        )

    def expire_all(self) -> None:
        for token in self.access.values():
            token.expires_at = 0


class _Server(uvicorn.Server):
    on_shutdown: Callable[[], None] = staticmethod(lambda: None)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.on_shutdown()  # open listen streams would hold the shutdown forever
        await super().shutdown(sockets=sockets)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--token-ttl", type=int, default=3600, help="access token lifetime in seconds")
    args = parser.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    provider = Provider(args.token_ttl)
    memo = MemoState()

    async def expire(_request: Request) -> Response:
        provider.expire_all()
        memo.close_listeners()
        return Response(status_code=204)

    async def stats(_request: Request) -> Response:
        return JSONResponse(dict(provider.stats))

    app = build_server(memo).streamable_http_app(
        host="127.0.0.1",
        auth=AuthSettings(
            issuer_url=base,  # type: ignore[arg-type]  # pydantic parses the str
            resource_server_url=f"{base}/mcp",  # type: ignore[arg-type]
            validate_token_resource=True,
            required_scopes=[SCOPE],
            client_registration_options=ClientRegistrationOptions(
                enabled=True, valid_scopes=[SCOPE], default_scopes=[SCOPE]
            ),
        ),
        auth_server_provider=provider,
        token_verifier=ProviderTokenVerifier(provider),
        custom_starlette_routes=[
            Route("/test/expire", expire, methods=["POST"]),
            Route("/test/stats", stats, methods=["GET"]),
        ],
    )
    server = _Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    server.on_shutdown = memo.close_listeners
    # The socket already listens: a client connecting after this line is queued, not refused.
    print(f"READY {base}/mcp", file=sys.stderr, flush=True)
    anyio.run(server.serve, [sock])


if __name__ == "__main__":
    main()
