"""The SDK's OAuth client provider as our clients set it up, and refresh before re-authorizing."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from typing import Any, Final

import httpx2
from mcp.client.auth import OAuthClientProvider, TokenStorage
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from pydantic import AnyUrl

__all__ = ["CLIENT_NAME", "oauth_provider", "refresh_first"]

CLIENT_NAME: Final = "asyncai-watch"
_EXPIRED: Final = 1.0  # a token expiry time long past (0 and None mean "never expires" to the SDK)


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
