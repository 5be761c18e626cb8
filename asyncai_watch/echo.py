"""What an error, a log line or a CLI may echo back: caller input capped, secrets redacted.

Pure. Two rules, one helper each, used wherever text from outside is echoed:

- :func:`quoted` (and :func:`clip`, the same without the quotes): caller input (a watch name, a URI, a tool argument) is quoted as its
  ``repr``, cut at :data:`QUOTE_CAP` characters with its full length after it, so a 10 MB
  name makes a short error, not a 10 MB one: ``'aaaa…' (10,000,000 characters)``. Values
  that are not strings are shown by :mod:`reprlib`, which also bounds nesting.
- :func:`redact_url` / :func:`redact`: a URL loses its userinfo and the value of every
  query or fragment parameter named in :data:`SECRET_PARAMETERS`; :func:`redact` does
  that to every URL inside a text (an exception message, a log field) and masks
  ``Bearer <token>`` too.
"""

from __future__ import annotations

import re
import reprlib
import urllib.parse
from typing import Final

__all__ = ["MASK", "QUOTE_CAP", "SECRET_PARAMETERS", "clip", "quoted", "redact", "redact_url"]

QUOTE_CAP: Final = 200
"""Characters of caller input an error quotes; the rest is counted, not shown."""

MASK: Final = "***"

SECRET_PARAMETERS: Final = frozenset(
    {
        # OAuth 2 / OpenID Connect
        "access_token",
        "refresh_token",
        "id_token",
        "token",
        "code",
        "code_verifier",
        "client_secret",
        "assertion",
        "client_assertion",
        # API keys and passwords
        "key",
        "api_key",
        "apikey",
        "api-key",
        "auth",
        "authorization",
        "password",
        "passwd",
        "pwd",
        "secret",
        "session",
        "sessionid",
        "session_id",
        "jwt",
        # signed URLs (S3, GCS, Azure SAS, generic)
        "signature",
        "sig",
        "x-amz-signature",
        "x-amz-credential",
        "x-amz-security-token",
        "x-goog-signature",
        "x-goog-credential",
        "credential",
    }
)
"""Query and fragment parameters whose value :func:`redact_url` replaces with ``***``
(names compared case-insensitively). Not ``state``, ``client_id``, ``code_challenge`` or
``redirect_uri``: an authorization URL a person must open keeps working."""

_URL: Final = re.compile(r"""[A-Za-z][A-Za-z0-9+.\-]*://[^\s'"<>`]+""")
_BEARER: Final = re.compile(r"(?i)\b(bearer\s+)[^\s'\"]+")
# Outside URLs only names that cannot be ordinary words: "key=3" in a notice stays as it is.
_PAIR: Final = re.compile(
    r"""(?i)(["']?\b(?:access_token|refresh_token|id_token|client_secret|code_verifier|password)["']?"""
    r"""\s*[:=]\s*["']?)([^"'&\s,;}]+)"""
)
_WORTH_A_LOOK: Final = re.compile(r"(?i)://|bearer|_token|secret|password|code_verifier")


_repr: Final = reprlib.Repr()  # bounded in size and in depth (a value nested 1,000 deep is fine)
_repr.maxlevel = 3
_repr.maxstring = _repr.maxother = _repr.maxlong = QUOTE_CAP


def quoted(value: object, cap: int = QUOTE_CAP) -> str:
    """``repr(value)``, at most about ``cap`` characters: ``'aaaa…' (10,000,000 characters)``."""
    if isinstance(value, str):
        if len(value) <= cap:
            return repr(value)
        return f"{value[:cap] + '…'!r} ({len(value):,} characters)"
    try:
        text = _repr.repr(value)
    except Exception:  # a caller's object whose __repr__ fails
        text = f"<{type(value).__name__}>"
    return text if len(text) <= cap + 40 else text[:cap] + "…"


def clip(text: str, cap: int = QUOTE_CAP) -> str:
    """``text`` as is, or cut at ``cap`` characters with its length after it: ``aaaa… (10,000,000 characters)``."""
    if len(text) <= cap:
        return text
    return f"{text[:cap]}… ({len(text):,} characters)"


def redact_url(url: str) -> str:
    """``url`` without userinfo and with the value of each secret parameter replaced by ``***``."""
    try:
        parts = urllib.parse.urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            netloc = MASK + "@" + netloc.rpartition("@")[2]
        return urllib.parse.urlunsplit(
            parts._replace(
                netloc=netloc, query=_redact_params(parts.query), fragment=_redact_params(parts.fragment)
            )
        )
    except ValueError:  # not parseable as a URL (a bad port, brackets): keep nothing after the scheme
        scheme, sep, _ = url.partition("://")
        return f"{scheme}{sep}{MASK}" if sep else MASK


def redact(text: str) -> str:
    """``text`` with every URL in it redacted (:func:`redact_url`), every bearer token masked, and
    the value of every ``access_token``, ``refresh_token``, ``id_token``, ``client_secret``,
    ``code_verifier`` or ``password`` written as ``name=value`` or ``"name": "value"`` (a form
    or JSON body quoted in an error) masked."""
    if not _WORTH_A_LOOK.search(text):  # the usual case, at C speed
        return text
    text = _URL.sub(lambda m: redact_url(m.group(0)), text)
    text = _BEARER.sub(lambda m: m.group(1) + MASK, text)
    return _PAIR.sub(lambda m: m.group(1) + MASK, text)


def _redact_params(query: str) -> str:
    if not query:
        return query
    out = []
    for pair in query.split("&"):
        name, sep, _value = pair.partition("=")
        secret = urllib.parse.unquote_plus(name).strip().lower() in SECRET_PARAMETERS
        out.append(f"{name}{sep}{MASK}" if secret and sep else pair)
    return "&".join(out)
