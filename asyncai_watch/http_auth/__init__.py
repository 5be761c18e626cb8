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

One module per concern: :mod:`.storage`, :mod:`.redirect`, :mod:`.oauth` (the provider and
refresh), :mod:`.secret` (secret files), :mod:`.options`.
"""

from .oauth import CLIENT_NAME, oauth_provider, refresh_first
from .options import AUTH_MODES, HttpAuth, add_http_auth_arguments, http_auth_from_args
from .redirect import DEFAULT_AUTHORIZATION_TIMEOUT, DEFAULT_REDIRECT_PORT, LoopbackAuthorization
from .secret import MAX_SECRET_FILE
from .storage import FileTokenStorage, MemoryTokenStorage

__all__ = [
    "AUTH_MODES",
    "CLIENT_NAME",
    "DEFAULT_AUTHORIZATION_TIMEOUT",
    "DEFAULT_REDIRECT_PORT",
    "MAX_SECRET_FILE",
    "FileTokenStorage",
    "HttpAuth",
    "LoopbackAuthorization",
    "MemoryTokenStorage",
    "add_http_auth_arguments",
    "http_auth_from_args",
    "oauth_provider",
    "refresh_first",
]
