"""Every statement the server reads with, composed by psycopg's :mod:`psycopg.sql`. Pure.

Names from the config are :class:`~psycopg.sql.Identifier` (quoted by the driver, never
formatted into the text); values from a URI's filter and the keys a ``NOTIFY`` named are bound
parameters, converted to the columns' own types by ``jsonb_populate_record`` (so ``?id=42``
works on an ``integer`` column, and a timestamp key written in another session's time zone
is the same instant). A named query's SQL is the config author's text, run as a subquery.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import attrs
from psycopg import sql
from psycopg.types.json import Jsonb

from asyncai_servers.postgres.config import QuerySpec, TableName, TableSpec
from asyncai_servers.postgres.rowset import json_text
from asyncai_servers.postgres.uri import TableTarget

__all__ = [
    "TRIGGER_NAMES",
    "TableMeta",
    "catalog",
    "first_reads",
    "load_rows",
    "query_rows",
    "reread_rows",
    "shared_reread",
]

TRIGGER_NAMES: Final = (
    "asyncai_watch_insert",
    "asyncai_watch_update",
    "asyncai_watch_delete",
    "asyncai_watch_truncate",
)
"""The row triggers ``--install-triggers`` puts on each table (triggers.py)."""

Query = tuple[sql.SQL | sql.Composed, Sequence[Any]]

_CATALOG = sql.SQL(
    r"""
SELECT n.nspname::text, c.relname::text, c.oid::int8, c.relkind::text,
  ARRAY(SELECT a.attname::text FROM pg_index i
          CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
          JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
         WHERE i.indrelid = c.oid AND i.indisprimary ORDER BY k.ord),
  ARRAY(SELECT a.attname::text FROM pg_attribute a
         WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum),
  ARRAY(SELECT g.tgname::text FROM pg_trigger g
         WHERE g.tgrelid = c.oid AND g.tgname LIKE 'asyncai\_watch\_%%' AND g.tgenabled <> 'D'),
  has_schema_privilege(n.oid, 'USAGE') AND has_table_privilege(c.oid, 'SELECT'),
  current_user::text,
  ARRAY(SELECT p.relid::regclass::text FROM pg_partition_tree(c.oid) p
         WHERE p.relid <> c.oid AND (SELECT count(*) FROM pg_trigger g WHERE g.tgrelid = p.relid
           AND g.tgname LIKE 'asyncai\_watch\_%%' AND g.tgenabled <> 'D') < 4)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE (n.nspname, c.relname) IN (SELECT * FROM unnest(%s::text[], %s::text[]))
