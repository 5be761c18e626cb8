"""One security policy for every Streamable HTTP endpoint we serve (docs/http-security.md).

An :class:`HttpPolicy` says who may call (bearer tokens from a file or the environment, a
server's own credentials, or OAuth 2.1 access tokens checked at an introspection endpoint:
each is an SDK :class:`~mcp.server.auth.provider.TokenVerifier`), which ``Host`` and
``Origin`` headers are accepted, and the limits (:class:`HttpLimits`). Every server's CLI
gets the same options from :func:`add_http_arguments` and the policy from
:func:`http_policy_from_args`; :func:`~asyncai_watch.server.http.serve_http` enforces it
(:mod:`.guard`).

Secure by default: a bind beyond loopback without authentication is refused (one line naming
the way to add a token) unless ``--insecure-no-auth`` says so; a loopback bind without a token of
its own generates one for the run and publishes it to this user's clients
(:mod:`asyncai_watch.http_auth.local`), unless ``--insecure-no-auth`` says not to authenticate; Host and Origin are checked on
every bind, against the bound address and port plus the loopback names on that port only.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import ipaddress
import os
import resource
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

import attrs

if TYPE_CHECKING:  # kept light: every server's CLI builds its parser from this module
    from mcp.server.auth.provider import AccessToken, TokenVerifier

__all__ = [
    "CLIENT_KEY",
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_HEADER_TIMEOUT",
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_LISTENS",
    "DEFAULT_MAX_LISTENS_PER_CLIENT",
    "DEFAULT_MAX_TOTAL_URIS",
    "DEFAULT_REPLAY_BYTES",
    "DEFAULT_REPLAY_EVENTS",
    "DEFAULT_SESSIONS",
    "DEFAULT_SESSIONS_PER_CLIENT",
    "DEFAULT_SESSION_IDLE",
    "TOKEN_ENV",
    "HttpLimits",
    "HttpPolicy",
    "ListenLimited",
    "PolicyError",
    "StaticTokens",
    "add_http_arguments",
    "bind_from_args",
    "check_bind",
    "client_key",
    "default_max_connections",
    "http_policy_from_args",
    "is_loopback",
    "parse_host_port",
    "stdio_misuse",
]

TOKEN_ENV: Final = "ASYNCAI_HTTP_TOKEN"
"""The environment variable every server reads its bearer token from (``--token-file`` wins)."""

DEFAULT_HEADER_TIMEOUT: Final = 10.0
"""Seconds a connection may take to send a request's headers (slowloris)."""
DEFAULT_BODY_TIMEOUT: Final = 30.0
"""Seconds a request may take to send its body once its headers are in (a trickled body)."""
DEFAULT_IDLE_TIMEOUT: Final = 5
"""Seconds a kept-alive connection may sit between requests (uvicorn's default)."""
DEFAULT_MAX_LISTENS: Final = 1024
"""Listen streams open at once, over all clients (the SDK's default). A client needs one per
connection (two for a moment while it replaces one), however many URIs it watches."""
DEFAULT_MAX_LISTENS_PER_CLIENT: Final = 16
"""Listen streams one client (one principal at one address) may hold open."""
DEFAULT_MAX_TOTAL_URIS: Final = 1_000_000
"""URI subscriptions over every listen and session (about 190 MB at 190 bytes each)."""
DEFAULT_SESSIONS: Final = 1000
"""2025-era Streamable HTTP sessions open at once, over all clients (the SDK allows 10,000)."""
DEFAULT_SESSIONS_PER_CLIENT: Final = 64
"""...and from one client (one principal at one address)."""
DEFAULT_SESSION_IDLE: Final = 600.0
"""Seconds a session with no request in flight (and no open GET stream) lives on. An agent between
turns keeps its GET stream open, so it is not idle; a session dropped anyway answers 404 and the
client starts a new one (the SDK's default is 30 minutes)."""
DEFAULT_REPLAY_EVENTS: Final = 512
"""SSE events kept for replay per session (2025-era resumption)."""
DEFAULT_REPLAY_BYTES: Final = 4 * 1024 * 1024
"""...and serialized bytes per session (one files read can be 4 MiB)."""


