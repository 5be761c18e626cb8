"""``--install-triggers`` / ``--remove-triggers``: the database side of "push, not poll".

Each watched table (and each table a named query depends on) gets four statement-level
triggers. After every INSERT, UPDATE, DELETE or TRUNCATE statement one ``NOTIFY asyncai_watch``
says which table changed and which primary keys the statement touched::

    {"s": "public", "t": "payments", "op": "UPDATE", "k": [[41], [42]]}

Statement-level with transition tables, so a bulk statement costs one notification, not one
per row. When the keys would not fit a notification (PostgreSQL caps a payload at 8000
bytes) or the table has no primary key, ``k`` is left out: "the table changed", and the
server re-reads the whole watched set. ``NOTIFY`` is sent only when the transaction commits,
in commit order, so a rolled-back write is never heard.

With a superuser, two event triggers also ``NOTIFY`` DDL (``ALTER TABLE``, ``DROP TABLE``,
``GRANT`` ...) with the affected tables' oids, so a watch on a table that is dropped or
altered says so at once. Without them the server learns of DDL at the next change, reconnect
or restart (docs/servers/postgres.md).

A partitioned table's partitions get the triggers too (a statement on a partition fires only
the partition's statement triggers); their ``NOTIFY`` names the partitioned table
(``pg_partition_root``), and the DDL event trigger adds them to a partition created or attached
later (``asyncai_watch.add_triggers``).

Everything is idempotent (``CREATE OR REPLACE``, ``DROP ... IF EXISTS``) and runs in one
transaction: a table that does not exist installs nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import attrs
import psycopg
from psycopg import sql

from asyncai_servers.postgres.capture import DEFAULT_RETENTION, Retention, install_capture, remove_capture
from asyncai_servers.postgres.config import TableName
from asyncai_servers.postgres.queries import TRIGGER_NAMES

__all__ = ["CHANNEL", "SCHEMA", "TriggerReport", "install_triggers", "remove_triggers"]

CHANNEL: Final = "asyncai_watch"
SCHEMA: Final = "asyncai_watch"
MAX_KEYS: Final = 1000
"""A statement touching more rows than this notifies "the table changed" without building keys."""

_ROW_FUNCTION = r"""
CREATE OR REPLACE FUNCTION asyncai_watch.notify_rows() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
  pk text[];
  keys jsonb;
  n bigint;
  payload text;
  sch name;
  tab name;
BEGIN
  IF TG_OP <> 'TRUNCATE' THEN
    SELECT array_agg(a.attname::text ORDER BY k.ord) INTO pk
      FROM pg_catalog.pg_index i
      CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
      JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
     WHERE i.indrelid = TG_RELID AND i.indisprimary;
  END IF;
  IF pk IS NOT NULL THEN
    IF TG_OP = 'INSERT' THEN
      SELECT count(*) INTO n FROM asyncai_watch_new;
      IF n <= %(max_keys)s THEN
        SELECT jsonb_agg((SELECT jsonb_agg(j -> c ORDER BY o) FROM unnest(pk) WITH ORDINALITY AS u(c, o)))
          INTO keys FROM (SELECT to_jsonb(r) AS j FROM asyncai_watch_new r) s;
      END IF;
    ELSIF TG_OP = 'DELETE' THEN
      SELECT count(*) INTO n FROM asyncai_watch_old;
      IF n <= %(max_keys)s THEN
        SELECT jsonb_agg((SELECT jsonb_agg(j -> c ORDER BY o) FROM unnest(pk) WITH ORDINALITY AS u(c, o)))
          INTO keys FROM (SELECT to_jsonb(r) AS j FROM asyncai_watch_old r) s;
      END IF;
    ELSE
      SELECT count(*) INTO n FROM asyncai_watch_new;
      IF n <= %(max_keys)s THEN
        -- Old and new keys: an UPDATE may change a primary key.
        SELECT jsonb_agg(DISTINCT k) INTO keys FROM (
          SELECT (SELECT jsonb_agg(j -> c ORDER BY o) FROM unnest(pk) WITH ORDINALITY AS u(c, o)) AS k
            FROM (SELECT to_jsonb(r) AS j FROM asyncai_watch_new r
                  UNION ALL SELECT to_jsonb(r) FROM asyncai_watch_old r) s) d;
      END IF;
    END IF;
    IF n = 0 THEN
      RETURN NULL;  -- the statement changed no row: nothing to say
    END IF;
  END IF;
  -- A partition's rows are its partitioned table's: name the root (the table a config names).
  SELECT n.nspname, c.relname INTO sch, tab FROM pg_catalog.pg_class c
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
   WHERE c.oid = coalesce(pg_catalog.pg_partition_root(TG_RELID), TG_RELID);
  IF keys IS NOT NULL THEN
    payload := json_build_object('s', sch, 't', tab, 'op', TG_OP, 'k', keys)::text;
  END IF;
  IF payload IS NULL OR octet_length(payload) >= 8000 THEN
    payload := json_build_object('s', sch, 't', tab, 'op', TG_OP)::text;
  END IF;
  PERFORM pg_notify('asyncai_watch', payload);
  IF TG_RELID <> coalesce(pg_catalog.pg_partition_root(TG_RELID), TG_RELID) THEN
    -- ...and the partition's own name, for a config that names the partition itself.
    payload := NULL;
    IF keys IS NOT NULL THEN
      payload := json_build_object('s', TG_TABLE_SCHEMA, 't', TG_TABLE_NAME, 'op', TG_OP, 'k', keys)::text;
    END IF;
    IF payload IS NULL OR octet_length(payload) >= 8000 THEN
      payload := json_build_object('s', TG_TABLE_SCHEMA, 't', TG_TABLE_NAME, 'op', TG_OP)::text;
    END IF;
    PERFORM pg_notify('asyncai_watch', payload);
  END IF;
  RETURN NULL;