"""
)


@attrs.frozen
class TableMeta:
    """What the catalog says about a table, looked up when a watch starts and after DDL."""

    name: TableName
    oid: int
    kind: str
    """``pg_class.relkind``: ``r`` a table, ``p`` a partitioned table, ``v`` a view ..."""
    primary_key: tuple[str, ...]
    columns: tuple[str, ...]
    triggers: frozenset[str]
    readable: bool
    role: str
    unwatched: tuple[str, ...] = ()
    """Partitions (of a partitioned table) without all four triggers: their writes go unheard."""


def catalog(tables: Sequence[TableName]) -> Query:
    """The :class:`TableMeta` rows of ``tables`` (a missing table has no row)."""
    return _CATALOG, ([t.schema for t in tables], [t.name for t in tables])


def meta_from_row(row: Sequence[Any]) -> TableMeta:
    schema, name, oid, kind, pk, columns, triggers, readable, role, unwatched = row
    return TableMeta(
        name=TableName(schema, name),
        oid=int(oid),
        kind=str(kind),
        primary_key=tuple(pk),
        columns=tuple(columns),
        triggers=frozenset(triggers),
        readable=bool(readable),
        role=str(role),
        unwatched=tuple(unwatched),
    )


def _cols(alias: str, columns: Sequence[str]) -> sql.Composable:
    return sql.SQL(", ").join(sql.Identifier(alias, c) for c in columns)


def _row(target: TableTarget) -> sql.Composable:
    columns = target.spec.columns
    # ``alias.*``, never a bare ``alias``: PostgreSQL resolves a bare name to a column first, so a
    # table with a column ``t`` (or ``c``, or a query's ``q``) would hand that column to row_to_json.
    if columns is None:
        return sql.SQL("row_to_json(t.*)")
    # A subselect keeps the column names (json_build_object would stop at 50 columns).
    return sql.SQL("(SELECT row_to_json(c.*) FROM (SELECT {}) AS c)").format(_cols("t", columns))


def _filter(target: TableTarget) -> tuple[sql.Composable, sql.Composable, list[Any]]:
    """``CROSS JOIN`` of the filter values as a row of the table's type, and the conditions on it."""
    if not target.filter:
        return sql.SQL(""), sql.SQL("TRUE"), []
    table = sql.Identifier(target.table.schema, target.table.name)
    join = sql.SQL(" CROSS JOIN jsonb_populate_record(NULL::{}, %s) AS f").format(table)
    conds = sql.SQL(" AND ").join(
        sql.SQL("{} = {}").format(sql.Identifier("t", c), sql.Identifier("f", c)) for c, _ in target.filter
    )
    return join, conds, [Jsonb(dict(target.filter))]


def _match(alias: str, column: str) -> sql.Composable:
    """A value as the text a filter is matched by, in memory: the column type's own text, a
    ``numeric`` without trailing zeros (``1.50`` equals ``1.5``, as ``=`` says)."""
    col = sql.Identifier(alias, column)
    return sql.SQL(
        "CASE WHEN pg_typeof({c}) = 'numeric'::regtype THEN trim_scale({c}::text::numeric)::text ELSE {c}::text END"
    ).format(c=col)


def _matches(alias: str, columns: Sequence[str]) -> sql.Composable:
    return sql.SQL("json_build_array({})::text").format(sql.SQL(", ").join(_match(alias, c) for c in columns))


def load_rows(meta: TableMeta, target: TableTarget) -> Query:
    """Every row of ``target`` as ``(key_json, row_json)``, in key order, at most ``max_rows + 1``;
    with a filter, one more row ``(NULL, match_json)`` first: the filter's values as
    :func:`shared_reread` gives a row's (which also checks that the column can take them)."""
    table = sql.Identifier(meta.name.schema, meta.name.name)
    join, conds, params = _filter(target)
    pk = _cols("t", meta.primary_key)
    query = sql.SQL(
        "SELECT json_build_array({pk})::text, {row}::text FROM {table} AS t{join} WHERE {conds}"
        " ORDER BY {pk} LIMIT {limit}"
    ).format(
        pk=pk,
        row=_row(target),
        table=table,
        join=join,
        conds=conds,
        limit=sql.Literal(target.spec.max_rows + 1),
    )
    if not target.filter:
        return query, params
    values = sql.SQL("SELECT NULL::text, {m} FROM jsonb_populate_record(NULL::{table}, %s) AS f").format(
        m=_matches("f", [c for c, _ in target.filter]), table=table
    )
    return sql.SQL("{} UNION ALL ({})").format(values, query), [*params, *params]


