"""The server's URIs and what each names. Pure.

- ``webhook-events://SOURCE/EVENT`` (an event log of one event name, e.g.
  ``webhook-events://github/workflow_run``), with optional equality filters on the fields of
  :data:`~asyncai_servers.webhooks.fields.FILTER_FIELDS` (``?branch=main&conclusion=failure``);
  ``webhook-events://SOURCE`` is every event of the source (filters too);
- ``webhook-state://SOURCE/EVENT/ID``: the latest delivery about one object (a workflow run by
  its id, a Stripe object by its id);
- ``webhooks://sources``: the configured sources, their endpoints and what they received.

Two spellings of one log (``?a=1&b=2`` and ``?b=2&a=1``, ``%2F`` and ``/`` in a value) parse to
the same :class:`LogTarget`, whose :attr:`LogTarget.filter_key` is its canonical query.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

import attrs

from asyncai_servers.webhooks.fields import FILTER_FIELDS

__all__ = [
    "EVENTS_SCHEME",
    "SOURCES_URI",
    "STATE_SCHEME",
    "LogTarget",
    "StateTarget",
    "UriError",
    "events_uri",
    "parse_uri",
]

EVENTS_SCHEME: Final = "webhook-events"
STATE_SCHEME: Final = "webhook-state"
SOURCES_URI: Final = "webhooks://sources"
MAX_URI_CHARS: Final = 2048


class UriError(ValueError):
    """A URI this server does not serve; the message says what it serves."""


@attrs.frozen
class LogTarget:
    source: str
    event: str
    """An event name, or "" for every event of the source."""
    filter: tuple[tuple[str, str], ...] = ()
    """Equality filters, sorted by field."""

    @property
    def filter_key(self) -> str:
        return urlencode(self.filter)

    def matches(self, event: str, fields: dict[str, str]) -> bool:
        return (not self.event or self.event == event) and all(fields.get(k) == v for k, v in self.filter)


@attrs.frozen
class StateTarget:
    source: str
    event: str
    object_id: str


def events_uri(source: str, event: str = "", **filters: str) -> str:
    path = f"/{quote(event, safe='')}" if event else ""
    query = f"?{urlencode(sorted(filters.items()))}" if filters else ""
    return f"{EVENTS_SCHEME}://{source}{path}{query}"


def _served(sources: Collection[str]) -> str:
    return (
        f"this server serves {EVENTS_SCHEME}://SOURCE[/EVENT][?FIELD=VALUE...], "
        f"{STATE_SCHEME}://SOURCE/EVENT/ID and {SOURCES_URI}; sources: {', '.join(sorted(sources))}; "
        f"filter fields: {', '.join(FILTER_FIELDS)}"
    )


def parse_uri(uri: str, sources: Collection[str]) -> LogTarget | StateTarget | None:
    """What ``uri`` names (``None``: :data:`SOURCES_URI`); raise :class:`UriError` otherwise."""
    if uri == SOURCES_URI:
        return None
    if len(uri) > MAX_URI_CHARS:
        raise UriError(f"a URI is at most {MAX_URI_CHARS} characters; {_served(sources)}")
    parts = urlsplit(uri)
    if parts.scheme not in (EVENTS_SCHEME, STATE_SCHEME) or parts.fragment:
        raise UriError(f"{uri!r} is not served; {_served(sources)}")
    source = parts.netloc
    if source not in sources:
        raise UriError(f"{uri!r}: no source {source!r}; {_served(sources)}")
    path = [unquote(p) for p in parts.path.split("/")[1:]] if parts.path else []
    if parts.scheme == STATE_SCHEME:
        if len(path) != 2 or not all(path) or parts.query:
            raise UriError(f"{uri!r}: a state URI is {STATE_SCHEME}://{source}/EVENT/ID (no query)")
        return StateTarget(source, path[0], path[1])
    if len(path) > 1 or (path and not path[0]):
        raise UriError(
            f"{uri!r}: an event log is {EVENTS_SCHEME}://{source} or {EVENTS_SCHEME}://{source}/EVENT"
        )
    try:
        pairs = parse_qsl(
            parts.query, keep_blank_values=True, strict_parsing=bool(parts.query), max_num_fields=16
        )
    except ValueError as exc:
        raise UriError(f"{uri!r}: the query is not FIELD=VALUE&...: {exc}") from None
    seen: dict[str, str] = {}
    for key, value in pairs:
        if key not in FILTER_FIELDS:
            raise UriError(f"{uri!r}: cannot filter on {key!r}; filter fields: {', '.join(FILTER_FIELDS)}")
        if key in seen and seen[key] != value:
            raise UriError(f"{uri!r}: {key} is given twice with different values")
        seen[key] = value
    return LogTarget(source, path[0] if path else "", tuple(sorted(seen.items())))
