"""The server's URIs, and what each one names. Pure.

``pg://SCHEMA/TABLE`` (state), ``pg-events://SCHEMA/TABLE`` (event log), each with an optional
query of equality filters on the columns the config allows (``?status=failed``), and
``pg-query://NAME`` (a named query's state). Names are percent-encoded (``pg://public/Order%20Items``).

Two spellings of one resource (``?a=1&b=2`` and ``?b=2&a=1``, ``%C3%A9`` and ``%c3%a9``) parse to
the same :class:`Resource`: the server shares one source between them and notifies each
spelling a client listened to.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import quote, unquote, urlsplit

import attrs

from asyncai_servers.postgres.config import Config, QuerySpec, TableName, TableSpec

__all__ = [
    "EVENTS_SCHEME",
    "QUERY_SCHEME",
    "STATE_SCHEME",
    "QueryTarget",
    "Resource",
    "TableTarget",
    "UriError",
    "parse_uri",
    "query_uri",
    "table_template",
    "table_uri",
]

STATE_SCHEME: Final = "pg"
EVENTS_SCHEME: Final = "pg-events"
QUERY_SCHEME: Final = "pg-query"


class UriError(ValueError):
    """A URI this server does not serve; the message says what it does serve."""


@attrs.frozen
class TableTarget:
    """A table's rows, or those whose ``filter`` columns equal the given values (sorted by column)."""

    spec: TableSpec
    filter: tuple[tuple[str, str], ...] = ()

    @property
    def table(self) -> TableName:
        return self.spec.table

    def describe(self) -> str:
        if not self.filter:
            return str(self.table)
        return f"{self.table} where " + " and ".join(f"{c} = {v!r}" for c, v in self.filter)


@attrs.frozen
class QueryTarget:
    spec: QuerySpec

    def describe(self) -> str:
        return f"query {self.spec.name!r}"


@attrs.frozen
class Resource:
    """What a URI names: a target, read as state or (tables only) as an event log."""

    target: TableTarget | QueryTarget
    events: bool = False


def _q(name: str) -> str:
    return quote(name, safe="")


def table_uri(scheme: str, table: TableName, filter: tuple[tuple[str, str], ...] = ()) -> str:
    uri = f"{scheme}://{_q(table.schema)}/{_q(table.name)}"
    if filter:
        uri += "?" + "&".join(f"{_q(c)}={_q(v)}" for c, v in filter)
    return uri


def table_template(scheme: str, spec: TableSpec) -> str:
    """``pg://public/payments{?status,customer_id}``: the URIs with a filter on the allowed columns."""
    return table_uri(scheme, spec.table) + "{?" + ",".join(spec.where) + "}"


def query_uri(name: str) -> str:
    return f"{QUERY_SCHEME}://{_q(name)}"


def _served(config: Config) -> str:
    parts = [table_uri(STATE_SCHEME, t.table) for t in config.tables[:3]]
    parts += [query_uri(q.name) for q in config.queries[:3]]
    more = len(config.tables) + len(config.queries) - len(parts)
    listed = ", ".join(parts) + (f" and {more} more" if more > 0 else "")
    return (
        f"this server serves {STATE_SCHEME}://SCHEMA/TABLE (state), {EVENTS_SCHEME}://SCHEMA/TABLE (event log) "
        f"and {QUERY_SCHEME}://NAME for what its config names: {listed} (resources/list has them all)"
    )


def parse_uri(uri: str, config: Config) -> Resource:
    """The resource ``uri`` names in ``config``; :class:`UriError` saying what is served otherwise."""
    try:
        parts = urlsplit(uri)
    except ValueError as exc:
        raise UriError(f"{uri!r} is not a URI ({exc}); {_served(config)}") from None
    scheme = parts.scheme.lower()
    if parts.fragment:
        raise UriError(f"{uri!r}: a fragment (#...) is not accepted; {_served(config)}")
    if scheme == QUERY_SCHEME:
        query = config.query(unquote(parts.netloc))
        if query is None or parts.path not in ("", "/") or parts.query:
            names = ", ".join(q.name for q in config.queries) or "none"
            raise UriError(f"{uri!r}: no such named query; the config names: {names}")
        return Resource(QueryTarget(query))
    if scheme not in (STATE_SCHEME, EVENTS_SCHEME):
        raise UriError(f"{uri!r} is not served here; {_served(config)}")
    schema, path = unquote(parts.netloc), parts.path
    segments = path[1:].split("/") if path.startswith("/") else []
    if not schema or len(segments) != 1 or not segments[0]:
        raise UriError(f"{uri!r}: expected {scheme}://SCHEMA/TABLE, e.g. {scheme}://public/payments")
    table = TableName(schema, unquote(segments[0]))
    spec = config.table(table)
    if spec is None:
        tables = ", ".join(str(t.table) for t in config.tables) or "none"
        raise UriError(f"{uri!r}: table {table} is not in the config; the config names: {tables}")
    return Resource(TableTarget(spec, _filter(uri, parts.query, spec)), events=scheme == EVENTS_SCHEME)


def _filter(uri: str, query: str, spec: TableSpec) -> tuple[tuple[str, str], ...]:
    if not query:
        return ()
    allowed = ", ".join(spec.where) if spec.where else "none (the config's where = [...] lists them)"
    found: dict[str, str] = {}
    for pair in query.split("&"):
        column, eq, value = pair.partition("=")
        column = unquote(column)
        if not eq or not column:
            raise UriError(
                f"{uri!r}: a filter is COLUMN=VALUE, got {pair!r}; filter columns of {spec.table}: {allowed}"
            )
        if column not in spec.where:
            raise UriError(f"{uri!r}: {column!r} is not a filter column of {spec.table}; allowed: {allowed}")
        if column in found:
            raise UriError(
                f"{uri!r}: {column!r} is given twice; one value per column (the filter is equality)"
            )
        found[column] = unquote(value)
    return tuple(sorted(found.items()))
