"""The config file: which tables and named queries the server may read. Nothing else is readable.

TOML (read with the standard library's :mod:`tomllib`) or JSON, by the file's suffix::

    [defaults]
    max_rows = 1000                 # optional; the row cap of every table and query below

    [[table]]
    schema = "public"               # optional, default "public"
    name = "payments"
    where = ["status", "customer_id"]   # optional: columns a URI may filter on (?status=failed)
    columns = ["id", "status", "amount"]  # optional: the columns a read shows (default: all)
    max_rows = 5000                 # optional: more rows than this is an error naming the cap

    [[query]]
    name = "failed_payments"
    sql = "SELECT id, amount FROM payments WHERE status = 'failed' ORDER BY id"
    depends_on = ["payments"]       # "table" (schema public) or "schema.table"
    key = ["id"]                    # optional: key the body by these columns (default: a list)
    max_rows = 500

Validated once, here: every error names the entry and says what is accepted. The values are
frozen attrs classes the rest of the server trusts.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs

__all__ = ["DEFAULT_MAX_ROWS", "Config", "ConfigError", "QuerySpec", "TableName", "TableSpec", "load_config"]

DEFAULT_MAX_ROWS: Final = 1000
_QUERY_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_TABLE_KEYS: Final = ("schema", "name", "where", "columns", "max_rows")
_QUERY_KEYS: Final = ("name", "sql", "depends_on", "key", "max_rows")


class ConfigError(ValueError):
    """The config file is unreadable or names something in a way the server cannot use."""


@attrs.frozen(order=True)
class TableName:
    schema: str
    name: str

    def __str__(self) -> str:
        return f"{self.schema}.{self.name}"


@attrs.frozen
class TableSpec:
    table: TableName
    where: tuple[str, ...] = ()
    columns: tuple[str, ...] | None = None
    max_rows: int = DEFAULT_MAX_ROWS


@attrs.frozen
class QuerySpec:
    name: str
    sql: str
    depends_on: tuple[TableName, ...]
    key: tuple[str, ...] | None = None
    max_rows: int = DEFAULT_MAX_ROWS


@attrs.frozen
class Config:
    tables: tuple[TableSpec, ...]
    queries: tuple[QuerySpec, ...]
    source: str = "<config>"

    def table(self, name: TableName) -> TableSpec | None:
        return next((t for t in self.tables if t.table == name), None)

    def query(self, name: str) -> QuerySpec | None:
        return next((q for q in self.queries if q.name == name), None)

    def trigger_tables(self) -> list[TableName]:
        """Every table whose changes the server hears: the watched ones and those queries depend on."""
        names = {t.table for t in self.tables} | {d for q in self.queries for d in q.depends_on}
        return sorted(names)


def load_config(path: Path) -> Config:
    """Read and validate ``path`` (``.json`` is JSON, anything else TOML)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror or exc}") from None
    try:
        raw = json.loads(text) if path.suffix.lower() == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        kind = "JSON" if path.suffix.lower() == ".json" else "TOML"
        raise ConfigError(f"config {path} is not valid {kind}: {exc}") from None
    return parse_config(raw, source=str(path))


def parse_config(raw: Any, *, source: str = "<config>") -> Config:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{source}: expected a table of [[table]] and [[query]] entries")
    unknown = sorted(set(raw) - {"defaults", "table", "query"})
    if unknown:
        raise ConfigError(
            f"{source}: unknown section(s) {unknown}; accepted: [defaults], [[table]], [[query]]"
        )
    defaults = raw.get("defaults", {})
    if not isinstance(defaults, Mapping) or set(defaults) - {"max_rows"}:
        raise ConfigError(f"{source}: [defaults] accepts only max_rows, got {defaults!r}")
    default_cap = _cap(defaults.get("max_rows", DEFAULT_MAX_ROWS), f"{source}: [defaults]")
    tables = tuple(
        _table(entry, f"{source}: [[table]] #{i}", default_cap)
        for i, entry in enumerate(_entries(raw, "table", source), 1)
    )
    queries = tuple(
        _query(entry, f"{source}: [[query]] #{i}", default_cap)
        for i, entry in enumerate(_entries(raw, "query", source), 1)
    )
    if not tables and not queries:
        raise ConfigError(f"{source}: names no [[table]] and no [[query]]: nothing could be watched")
    _unique([str(t.table) for t in tables], f"{source}: table", "listed twice")
    _unique([q.name for q in queries], f"{source}: query name", "used twice")
    return Config(tables=tables, queries=queries, source=source)