CLIENT_KEY: Final = "asyncai.client"
"""The ASGI scope key naming the caller (``principal@address``) for per-client limits."""


def client_key(scope: Mapping[str, object] | None) -> str:
    """Who a request came from, as the HTTP guard named it (``local`` when there is no HTTP request)."""
    if scope is None:
        return "local"
    key = scope.get(CLIENT_KEY)
    if isinstance(key, str):
        return key
    client = scope.get("client")
    return f"anonymous@{client[0]}" if isinstance(client, tuple | list) and client else "local"


class ListenLimited(Protocol):
    """What takes the listen limits: a :class:`~asyncai_watch.server.subscriptions.SubscriptionRegistry`
    (which imports this module for its defaults, so this one names no registry)."""

    def set_limits(self, *, max_listens: int, max_listens_per_client: int, max_total_uris: int) -> None: ...


class PolicyError(ValueError):
    """A policy option is not acceptable; the message names the option and what it accepts."""


def default_max_connections() -> int:
    """Half the soft ``RLIMIT_NOFILE`` (at most 1,000): the cap stays well below the fd table."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1000
    return max(16, min(1000, soft // 2))


@attrs.frozen(kw_only=True)
class HttpLimits:
    """What one HTTP server holds at most; each refusal names its option."""

    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    idle_timeout: int = DEFAULT_IDLE_TIMEOUT
    max_connections: int = attrs.field(factory=default_max_connections)
    max_sessions: int = DEFAULT_SESSIONS
    max_sessions_per_client: int = DEFAULT_SESSIONS_PER_CLIENT
    session_idle: float = DEFAULT_SESSION_IDLE
    max_listens: int = DEFAULT_MAX_LISTENS
    max_listens_per_client: int = DEFAULT_MAX_LISTENS_PER_CLIENT
    max_total_uris: int = DEFAULT_MAX_TOTAL_URIS
    replay_events: int = DEFAULT_REPLAY_EVENTS
    replay_bytes: int = DEFAULT_REPLAY_BYTES

    def apply_to(self, registry: ListenLimited) -> None:
        """Give a server's subscription registry the listen limits."""
        registry.set_limits(
            max_listens=self.max_listens,
            max_listens_per_client=self.max_listens_per_client,
            max_total_uris=self.max_total_uris,
        )


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


@attrs.frozen
class StaticTokens:
    """Fixed bearer tokens: every holder of one is the same principal (``client_id`` = ``name``)."""

    tokens: Sequence[str] = attrs.field(repr=False)
    name: str = "bearer"
    _digests: frozenset[bytes] = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_digests", frozenset(_digest(t) for t in self.tokens))

    async def verify_token(self, token: str) -> AccessToken | None:
        """The SDK's ``TokenVerifier`` protocol."""
        from mcp.server.auth.provider import AccessToken

        # Compared by digest: the timing says nothing about how much of a guess matches.
        given = _digest(token)
        if not any(hmac.compare_digest(given, known) for known in self._digests):
            return None
        return AccessToken(token=token, client_id=self.name, scopes=[])


