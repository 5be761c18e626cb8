"""Endpoint credentials: bearer tokens from a config file, each with a queue scope and an attribution.

The server decides who a caller is from the credential alone (the token on
Streamable HTTP, the launch credential on stdio); nothing in a request can
claim a different attribution. That is what the doorbell's sender gate rests on.

Config file (JSON)::

    {"credentials": [
      {"name": "alice", "token": "...", "queues": ["ops", "deploys"],
       "attribution": "human", "verified": true},
      {"name": "ci-bot", "token": "...", "queues": ["*"], "attribution": "agent"}
    ]}
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal

import attrs

__all__ = [
    "ALL_QUEUES",
    "NAME_RE",
    "ConfigError",
    "Credential",
    "Credentials",
    "load_credentials",
    "validate_name",
]

ALL_QUEUES: Final = "*"
NAME_RE: Final = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,63}$")
"""Queue, kind and credential names: safe as a tag attribute value and in a URI path segment."""

Attribution = Literal["human", "agent"]


class ConfigError(ValueError):
    """The credentials file is not acceptable; the message names the entry and the field."""


def validate_name(what: str, value: object) -> str:
    """Return ``value`` if it is an acceptable name, else raise ValueError saying what is accepted."""
    if not isinstance(value, str) or not NAME_RE.match(value):
        raise ValueError(
            f"{what} must be 1-64 characters of letters, digits, '_', '.', ':' or '-' "
            f"(not starting with '.', ':' or '-'), got {value!r}"
        )
    return value


@attrs.frozen(kw_only=True)
class Credential:
    """Who a caller is: name, queue scope and attribution, all from the server's config."""

    name: str
    queues: frozenset[str]
    attribution: Attribution = "agent"
    verified: bool = False

    @property
    def pushes(self) -> bool:
        """The sender gate: only todos created by a verified human ring doorbells."""
        return self.attribution == "human" and self.verified

    @property
    def all_queues(self) -> bool:
        return ALL_QUEUES in self.queues

    def can_see(self, queue: str) -> bool:
        return self.all_queues or queue in self.queues

    def scope(self, queue: str | None) -> Sequence[str] | None:
        """The queues a call may touch: ``[queue]`` (checked), or all in scope (None = every queue)."""
        if queue is not None:
            validate_name("queue", queue)
            if not self.can_see(queue):
                raise PermissionError(
                    f"queue {queue!r} is outside the scope of credential {self.name!r} "
                    f"(allowed: {', '.join(sorted(self.queues))})"
                )
            return [queue]
        return None if self.all_queues else sorted(self.queues)


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


@attrs.frozen
class Credentials:
    """Token -> credential lookup in O(1), without timing that depends on how much of a token matches.

    Tokens are looked up by their SHA-256 digest: a caller can learn at most how a guess's digest
    compares with a known digest, which says nothing about the token. (The earlier scan compared
    the token with every known one: constant-time, but O(credentials) twice per request, 5 ms with
    1,000 credentials.)
    """

    by_token: Mapping[str, Credential]
    _by_digest: Mapping[bytes, tuple[str, Credential]] = attrs.field(init=False, repr=False)
    _by_name: Mapping[str, Credential] = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_by_digest", {_digest(t): (t, c) for t, c in self.by_token.items()})
        object.__setattr__(self, "_by_name", {c.name: c for c in self.by_token.values()})

    def lookup(self, token: str | None) -> Credential | None:
        if not token:
            return None
        found = self._by_digest.get(_digest(token))
        if found is None or not hmac.compare_digest(found[0].encode(), token.encode()):
            return None
        return found[1]

    def by_name(self, name: str) -> Credential | None:
        return self._by_name.get(name)

    def __iter__(self) -> Iterator[Credential]:
        return iter(self.by_token.values())


def _credential(index: int, entry: Any) -> tuple[str, Credential]:
    where = f"credentials[{index}]"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be an object with name, token, queues, attribution, verified")
    unknown = set(entry) - {"name", "token", "queues", "attribution", "verified"}
    if unknown:
        raise ConfigError(
            f"{where} has unknown field(s) {sorted(unknown)}; accepted: name, token, queues, attribution, verified"
        )
    try:
        name = validate_name(f"{where}.name", entry.get("name"))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    token = entry.get("token")
    if not isinstance(token, str) or len(token) < 8:
        raise ConfigError(f"{where}.token must be a string of at least 8 characters")
    queues = entry.get("queues")
    if not isinstance(queues, list) or not queues:
        raise ConfigError(f"{where}.queues must be a non-empty list of queue names or '*'")
    for q in queues:
        if q != ALL_QUEUES:
            try:
                validate_name(f"{where}.queues entry", q)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
    attribution = entry.get("attribution", "agent")
    if attribution not in ("human", "agent"):
        raise ConfigError(f"{where}.attribution must be 'human' or 'agent', got {attribution!r}")
    verified = entry.get("verified", False)
    if not isinstance(verified, bool):
        raise ConfigError(f"{where}.verified must be true or false, got {verified!r}")
    return token, Credential(name=name, queues=frozenset(queues), attribution=attribution, verified=verified)


def parse_credentials(data: Any) -> Credentials:
    if not isinstance(data, dict) or not isinstance(data.get("credentials"), list):
        raise ConfigError('config must be a JSON object {"credentials": [...]}')
    by_token: dict[str, Credential] = {}
    names: set[str] = set()
    for i, entry in enumerate(data["credentials"]):
        token, cred = _credential(i, entry)
        if token in by_token:
            raise ConfigError(f"credentials[{i}] reuses the token of {by_token[token].name!r}")
        if cred.name in names:
            raise ConfigError(f"credentials[{i}].name {cred.name!r} is used twice; names must be unique")
        by_token[token] = cred
        names.add(cred.name)
    if not by_token:
        raise ConfigError("config lists no credentials; add at least one")
    return Credentials(by_token)


def load_credentials(path: Path) -> Credentials:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config {str(path)!r}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"config {str(path)!r} is not JSON: {exc}") from None
    try:
        return parse_credentials(data)
    except ConfigError as exc:
        raise ConfigError(f"config {str(path)!r}: {exc}") from None
