"""The config file: the sources a server receives deliveries for, and where their secrets are.

TOML (the standard library's :mod:`tomllib`)::

    [[source]]
    name = "github"                 # the endpoint path /hooks/github and the URIs' first part
    kind = "github"                 # github | stripe | standard | hmac
    secrets = [{ env = "GITHUB_WEBHOOK_SECRET" }, { file = "/run/secrets/github_old" }]

    [[source]]
    name = "stripe"
    kind = "stripe"
    secrets = [{ env = "STRIPE_WEBHOOK_SECRET" }]
    tolerance = 300                 # seconds a signed timestamp may be off (stripe, standard)

    [[source]]
    name = "deploys"
    kind = "hmac"                   # a generic HMAC-SHA256 of the raw body in one header
    secrets = [{ file = "deploys.secret" }]
    signature_header = "X-Signature"    # default X-Signature
    prefix = "sha256="                  # default "sha256="; "" for a bare digest
    encoding = "hex"                    # hex | base64
    id_header = "X-Delivery-Id"         # default: none (the body's SHA-256 is the delivery id)
    event_header = "X-Event"            # default: none (the payload's "type", else "message")

Several secrets per source are tried in turn (rotation: add the new one, switch the sender,
remove the old). Secrets are read once, at start; an empty or missing one is an error naming it.
Validated here: every error names the entry and what is accepted.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

import attrs

__all__ = ["KINDS", "Config", "ConfigError", "Kind", "SourceSpec", "load_config", "parse_config"]

Kind = Literal["github", "stripe", "standard", "hmac"]
KINDS: Final[tuple[Kind, ...]] = ("github", "stripe", "standard", "hmac")
DEFAULT_TOLERANCE: Final = 300.0
"""Seconds a Stripe or Standard Webhooks timestamp may be off (both providers' own default)."""
MAX_SECRET_BYTES: Final = 4096
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
_KEYS: Final = (
    "name",
    "kind",
    "secrets",
    "tolerance",
    "signature_header",
    "prefix",
    "encoding",
    "id_header",
    "event_header",
)


class ConfigError(ValueError):
    """The config file is unreadable or names something the server cannot use."""


@attrs.frozen
class SourceSpec:
    name: str
    kind: Kind
    secrets: tuple[bytes, ...] = attrs.field(repr=lambda s: f"<{len(s)} secret(s)>")
    tolerance: float = DEFAULT_TOLERANCE
    signature_header: str = "x-signature"
    prefix: str = "sha256="
    encoding: Literal["hex", "base64"] = "hex"
    id_header: str | None = None
    event_header: str | None = None


@attrs.frozen
class Config:
    sources: Mapping[str, SourceSpec]


def load_config(path: Path, env: Mapping[str, str] | None = None) -> Config:
    """Read and validate ``path``; secret files are relative to its directory."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read the config {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    return parse_config(data, base=path.parent, env=os.environ if env is None else env)


def parse_config(data: Mapping[str, Any], *, base: Path, env: Mapping[str, str]) -> Config:
    unknown = sorted(set(data) - {"source"})
    if unknown:
        raise ConfigError(f"unknown top-level key(s) {unknown}; accepted: [[source]] tables")
    raw = data.get("source")
    if not isinstance(raw, list) or not raw:
        raise ConfigError(
            "the config names no source; add at least one [[source]] with name, kind and secrets"
        )
    sources: dict[str, SourceSpec] = {}
    for i, entry in enumerate(raw):
        spec = _source(i, entry, base, env)
        if spec.name in sources:
            raise ConfigError(
                f"[[source]] #{i + 1}: the name {spec.name!r} is used twice; names must be unique"
            )
        sources[spec.name] = spec
    return Config(sources)


def _source(i: int, entry: Any, base: Path, env: Mapping[str, str]) -> SourceSpec:
    where = f"[[source]] #{i + 1}"
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{where} is not a table")
    unknown = sorted(set(entry) - set(_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; accepted: {list(_KEYS)}")
    name = entry.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(
            f"{where}: name must be 1-64 characters of a-z, 0-9, _ and - (it is a URL path part), got {name!r}"
        )
    where = f"[[source]] {name!r}"
    kind = entry.get("kind")
    if kind not in KINDS:
        raise ConfigError(f"{where}: kind must be one of {list(KINDS)}, got {kind!r}")
    secrets = tuple(_secret(where, s, base, env) for s in _list(where, "secrets", entry.get("secrets")))
    if not secrets:
        raise ConfigError(
            f"{where}: secrets is empty; name at least one {{ env = NAME }} or {{ file = PATH }}"
        )
    tolerance = entry.get("tolerance", DEFAULT_TOLERANCE)
    if type(tolerance) not in (int, float) or not 0 < tolerance <= 86400:
        raise ConfigError(f"{where}: tolerance must be seconds, > 0 and <= 86400, got {tolerance!r}")
    strings: dict[str, str | None] = {}
    for key in ("signature_header", "prefix", "id_header", "event_header"):
        value = entry.get(key)
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{where}: {key} must be a string, got {value!r}")
        if value is not None and kind != "hmac":
            raise ConfigError(f"{where}: {key} is for kind = 'hmac' only ({kind} has its documented headers)")
        strings[key] = value.lower() if value is not None and key != "prefix" else value
    encoding = entry.get("encoding", "hex")
    if encoding not in ("hex", "base64"):
        raise ConfigError(f"{where}: encoding must be 'hex' or 'base64', got {encoding!r}")
    return SourceSpec(
        name=name,
        kind=kind,
        secrets=secrets,
        tolerance=float(tolerance),
        signature_header=strings["signature_header"] or "x-signature",
        prefix="sha256=" if strings["prefix"] is None else strings["prefix"],
        encoding=encoding,
        id_header=strings["id_header"],
        event_header=strings["event_header"],
    )


def _list(where: str, key: str, value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise ConfigError(
            f"{where}: {key} must be a list of {{ env = NAME }} or {{ file = PATH }}, got {value!r}"
        )
    return value


def _secret(where: str, spec: Any, base: Path, env: Mapping[str, str]) -> bytes:
    if not isinstance(spec, Mapping) or len(spec) != 1 or not ({"env", "file"} & set(spec)):
        raise ConfigError(f"{where}: each secret is {{ env = NAME }} or {{ file = PATH }}, got {spec!r}")
    if "env" in spec:
        name = spec["env"]
        value = env.get(name) if isinstance(name, str) else None
        if not value:
            raise ConfigError(f"{where}: the environment variable {name!r} is unset or empty")
        text = value.strip()
    else:
        path = base / str(spec["file"])
        try:
            text = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"{where}: cannot read the secret file {path}: {exc.strerror or exc}") from None
        if not text:
            raise ConfigError(f"{where}: the secret file {path} is empty")
    secret = text.encode()
    if len(secret) > MAX_SECRET_BYTES:
        raise ConfigError(f"{where}: a secret is longer than {MAX_SECRET_BYTES} bytes")
    return secret