def _entries(raw: Mapping[str, Any], section: str, source: str) -> list[Mapping[str, Any]]:
    entries = raw.get(section, [])
    if not isinstance(entries, list) or not all(isinstance(e, Mapping) for e in entries):
        raise ConfigError(f"{source}: [[{section}]] must be a list of tables (TOML [[{section}]] blocks)")
    return entries


def _unique(names: Sequence[str], what: str, verb: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ConfigError(f"{what} {name!r} is {verb}")
        seen.add(name)


def _keys(entry: Mapping[str, Any], allowed: Sequence[str], where: str) -> None:
    unknown = sorted(set(entry) - set(allowed))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; accepted: {', '.join(allowed)}")


def _name(value: Any, what: str, where: str) -> str:
    # PostgreSQL identifiers: any non-empty text without NUL, at most 63 bytes (NAMEDATALEN - 1).
    if not isinstance(value, str) or not value or "\0" in value or len(value.encode()) > 63:
        raise ConfigError(f"{where}: {what} must be a PostgreSQL name (1-63 bytes), got {value!r}")
    return value


def _names(value: Any, what: str, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{where}: {what} must be a non-empty list of column names, got {value!r}")
    names = tuple(_name(v, f"each of {what}", where) for v in value)
    _unique(names, f"{where}: {what} column", "listed twice")
    return names


def _cap(value: Any, where: str) -> int:
    if type(value) is not int or value < 1:
        raise ConfigError(f"{where}: max_rows must be an integer >= 1, got {value!r}")
    return value


def table_name(value: Any, where: str) -> TableName:
    """``"table"`` (schema public) or ``"schema.table"``, as written in ``depends_on``."""
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: a table is named 'table' or 'schema.table', got {value!r}")
    schema, dot, name = value.partition(".")
    if not dot:
        schema, name = "public", value
    return TableName(_name(schema, "the schema", where), _name(name, "the table name", where))


def _table(entry: Mapping[str, Any], where: str, default_cap: int) -> TableSpec:
    _keys(entry, _TABLE_KEYS, where)
    if "name" not in entry:
        raise ConfigError(f"{where}: name (the table's name) is required")
    name = TableName(
        _name(entry.get("schema", "public"), "schema", where), _name(entry["name"], "name", where)
    )
    where = f"{where} ({name})"
    columns = _names(entry["columns"], "columns", where) if "columns" in entry else None
    return TableSpec(
        table=name,
        where=_names(entry["where"], "where", where) if "where" in entry else (),
        columns=columns,
        max_rows=_cap(entry.get("max_rows", default_cap), where),
    )


def _query(entry: Mapping[str, Any], where: str, default_cap: int) -> QuerySpec:
    _keys(entry, _QUERY_KEYS, where)
    name = entry.get("name")
    if not isinstance(name, str) or not _QUERY_NAME.fullmatch(name):
        raise ConfigError(
            f"{where}: name must be letters, digits, '_', '.' or '-' (it goes in pg-query://NAME), got {name!r}"
        )
    where = f"{where} ({name})"
    sql = entry.get("sql")
    if not isinstance(sql, str) or not sql.strip():
        raise ConfigError(f"{where}: sql must be one SELECT statement, got {sql!r}")
    sql = sql.strip().rstrip(";").rstrip()  # it runs as a subquery: SELECT ... FROM (sql) q LIMIT n
    deps = entry.get("depends_on")
    if not isinstance(deps, list) or not deps:
        raise ConfigError(
            f'{where}: depends_on must list the tables whose changes re-run the query, e.g. ["payments"]'
        )
    return QuerySpec(
        name=name,
        sql=sql,
        depends_on=tuple(dict.fromkeys(table_name(d, where) for d in deps)),
        key=_names(entry["key"], "key", where) if "key" in entry else None,
        max_rows=_cap(entry.get("max_rows", default_cap), where),
    )