END
$fn$
"""

_WATCH_FUNCTION = r"""
CREATE OR REPLACE FUNCTION asyncai_watch.add_triggers(rel regclass) RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
  EXECUTE format('DROP TRIGGER IF EXISTS asyncai_watch_insert ON %s', rel);
  EXECUTE format('DROP TRIGGER IF EXISTS asyncai_watch_update ON %s', rel);
  EXECUTE format('DROP TRIGGER IF EXISTS asyncai_watch_delete ON %s', rel);
  EXECUTE format('DROP TRIGGER IF EXISTS asyncai_watch_truncate ON %s', rel);
  EXECUTE format('CREATE TRIGGER asyncai_watch_insert AFTER INSERT ON %s REFERENCING NEW TABLE AS '
    'asyncai_watch_new FOR EACH STATEMENT EXECUTE FUNCTION asyncai_watch.notify_rows()', rel);
  EXECUTE format('CREATE TRIGGER asyncai_watch_update AFTER UPDATE ON %s REFERENCING OLD TABLE AS '
    'asyncai_watch_old NEW TABLE AS asyncai_watch_new FOR EACH STATEMENT EXECUTE FUNCTION '
    'asyncai_watch.notify_rows()', rel);
  EXECUTE format('CREATE TRIGGER asyncai_watch_delete AFTER DELETE ON %s REFERENCING OLD TABLE AS '
    'asyncai_watch_old FOR EACH STATEMENT EXECUTE FUNCTION asyncai_watch.notify_rows()', rel);
  EXECUTE format('CREATE TRIGGER asyncai_watch_truncate AFTER TRUNCATE ON %s '
    'FOR EACH STATEMENT EXECUTE FUNCTION asyncai_watch.notify_rows()', rel);
  -- The durable capture's TRUNCATE trigger is not cloned onto partitions either (capture.py).
  IF to_regprocedure('asyncai_watch.capture()') IS NOT NULL
     AND (SELECT c.relkind FROM pg_catalog.pg_class c WHERE c.oid = rel) = 'r' THEN
    EXECUTE format('DROP TRIGGER IF EXISTS asyncai_watch_capture_truncate ON %s', rel);
    EXECUTE format('CREATE TRIGGER asyncai_watch_capture_truncate AFTER TRUNCATE ON %s '
      'FOR EACH STATEMENT EXECUTE FUNCTION asyncai_watch.capture()', rel);
  END IF;
END
$fn$
"""

_DDL_FUNCTION = r"""
CREATE OR REPLACE FUNCTION asyncai_watch.notify_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $fn$
DECLARE
  oids jsonb;
  ours boolean;
  payload text;
  part regclass;
