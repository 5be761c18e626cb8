"""OAuth 2.1 resource-server token checks: an SDK ``TokenVerifier`` that asks an RFC 7662 endpoint.

A server run with ``--oauth-introspect URL`` accepts an access token when the authorization
server's introspection endpoint says it is ``active``; the answer's ``client_id``, ``scope``,
``exp``, ``sub``, ``aud`` and ``iss`` become the SDK's :class:`~mcp.server.auth.provider.AccessToken`,
so the SDK's bearer middleware and session ownership (a session answers only the principal that
opened it) work as they do for the SDK's own servers.

An active answer is cached (:class:`IntrospectionCache`: at most :data:`CACHE_ENTRIES` tokens, each
for at most :data:`CACHE_TTL` seconds and never past its ``exp``), so a client's every request does
not cost a round trip to the authorization server. A token revoked there is still accepted here
until its cache entry expires: that is the bound ``CACHE_TTL`` names.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs
import httpx2
from mcp.server.auth.provider import AccessToken, TokenVerifier

__all__ = [
    "CACHE_ENTRIES",
    "CACHE_TTL",
    "CLIENT_ID_ENV",
    "CLIENT_SECRET_ENV",
    "IntrospectionCache",
    "IntrospectionVerifier",
]

CLIENT_ID_ENV: Final = "ASYNCAI_OAUTH_CLIENT_ID"
CLIENT_SECRET_ENV: Final = "ASYNCAI_OAUTH_CLIENT_SECRET"
_MAX_ANSWER: Final = 65536  # an introspection answer is a small JSON object
_TIMEOUT: Final = 10.0
CACHE_ENTRIES: Final = 1024
"""Active introspection answers kept (the least recently used goes first)."""
CACHE_TTL: Final = 60.0
"""Seconds an active answer is trusted without asking again (less when the token's ``exp`` is sooner)."""


@attrs.define
class IntrospectionCache:
    """Active answers by token digest, each until ``min(now + ttl, exp)`` on ``clock`` (epoch seconds)."""

    entries: int = CACHE_ENTRIES
    ttl: float = CACHE_TTL
    clock: Callable[[], float] = time.time
    _kept: OrderedDict[bytes, tuple[float, AccessToken]] = attrs.field(factory=OrderedDict, init=False)

    def get(self, token: str) -> AccessToken | None:
        key = hashlib.sha256(token.encode()).digest()
        found = self._kept.get(key)
        if found is None:
            return None
        until, access = found
        if self.clock() >= until:
            del self._kept[key]
            return None
        self._kept.move_to_end(key)
        return access

    def put(self, token: str, access: AccessToken) -> None:
        until = self.clock() + self.ttl
        if access.expires_at is not None:
            until = min(until, float(access.expires_at))
        key = hashlib.sha256(token.encode()).digest()
        self._kept[key] = (until, access)
        self._kept.move_to_end(key)
        while len(self._kept) > self.entries:
            self._kept.popitem(last=False)


@attrs.frozen
class IntrospectionVerifier(TokenVerifier):
    """Ask ``url`` (RFC 7662) about each token; a token it does not call active is refused."""

    url: str
    client_id: str | None = None
    client_secret: str | None = attrs.field(default=None, repr=False)
    cache: IntrospectionCache = attrs.field(factory=IntrospectionCache, repr=False)

    @classmethod
    def from_env(cls, url: str, env: Mapping[str, str] | None = None) -> IntrospectionVerifier:
        environ = os.environ if env is None else env
        if not url.startswith(("https://", "http://")):
            raise ValueError(f"--oauth-introspect expects an http(s) URL, got {url!r}")
        return cls(url, environ.get(CLIENT_ID_ENV) or None, environ.get(CLIENT_SECRET_ENV) or None)

    async def verify_token(self, token: str) -> AccessToken | None:
        cached = self.cache.get(token)
        if cached is not None:
            return cached
        access = await self._ask(token)
        if access is not None and (access.expires_at is None or access.expires_at > self.cache.clock()):
            self.cache.put(token, access)  # an expired one the SDK's bearer check refuses anyway
        return access

    async def _ask(self, token: str) -> AccessToken | None:
        auth = httpx2.BasicAuth(self.client_id, self.client_secret or "") if self.client_id else None
        try:
            async with httpx2.AsyncClient(timeout=_TIMEOUT, auth=auth) as client:
                response = await client.post(self.url, data={"token": token})
        except httpx2.HTTPError:
            return None  # the authorization server is unreachable: nothing is let in
        if response.status_code != 200 or len(response.content) > _MAX_ANSWER:
            return None
        try:
            answer: Any = response.json()
        except ValueError:
            return None
        return _access_token(token, answer)


def _access_token(token: str, answer: Any) -> AccessToken | None:
    if not isinstance(answer, dict) or answer.get("active") is not True:
        return None
    scope = answer.get("scope")
    exp = answer.get("exp")
    aud = answer.get("aud")
    return AccessToken(
        token=token,
        client_id=str(answer.get("client_id") or "oauth"),
        scopes=scope.split() if isinstance(scope, str) else [],
        expires_at=exp if isinstance(exp, int) and not isinstance(exp, bool) else None,
        resource=aud if isinstance(aud, str) else None,
        subject=answer.get("sub") if isinstance(answer.get("sub"), str) else None,
        claims={"iss": answer["iss"]} if isinstance(answer.get("iss"), str) else None,
    )