@attrs.frozen(kw_only=True)
class HttpPolicy:
    """Who may call an HTTP endpoint, from where, and how much it holds."""

    verifier: TokenVerifier | None = None
    """Checks a request's bearer token; None: a token generated for the run (see
    :func:`~asyncai_watch.server.http.serve_http`), or none at all with :attr:`insecure_no_auth`."""
    auth_hint: str = f"--token-file PATH or ${TOKEN_ENV}"
    """How this server's user adds authentication (the refusal line names it)."""
    insecure_no_auth: bool = False
    """Serve without authentication, on any bind (the user said so by name)."""
    allow_hosts: frozenset[str] = frozenset()
    """Extra ``Host`` values (``host`` or ``host:port``, lower case)."""
    allow_origins: frozenset[str] = frozenset()
    """Extra ``Origin`` values (``scheme://host[:port]``, lower case)."""
    resource_metadata_url: str | None = None
    """OAuth: the protected-resource metadata URL a 401 points at (RFC 9728)."""
    authorization_servers: tuple[str, ...] = ()
    required_scopes: tuple[str, ...] = ()
    limits: HttpLimits = attrs.field(factory=HttpLimits)

    def refusal(self, host: str, address: str, prog: str) -> str | None:
        """The one line a server prints instead of serving ``host`` without authentication, or None."""
        if self.verifier is not None or is_loopback(host):
            return None
        if self.insecure_no_auth:
            return None
        return (
            f"{prog}: refusing to serve HTTP on {address} without authentication (anyone who can reach it "
            f"could call every tool); add a token with {self.auth_hint}, bind 127.0.0.1, "
            "or pass --insecure-no-auth"
        )

    def warning(self, host: str, address: str, prog: str) -> str | None:
        """The start-up warning for an unauthenticated bind beyond loopback, or None."""
        if self.verifier is None and self.insecure_no_auth:
            who = (
                "any program of any user on this machine" if is_loopback(host) else "anyone who can reach it"
            )
            return (
                f"{prog}: WARNING: serving HTTP on {address} with NO authentication (--insecure-no-auth): "
                f"{who} can call every tool"
            )
        return None


def check_bind(policy: HttpPolicy, host: str, address: str, prog: str) -> None:
    """Refuse (one line on stderr, exit 2) or warn about an unauthenticated bind beyond loopback."""
    refusal = policy.refusal(host, address, prog)
    if refusal is not None:
        print(refusal, file=sys.stderr, flush=True)
        raise SystemExit(2)
    warning = policy.warning(host, address, prog)
    if warning is not None:
        print(warning, file=sys.stderr, flush=True)


def parse_host_port(value: str) -> tuple[str, int]:
    """Parse ``HOST:PORT`` (``[::1]:8080`` for IPv6); raise ValueError naming the accepted form."""
    host, sep, port_text = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(
            f"--http expects HOST:PORT (e.g. 127.0.0.1:8765, port 0 = any free port), got {value!r}"
        )
    return host, int(port_text)


def bind_from_args(args: argparse.Namespace, prog: str) -> tuple[HttpPolicy, tuple[str, int] | None]:
    """A server's HTTP policy and ``--http`` bind (``None``: stdio) from its parsed arguments.

    An authentication option without ``--http``, a bad policy option or a bad ``HOST:PORT`` raises
    :class:`PolicyError` (one line, for ``parser.error``); a bare non-loopback bind exits 2
    (:func:`check_bind`)."""
    if args.http is None and (misuse := stdio_misuse(args)) is not None:
        raise PolicyError(misuse)
    policy = http_policy_from_args(args)
    if args.http is None:
        return policy, None
    try:
        bind = parse_host_port(args.http)
    except ValueError as exc:
        raise PolicyError(str(exc)) from None
    check_bind(policy, bind[0], args.http, prog)
    return policy, bind


def stdio_misuse(args: argparse.Namespace) -> str | None:
    """The error for an authentication option given without ``--http`` (stdio has no authentication)."""
    if getattr(args, "http_token_file", None) is not None or getattr(args, "oauth_introspect", None):
        return "--token-file and --oauth-introspect protect --http; stdio has no authentication"
    return None