BEGIN
  IF TG_EVENT = 'sql_drop' THEN
    SELECT jsonb_agg(DISTINCT d.objid::int8) FILTER (WHERE d.classid = 'pg_catalog.pg_class'::regclass),
           bool_or(d.object_type = 'trigger' AND d.object_identity LIKE 'asyncai\_watch\_%')
      INTO oids, ours
      FROM pg_event_trigger_dropped_objects() d WHERE NOT d.is_temporary;
  ELSE
    -- A partition created or attached under a partitioned table that carries our triggers gets
    -- them too: a statement on a partition fires only the partition's statement triggers.
    FOR part IN
      SELECT DISTINCT t.relid FROM pg_event_trigger_ddl_commands() d
        CROSS JOIN LATERAL pg_catalog.pg_partition_tree(d.objid) t
       WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.object_type = 'table'
         AND t.relid <> pg_catalog.pg_partition_root(t.relid)
         AND EXISTS (SELECT 1 FROM pg_catalog.pg_trigger g
                      WHERE g.tgrelid = pg_catalog.pg_partition_root(t.relid) AND g.tgname = 'asyncai_watch_insert')
         AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger g
                          WHERE g.tgrelid = t.relid AND g.tgname = 'asyncai_watch_insert')
    LOOP
      PERFORM asyncai_watch.add_triggers(part);
    END LOOP;
    SELECT jsonb_agg(DISTINCT d.objid::int8) FILTER (WHERE d.classid = 'pg_catalog.pg_class'::regclass),
           bool_or(d.object_type = 'trigger' AND d.object_identity LIKE 'asyncai\_watch\_%')
             OR bool_or(d.objid IS NULL)  -- GRANT / REVOKE name no object here
      INTO oids, ours
      FROM pg_event_trigger_ddl_commands() d WHERE d.schema_name IS DISTINCT FROM 'pg_temp';
  END IF;
  IF ours THEN
    payload := json_build_object('ddl', TG_TAG)::text;  -- no oids: every watch looks again
  ELSIF oids IS NOT NULL THEN
    payload := json_build_object('ddl', TG_TAG, 'oids', oids)::text;
    IF octet_length(payload) >= 8000 THEN
      payload := json_build_object('ddl', TG_TAG)::text;
    END IF;
  END IF;
  IF payload IS NOT NULL THEN
    PERFORM pg_notify('asyncai_watch', payload);
  END IF;
END
$fn$
"""

_EVENT_TRIGGERS: Final = (("asyncai_watch_ddl", "ddl_command_end"), ("asyncai_watch_drop", "sql_drop"))


@attrs.frozen
class TriggerReport:
    tables: tuple[TableName, ...]
    ddl: bool
    """Whether the DDL event triggers were installed (or removed): they need a superuser."""
    kept_function: bool = False
    """``--remove-triggers``: the shared function stays, other tables' triggers still use it."""
    retention: Retention | None = None
    """``--install-triggers``: what each table's durable change log keeps."""

    def text(self, verb: str) -> str:
        names = ", ".join(map(str, self.tables)) or "no table"
        ddl = (
            f"DDL event triggers {verb}"
            if self.ddl
            else "DDL event triggers skipped: they need a superuser (a dropped or altered table is then "
            "noticed at its next change, a reconnect or a restart)"
        )
        kept = (
            "; kept asyncai_watch.notify_rows(): other tables' triggers use it" if self.kept_function else ""
        )
        log = f"; the change log keeps {self.retention.text()}" if self.retention is not None else ""
        return f"asyncai-watch triggers {verb} on {names}; {ddl}{kept}{log}"


Conn = psycopg.Connection[tuple[Any, ...]]


def _missing(conn: Conn, tables: Sequence[TableName]) -> list[TableName]:
    found = conn.execute(
        "SELECT n.nspname::text, c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE c.relkind IN ('r', 'p') AND (n.nspname, c.relname) IN (SELECT * FROM unnest(%s::text[], %s::text[]))",
        ([t.schema for t in tables], [t.name for t in tables]),
    ).fetchall()
    there = {TableName(s, n) for s, n in found}
    return [t for t in tables if t not in there]


def _superuser(conn: Conn) -> bool:
    row = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
    return bool(row and row[0])


def _define(conn: Conn, name: str, definition: str) -> None:
    """Create the schema and function unless they are there as they should be: a table owner who
    may not create schemas, or replace a function another role made, can still add its triggers."""
    body = definition.split("$fn$")[1]
    found = conn.execute(
        "SELECT p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
        " WHERE n.nspname = %s AND p.proname = %s",
        (SCHEMA, name),
    ).fetchone()
    if found is not None and found[0] == body:
        return
    there = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (SCHEMA,)).fetchone()
    if there is None:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(SCHEMA)))
    conn.execute(sql.SQL(definition))