def first_reads(meta: TableMeta, spec: TableSpec, filters: Sequence[Sequence[tuple[str, str]]]) -> Query:
    """Every row of each filtered view (all filtering on the same columns) in one statement:
    ``(n, match_json, key_json, row_json)``, ``n`` the view's place in ``filters`` (from 1), its
    rows in key order, at most ``max_rows + 1`` each (a view without rows: one row, key NULL)."""
    table = sql.Identifier(meta.name.schema, meta.name.name)
    columns = [c for c, _ in filters[0]]
    pk = _cols("t", meta.primary_key)
    query = sql.SQL(
        "SELECT f.ordinality, {m}, s.k, s.r FROM jsonb_populate_recordset(NULL::{table}, %s) WITH ORDINALITY AS f"
        " LEFT JOIN LATERAL (SELECT json_build_array({pk})::text AS k, {row}::text AS r FROM {table} AS t"
        " WHERE {conds} ORDER BY {pk} LIMIT {limit}) s ON TRUE ORDER BY f.ordinality"
    ).format(
        m=_matches("f", columns),
        table=table,
        pk=pk,
        row=_row(TableTarget(spec)),
        conds=sql.SQL(" AND ").join(
            sql.SQL("{} = {}").format(sql.Identifier("t", c), sql.Identifier("f", c)) for c in columns
        ),
        limit=sql.Literal(spec.max_rows + 1),
    )
    return query, [Jsonb([dict(f) for f in filters])]


def shared_reread(meta: TableMeta, spec: TableSpec, keys: Sequence[Sequence[Any]]) -> Query:
    """The rows with these primary keys now, for every watcher of the table at once (no filter):
    ``(key_json, row_json or NULL, match_json)``, the match of the ``where`` columns (:func:`_match`)."""
    table = sql.Identifier(meta.name.schema, meta.name.name)
    pk = meta.primary_key
    match = _matches("t", spec.where) if spec.where else sql.SQL("NULL::text")
    query = sql.SQL(
        "SELECT json_build_array({pk_r})::text, CASE WHEN {first} IS NULL THEN NULL ELSE {row}::text END,"
        " {match} FROM jsonb_populate_recordset(NULL::{table}, %s) AS r"
        " LEFT JOIN {table} AS t ON ({pk_t}) = ({pk_r})"
    ).format(
        pk_r=_cols("r", pk),
        pk_t=_cols("t", pk),
        first=sql.Identifier("t", pk[0]),
        row=_row(TableTarget(spec)),
        match=match,
        table=table,
    )
    wanted = Jsonb([dict(zip(pk, key, strict=True)) for key in keys], dumps=json_text)
    return query, [wanted]


def reread_rows(meta: TableMeta, target: TableTarget, keys: Sequence[Sequence[Any]]) -> Query:
    """The rows of ``target`` with these primary keys now: ``(key_json, row_json or NULL)`` per key
    (NULL: deleted, or not matching the filter)."""
    table = sql.Identifier(meta.name.schema, meta.name.name)
    join, conds, params = _filter(target)
    pk = meta.primary_key
    query = sql.SQL(
        "SELECT json_build_array({pk_r})::text, CASE WHEN {first} IS NULL THEN NULL ELSE {row}::text END"
        " FROM jsonb_populate_recordset(NULL::{table}, %s) AS r{join}"
        " LEFT JOIN {table} AS t ON ({pk_t}) = ({pk_r}) AND {conds}"
    ).format(
        pk_r=_cols("r", pk),
        pk_t=_cols("t", pk),
        first=sql.Identifier("t", pk[0]),
        row=_row(target),
        table=table,
        join=join,
        conds=conds,
    )
    wanted = Jsonb([dict(zip(pk, key, strict=True)) for key in keys], dumps=json_text)  # numbers exact
    return query, [wanted, *params]


def query_rows(spec: QuerySpec) -> Query:
    """A named query's rows as ``(key_json or NULL, row_json)``, at most ``max_rows + 1``."""
    key = (
        sql.SQL("json_build_array({})::text").format(_cols("q", spec.key))
        if spec.key
        else sql.SQL("NULL::text")
    )
    # The body ends on a line of its own: a config's SQL may end in a ``-- comment``.
    query = sql.SQL("SELECT {key}, row_to_json(q.*)::text FROM ({body}\n) AS q LIMIT {limit}").format(
        key=key,
        body=sql.SQL(spec.sql),
        limit=sql.Literal(spec.max_rows + 1),
    )
    return query, []