def is_loopback(host: str) -> bool:
    """Whether a bind address is loopback only (127.0.0.0/8, ::1, localhost)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def add_http_arguments(parser: argparse.ArgumentParser, *, tokens: bool = True) -> None:
    """The HTTP policy options every server shares (``tokens=False``: the server authenticates its own way)."""
    group = parser.add_argument_group("HTTP security (with --http; see docs/http-security.md)")
    if tokens:
        group.add_argument(
            "--token-file",
            dest="http_token_file",
            type=Path,
            metavar="PATH",
            help=f"require 'Authorization: Bearer TOKEN' on every HTTP request, TOKEN being this file's one line "
            f"(default: ${TOKEN_ENV}; neither: on loopback a token generated for the run, in your runtime directory; "
            "beyond loopback refused)",
        )
        group.add_argument(
            "--oauth-introspect",
            metavar="URL",
            help="accept OAuth 2.1 access tokens that this RFC 7662 introspection endpoint says are active "
            "(client credentials from $ASYNCAI_OAUTH_CLIENT_ID / $ASYNCAI_OAUTH_CLIENT_SECRET, if it needs them)",
        )
        group.add_argument(
            "--oauth-issuer",
            metavar="URL",
            help="with --oauth-introspect: the authorization server a 401 points clients at "
            "(served as /.well-known/oauth-protected-resource)",
        )
        group.add_argument(
            "--oauth-scope",
            action="append",
            default=[],
            metavar="SCOPE",
            help="with --oauth-introspect: a scope every token must carry (repeatable)",
        )
    group.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="serve WITHOUT authentication, on any address (by default a loopback server with no token of its "
        "own generates one and publishes it to your clients in a private runtime directory; a non-loopback one "
        "is refused); for clients that cannot send a header",
    )
    group.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="HOST[:PORT]",
        help="also accept this Host header (repeatable; default: the bound address and the loopback names "
        "on the bound port)",
    )
    group.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="also accept this Origin header, e.g. https://app.example (repeatable; default: the allowed "
        "hosts over http on the bound port; requests without Origin are fine)",
    )
    base = HttpLimits()
    group.add_argument(
        "--header-timeout",
        type=float,
        default=base.header_timeout,
        metavar="SECONDS",
        help=f"close a connection that has not sent a request's headers within this (default {base.header_timeout:g})",
    )
    group.add_argument(
        "--body-timeout",
        type=float,
        default=base.body_timeout,
        metavar="SECONDS",
        help="close a connection whose request body has not all arrived this long after its headers "
        f"(default {base.body_timeout:g})",
    )
    group.add_argument(
        "--idle-timeout",
        type=int,
        default=base.idle_timeout,
        metavar="SECONDS",
        help=f"close a kept-alive connection idle this long between requests (default {base.idle_timeout})",
    )
    group.add_argument(
        "--max-connections",
        type=int,
        metavar="N",
        help="connections at once; beyond it the oldest one still waiting for its request is closed, "
        "else the new one (default: half of ulimit -n, at most 1,000)",
    )
    group.add_argument(
        "--max-sessions",
        type=int,
        default=base.max_sessions,
        metavar="N",
        help=f"2025-era HTTP sessions at once (default {base.max_sessions:,})",
    )
    group.add_argument(
        "--max-sessions-per-client",
        type=int,
        default=base.max_sessions_per_client,
        metavar="N",
        help=f"...from one client: one principal at one address (default {base.max_sessions_per_client})",
    )
    group.add_argument(
        "--session-idle",
        type=float,
        default=base.session_idle,
        metavar="SECONDS",
        help=f"end a session with no request in flight for this long (default {base.session_idle:g})",
    )
    group.add_argument(
        "--max-listens",
        type=int,
        default=base.max_listens,
        metavar="N",
        help=f"subscriptions/listen streams open at once (default {base.max_listens:,})",
    )
    group.add_argument(
        "--max-listens-per-client",
        type=int,
        default=base.max_listens_per_client,
        metavar="N",
        help=f"...from one client (default {base.max_listens_per_client})",
    )
    group.add_argument(
        "--max-total-uris",
        type=int,
        default=base.max_total_uris,
        metavar="N",
        help=f"URI subscriptions over every listen and session (default {base.max_total_uris:,})",
    )
    group.add_argument(
        "--replay-events",
        type=int,
        default=base.replay_events,
        metavar="N",
        help=f"SSE events kept per session for 2025-era clients that resume a stream (default {base.replay_events})",
    )
    group.add_argument(
        "--replay-bytes",
        type=int,
        default=base.replay_bytes,
        metavar="N",
        help=f"...and bytes kept per session (default {base.replay_bytes:,})",
    )


_POSITIVE: Final = (
    "header_timeout",
    "body_timeout",
    "idle_timeout",
    "max_connections",
    "max_sessions",
    "max_sessions_per_client",
    "session_idle",
    "max_listens",
    "max_listens_per_client",
    "max_total_uris",
    "replay_events",
    "replay_bytes",
)


def _limits(args: argparse.Namespace) -> HttpLimits:
    values: dict[str, float | int] = {}
    for name in _POSITIVE:
        value = getattr(args, name)
        if value is None:
            continue
        if not 0 < value < float("inf"):
            raise PolicyError(f"--{name.replace('_', '-')} must be > 0, got {value}")
        values[name] = value
    return HttpLimits(**values)  # type: ignore[arg-type]


def _host_entry(value: str) -> str:
    text = value.strip().lower()
    if not text or "/" in text or " " in text:
        raise PolicyError(f"--allow-host expects HOST or HOST:PORT (e.g. mcp.example:8765), got {value!r}")
    return text


def _origin_entry(value: str) -> str:
    text = value.strip().lower().rstrip("/")
    scheme, sep, rest = text.partition("://")
    if not sep or scheme not in ("http", "https") or not rest or "/" in rest:
        raise PolicyError(
            f"--allow-origin expects SCHEME://HOST[:PORT] (e.g. https://app.example), got {value!r}"
        )
    return text


def http_policy_from_args(
    args: argparse.Namespace,
    *,
    env: Mapping[str, str] | None = None,
    verifier: TokenVerifier | None = None,
    auth_hint: str | None = None,
    extra_token_env: str | None = None,
) -> HttpPolicy:
    """The policy :func:`add_http_arguments`' options describe.

    ``verifier``: the server's own authentication (the switchboard's credentials), for a
    parser made with ``tokens=False``. ``extra_token_env``: an older variable also read.
    """
    environ = os.environ if env is None else env
    oauth: dict[str, object] = {}
    if not getattr(args, "oauth_introspect", None) and (
        getattr(args, "oauth_issuer", None) or getattr(args, "oauth_scope", None)
    ):
        raise PolicyError("--oauth-issuer and --oauth-scope need --oauth-introspect URL")
    if getattr(args, "http_token_file", None) is not None or getattr(args, "oauth_introspect", None):
        verifier, oauth = _token_verifier(args)
    elif hasattr(args, "http_token_file"):
        token = environ.get(TOKEN_ENV) or (environ.get(extra_token_env) if extra_token_env else None)
        if token is not None and token.strip():
            verifier = StaticTokens([token.strip()])
    return HttpPolicy(
        verifier=verifier,
        auth_hint=auth_hint or HttpPolicy().auth_hint,
        insecure_no_auth=args.insecure_no_auth,
        allow_hosts=frozenset(_host_entry(h) for h in args.allow_host),
        allow_origins=frozenset(_origin_entry(o) for o in args.allow_origin),
        limits=_limits(args),
        **oauth,  # type: ignore[arg-type]
    )


def _token_verifier(args: argparse.Namespace) -> tuple[TokenVerifier, dict[str, object]]:
    from asyncai_watch.http_auth.secret import read_secret, warn_on_stderr

    if args.http_token_file is not None and args.oauth_introspect:
        raise PolicyError("use either --token-file (a fixed bearer token) or --oauth-introspect, not both")
    if args.http_token_file is not None:
        try:
            return StaticTokens([read_secret(args.http_token_file, "--token-file", warn_on_stderr)]), {}
        except ValueError as exc:
            raise PolicyError(str(exc)) from None
    from asyncai_watch.server.introspection import IntrospectionVerifier

    verifier = IntrospectionVerifier.from_env(args.oauth_introspect)
    extra: dict[str, object] = {"required_scopes": tuple(args.oauth_scope)}
    if args.oauth_issuer:
        extra["authorization_servers"] = (args.oauth_issuer,)
    return verifier, extra