def install_triggers(
    dsn: str, tables: Sequence[TableName], retention: Retention = DEFAULT_RETENTION
) -> TriggerReport:
    """Install (or refresh, or upgrade an older install of) the triggers and the durable change
    capture (capture.py) on ``tables``; raise ``psycopg.Error`` or ValueError."""
    with psycopg.connect(dsn) as conn, conn.transaction():
        missing = _missing(conn, tables)
        if missing:
            raise ValueError(
                f"{', '.join(map(str, missing))}: no such table (a view or other relation cannot carry "
                "these triggers); nothing was installed"
            )
        _define(conn, "notify_rows", _ROW_FUNCTION % {"max_keys": MAX_KEYS})
        _define(conn, "add_triggers", _WATCH_FUNCTION)
        for t in tables:
            # The table and, when it is partitioned, every partition (a statement on a partition
            # fires only that partition's statement triggers).
            conn.execute(
                "SELECT asyncai_watch.add_triggers(r) FROM"
                " (SELECT %s::regclass AS r UNION SELECT relid FROM pg_partition_tree(%s::regclass)) x",
                (sql.Identifier(t.schema, t.name).as_string(conn),) * 2,
            )
        install_capture(conn, tables, retention)
        ddl = _superuser(conn)
        if ddl:
            _define(conn, "notify_ddl", _DDL_FUNCTION)
            for name, event in _EVENT_TRIGGERS:
                conn.execute(sql.SQL("DROP EVENT TRIGGER IF EXISTS {}").format(sql.Identifier(name)))
                conn.execute(
                    sql.SQL(
                        "CREATE EVENT TRIGGER {} ON " + event + " EXECUTE FUNCTION asyncai_watch.notify_ddl()"
                    ).format(sql.Identifier(name))
                )
    return TriggerReport(tables=tuple(tables), ddl=ddl, retention=retention)


def remove_triggers(dsn: str, tables: Sequence[TableName]) -> TriggerReport:
    """Drop the triggers from ``tables`` (those that exist); drop the functions once nothing uses them."""
    with psycopg.connect(dsn) as conn, conn.transaction():
        missing = set(_missing(conn, tables))
        for t in tables:
            if t in missing:
                continue
            tree = conn.execute(
                "SELECT n.nspname::text, c.relname::text FROM"
                " (SELECT %s::regclass AS r UNION SELECT relid FROM pg_partition_tree(%s::regclass)) x"
                " JOIN pg_class c ON c.oid = x.r JOIN pg_namespace n ON n.oid = c.relnamespace",
                (sql.Identifier(t.schema, t.name).as_string(conn),) * 2,
            ).fetchall()
            for schema, name in tree:
                table = sql.Identifier(schema, name)
                for trigger in TRIGGER_NAMES:
                    conn.execute(
                        sql.SQL("DROP TRIGGER IF EXISTS {} ON {}").format(sql.Identifier(trigger), table)
                    )
        remove_capture(conn, [t for t in tables if t not in missing])
        ddl = _superuser(conn)
        still_used = conn.execute(
            "SELECT count(*) FROM pg_trigger g JOIN pg_proc p ON p.oid = g.tgfoid"
            " JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = %s AND p.proname = 'notify_rows'",
            (SCHEMA,),
        ).fetchone()
        kept = bool(still_used and still_used[0])
        if not kept:
            if ddl:
                for name, _event in _EVENT_TRIGGERS:
                    conn.execute(sql.SQL("DROP EVENT TRIGGER IF EXISTS {}").format(sql.Identifier(name)))
                conn.execute(
                    sql.SQL("DROP FUNCTION IF EXISTS {}.notify_ddl()").format(sql.Identifier(SCHEMA))
                )
            conn.execute(
                sql.SQL("DROP FUNCTION IF EXISTS {}.add_triggers(regclass)").format(sql.Identifier(SCHEMA))
            )
            conn.execute(sql.SQL("DROP FUNCTION IF EXISTS {}.notify_rows()").format(sql.Identifier(SCHEMA)))
            try:
                with conn.transaction():  # a savepoint: the schema goes only once it is empty
                    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} RESTRICT").format(sql.Identifier(SCHEMA)))
            except psycopg.errors.DependentObjectsStillExist:
                pass  # e.g. the DDL function, which only a superuser may drop
    return TriggerReport(tables=tuple(t for t in tables if t not in missing), ddl=ddl, kept_function=kept)
