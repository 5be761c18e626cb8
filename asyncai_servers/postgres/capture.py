"""Durable change capture: the ``pg-events://SCHEMA/TABLE`` log kept in the database itself.

Why triggers and a table, not logical decoding (docs/servers/postgres.md has the measurement):
the server serves as a role that may only read, and a replication slot needs ``wal_level =
logical`` (a restart of PostgreSQL to turn on), a role with ``REPLICATION``, and a reader that
advances the slot: a slot nobody reads holds WAL without bound. Triggers need only the tables'
owner, already needed for the ``NOTIFY`` triggers, and the log lives in ordinary tables that
``pg_dump``, backups and replicas carry.

How a change becomes an event, all in the writer's transaction:

1. A row trigger (``asyncai_watch_capture_row``; ``..._truncate`` for ``TRUNCATE``) appends
   each changed row to ``asyncai_watch.changes``: the table's oid, the transaction id
   (``pg_current_xact_id()``), the operation, the row before and after (``row_to_json``).
2. The first change of a transaction to a table also queues a deferred constraint trigger
   (``seal``), which runs at ``COMMIT``: it takes a per-table advisory lock, numbers the
   transaction's changes with the table's next seqs and records the range in
   ``asyncai_watch.xacts``. The lock is held until the transaction ends, so seqs are handed
   out in commit order: a transaction that started first but commits last gets the higher
   seqs, and a reader that sees a seq sees every lower one. The counters are sequences (not
   rows), so writers at ``REPEATABLE READ`` or ``SERIALIZABLE`` do not collide on them.
3. Every 256 seqs (and each time the log grows by a sixteenth of its size cap) the committing
   writer trims the table's log to its retention, by age and by size
   (``--retain-age``/``--retain-size`` at ``--install-triggers``): the oldest transactions go
   first, the newest is always kept. A reader behind them gets a ``GAP`` naming the retention.

The server reads with :func:`read_log` (one statement: the log's header and the events after a
position) through a ``SECURITY DEFINER`` function that checks the reading role may ``SELECT``
the table: the log holds row images, and only those who may read the table may read its log.
The ``seq`` a client sees is the database's, so it is the same across a restart of the server,
a lost ``LISTEN`` connection or a restart of PostgreSQL, and the log's ``log_id`` (made at
install) changes only when the log starts over (the table was dropped and installed again).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import timedelta
from typing import Any, Final

import attrs
import msgspec
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from asyncai_servers.postgres.config import TableName
from asyncai_servers.postgres.rowset import key_text
from asyncai_watch.server.eventlog import dumps

__all__ = [
    "CAPTURE_TRIGGERS",
    "DEFAULT_RETENTION",
    "LogPage",
    "Retention",
    "expire",
    "install_capture",
    "log_body",
    "log_body_where",
    "parse_age",
    "parse_size",
    "read_log",
    "read_log_where",
    "remove_capture",
]

CAPTURE_TRIGGERS: Final = ("asyncai_watch_capture_row", "asyncai_watch_capture_truncate")
TRIM_EVERY: Final = 256
"""The committing writer checks the retention each time the log passes a multiple of this many seqs."""

Conn = psycopg.Connection[tuple[Any, ...]]


@attrs.frozen
class Retention:
    """How much of each table's log the database keeps: changes younger than ``max_age`` and at
    most ``max_bytes`` of them (PostgreSQL's ``pg_column_size`` of the stored rows)."""

    max_age: timedelta = timedelta(days=7)
    max_bytes: int = 256 << 20

    def text(self) -> str:
        return (
            f"changes of the last {format_age(self.max_age)}, at most {format_size(self.max_bytes)} per table"
        )


DEFAULT_RETENTION: Final = Retention()

_AGE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*", re.IGNORECASE)
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(b|kb|mb|gb)?\s*", re.IGNORECASE)
_AGE_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_SIZE_UNITS: Final = {"b": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30}


def parse_age(text: str) -> timedelta:
    """``30s``, ``15m``, ``12h``, ``7d`` (a bare number is seconds); raise ValueError saying what is accepted."""
    m = _AGE.fullmatch(text)
    if m is None or float(m[1]) <= 0:
        raise ValueError(
            f"--retain-age expects a positive number with s, m, h or d (e.g. 7d, 12h), got {text!r}"
        )
    return timedelta(seconds=float(m[1]) * _AGE_UNITS[(m[2] or "s").lower()])


def parse_size(text: str) -> int:
    """``64kB``, ``256MB``, ``2GB`` (a bare number is bytes); raise ValueError saying what is accepted."""
    m = _SIZE.fullmatch(text)
    if m is None or float(m[1]) < 1:
        raise ValueError(
            f"--retain-size expects a size with B, kB, MB or GB (e.g. 256MB), at least 1 byte, got {text!r}"
        )
    return int(float(m[1]) * _SIZE_UNITS[(m[2] or "b").lower()])


def format_age(age: timedelta) -> str:
    seconds = age.total_seconds()
    for unit, name in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= unit and seconds % unit == 0:
            return f"{int(seconds // unit)}{name}"
    return f"{seconds:g}s"


def format_size(size: int) -> str:
    for unit, name in ((1 << 30, "GB"), (1 << 20, "MB"), (1 << 10, "kB")):
        if size >= unit and size % unit == 0:
            return f"{size // unit}{name}"
    return f"{size}B"


_TABLES = r"""
CREATE TABLE IF NOT EXISTS asyncai_watch.changes (
  id bigint GENERATED ALWAYS AS IDENTITY,
  relid oid NOT NULL,
  xid xid8 NOT NULL,
  op "char" NOT NULL,
  old json,
  new json,
  first boolean NOT NULL DEFAULT false
);
CREATE INDEX IF NOT EXISTS changes_xact ON asyncai_watch.changes (relid, xid, id);
CREATE TABLE IF NOT EXISTS asyncai_watch.xacts (
  relid oid NOT NULL,
  last_seq bigint NOT NULL,
  n bigint NOT NULL,
  xid xid8 NOT NULL,
  cum bigint NOT NULL,
  at timestamptz NOT NULL,
  PRIMARY KEY (relid, last_seq)
);
CREATE TABLE IF NOT EXISTS asyncai_watch.logs (
  relid oid PRIMARY KEY,
  log_id text NOT NULL,
  max_age interval NOT NULL,
  max_bytes bigint NOT NULL
);
REVOKE ALL ON asyncai_watch.changes, asyncai_watch.xacts, asyncai_watch.logs FROM PUBLIC;
"""
# cum: the bytes the table's log took before this transaction (running total, for the size cap).

_CAPTURE_FUNCTION = r"""
CREATE OR REPLACE FUNCTION asyncai_watch.capture() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  -- A partition's changes go to its root's log (row triggers are cloned onto partitions), and to
  -- its own too when it is captured itself (a config may name a partition).
  root oid := coalesce(pg_partition_root(TG_RELID), TG_RELID);
  rels oid[] := ARRAY[root];
  rel oid;
  mark text;
  first boolean;
  part json;
BEGIN
  IF root <> TG_RELID THEN
    part := json_build_object('partition', format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME));
    IF EXISTS (SELECT 1 FROM asyncai_watch.logs l WHERE l.relid = TG_RELID) THEN
      rels := CASE WHEN EXISTS (SELECT 1 FROM asyncai_watch.logs l WHERE l.relid = root)
                   THEN ARRAY[root, TG_RELID] ELSE ARRAY[TG_RELID] END;
    END IF;
  END IF;
  FOREACH rel IN ARRAY rels LOOP
    -- The first change of this transaction to this table queues the commit-time seal (a
    -- transaction-local setting: it reverts with a rolled-back subtransaction, as the row does).
    mark := 'asyncai_watch.x' || rel::text;
    first := current_setting(mark, true) IS DISTINCT FROM '1';
    IF first THEN
      PERFORM set_config(mark, '1', true);
    END IF;
    IF TG_OP = 'INSERT' THEN
      INSERT INTO asyncai_watch.changes (relid, xid, op, new, first)
        VALUES (rel, pg_current_xact_id(), 'I', row_to_json(NEW), first);
    ELSIF TG_OP = 'UPDATE' THEN
      INSERT INTO asyncai_watch.changes (relid, xid, op, old, new, first)
        VALUES (rel, pg_current_xact_id(), 'U', row_to_json(OLD), row_to_json(NEW), first);
    ELSIF TG_OP = 'DELETE' THEN
      INSERT INTO asyncai_watch.changes (relid, xid, op, old, first)
        VALUES (rel, pg_current_xact_id(), 'D', row_to_json(OLD), first);
    ELSE
      -- (on each leaf partition: a TRUNCATE fires the statement triggers of the tables it empties)
      INSERT INTO asyncai_watch.changes (relid, xid, op, new, first)
        VALUES (rel, pg_current_xact_id(), 'T', CASE WHEN rel <> TG_RELID THEN part END, first);
    END IF;
  END LOOP;
  RETURN NULL;
END
$fn$
"""

_SEAL_FUNCTION = r"""
CREATE OR REPLACE FUNCTION asyncai_watch.seal() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  n bigint;
  b bigint;
  last bigint;
  cum bigint;
  seqs regclass := to_regclass('asyncai_watch.seq_' || NEW.relid::text);
  sizes regclass := to_regclass('asyncai_watch.bytes_' || NEW.relid::text);
  lg asyncai_watch.logs;
BEGIN
  SELECT count(*), coalesce(sum(pg_column_size(c.*)), 0) INTO n, b
    FROM asyncai_watch.changes c WHERE c.relid = NEW.relid AND c.xid = NEW.xid;
  IF n = 0 OR seqs IS NULL OR sizes IS NULL THEN
    RETURN NULL;  -- (no counters: the capture was half removed; never fail the writer's commit)
  END IF;
  -- Held to the end of the transaction: the next committer of this table numbers after us.
  PERFORM pg_advisory_xact_lock(1634298211, NEW.relid::int4);
  last := coalesce(pg_sequence_last_value(seqs), 0);
  cum := coalesce(pg_sequence_last_value(sizes), 0);
  PERFORM setval(seqs, last + n), setval(sizes, cum + b);
  INSERT INTO asyncai_watch.xacts (relid, last_seq, n, xid, cum, at)
    VALUES (NEW.relid, last + n, n, NEW.xid, cum, clock_timestamp());
  SELECT * INTO lg FROM asyncai_watch.logs WHERE relid = NEW.relid;
  IF FOUND AND ((last + n) / %(every)s <> last / %(every)s
                OR (cum + b) / greatest(lg.max_bytes / 16, 1) <> cum / greatest(lg.max_bytes / 16, 1)) THEN
    PERFORM asyncai_watch.trim(NEW.relid, last + n, cum + b, lg.max_age, lg.max_bytes);
  END IF;
  RETURN NULL;
END
$fn$
"""

_TRIM_FUNCTION = r"""
CREATE OR REPLACE FUNCTION asyncai_watch.trim(rel oid, newest bigint, total bigint, max_age interval, max_bytes bigint)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  keep bigint;
  xids xid8[];
BEGIN
  -- The oldest transaction still within both limits; everything before it goes.
  SELECT min(x.last_seq) INTO keep FROM asyncai_watch.xacts x
   WHERE x.relid = rel AND x.cum >= total - max_bytes AND x.at >= clock_timestamp() - max_age;
  keep := least(coalesce(keep, newest), newest);  -- the newest transaction always stays
  WITH gone AS (
    DELETE FROM asyncai_watch.xacts x WHERE x.relid = rel AND x.last_seq < keep RETURNING x.xid
  )
  SELECT array_agg(gone.xid) INTO xids FROM gone;
  -- ``= ANY``: the index on both columns, whatever the table's statistics say.
  DELETE FROM asyncai_watch.changes c WHERE c.relid = rel AND c.xid = ANY (xids);
END
$fn$
"""

_EXPIRE_FUNCTION = r"""
CREATE OR REPLACE FUNCTION asyncai_watch.expire(rel oid) RETURNS float8 LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  lg asyncai_watch.logs;
  newest bigint;
  keep bigint;
  xids xid8[];
  oldest timestamptz;
BEGIN
  -- The age retention, applied on the server's timer (the writers' trims run every 256 seqs): the
  -- oldest transactions older than max_age go, the newest always stays. Answers the seconds until
  -- the next one ages out (max_age when none is kept but the newest), or NULL (no such log).
  SELECT * INTO lg FROM asyncai_watch.logs l WHERE l.relid = rel;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  SELECT x.last_seq INTO newest FROM asyncai_watch.xacts x WHERE x.relid = rel ORDER BY x.last_seq DESC LIMIT 1;
  SELECT min(x.last_seq) INTO keep FROM asyncai_watch.xacts x
   WHERE x.relid = rel AND x.at >= clock_timestamp() - lg.max_age;
  keep := least(coalesce(keep, newest), newest);
  IF keep IS NOT NULL THEN
    WITH gone AS (
      DELETE FROM asyncai_watch.xacts x WHERE x.relid = rel AND x.last_seq < keep RETURNING x.xid
    )
    SELECT array_agg(gone.xid) INTO xids FROM gone;
    IF xids IS NOT NULL THEN
      DELETE FROM asyncai_watch.changes c WHERE c.relid = rel AND c.xid = ANY (xids);
    END IF;
  END IF;
  SELECT min(x.at) INTO oldest FROM asyncai_watch.xacts x WHERE x.relid = rel AND x.last_seq < newest;
  RETURN extract(epoch FROM coalesce(oldest, clock_timestamp()) + lg.max_age - clock_timestamp());
END
$fn$
"""

_READ_FUNCTION = r"""
CREATE OR REPLACE FUNCTION asyncai_watch.read_log(rel oid, reader_log text, after bigint, lim integer)
RETURNS TABLE (log_id text, first_seq bigint, last_seq bigint, max_age interval, max_bytes bigint,
               seq bigint, txid xid8, op "char", old json, new json, at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  lg asyncai_watch.logs;
  lo bigint;
  hi bigint;
BEGIN
  IF NOT has_table_privilege(session_user, rel, 'SELECT') THEN
    RAISE EXCEPTION 'permission denied for the change log of table %%', rel::regclass
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  SELECT * INTO lg FROM asyncai_watch.logs l WHERE l.relid = rel;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'table %% has no change log: run --install-triggers', rel::regclass
      USING ERRCODE = 'undefined_object';
  END IF;
  SELECT x.last_seq - x.n + 1 INTO lo FROM asyncai_watch.xacts x WHERE x.relid = rel ORDER BY x.last_seq LIMIT 1;
  SELECT x.last_seq INTO hi FROM asyncai_watch.xacts x WHERE x.relid = rel ORDER BY x.last_seq DESC LIMIT 1;
  hi := coalesce(hi, 0);
  lo := coalesce(lo, hi + 1);
  -- A reader without a position, or with one in another log (the log started over): the newest
  -- ``lim`` events.
  IF reader_log IS DISTINCT FROM lg.log_id OR after IS NULL THEN
    after := hi - lim;
  END IF;
  RETURN QUERY SELECT lg.log_id, lo, hi, lg.max_age, lg.max_bytes, NULL::bigint, NULL::xid8, NULL::"char",
                      NULL::json, NULL::json, NULL::timestamptz;
  RETURN QUERY
    SELECT NULL::text, NULL::bigint, NULL::bigint, NULL::interval, NULL::bigint, e.seq, e.xid, e.op, e.old, e.new, e.at
      FROM (SELECT x.last_seq - x.n + c.nth AS seq, x.xid, c.op, c.old, c.new, x.at
              FROM (SELECT * FROM asyncai_watch.xacts x WHERE x.relid = rel AND x.last_seq > after
                     ORDER BY x.last_seq LIMIT lim) x
              -- Per transaction, by its xid (a lateral lookup: the index on both columns, whatever
              -- the table's statistics say).
              CROSS JOIN LATERAL (
                SELECT row_number() OVER (ORDER BY c.id) AS nth, c.op, c.old, c.new
                  FROM asyncai_watch.changes c WHERE c.relid = rel AND c.xid = x.xid) c) e
     WHERE e.seq > after ORDER BY e.seq LIMIT lim;
END
$fn$
"""

_FUNCTIONS: Final = (
    ("capture", _CAPTURE_FUNCTION),
    ("seal", _SEAL_FUNCTION % {"every": TRIM_EVERY}),
    ("trim", _TRIM_FUNCTION),
    ("read_log", _READ_FUNCTION % {}),
    ("expire", _EXPIRE_FUNCTION),
)


def _define(conn: Conn, name: str, definition: str) -> None:
    body = definition.split("$fn$")[1]
    found = conn.execute(
        "SELECT p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
        " WHERE n.nspname = 'asyncai_watch' AND p.proname = %s",
        (name,),
    ).fetchone()
    if found is None or found[0] != body:
        conn.execute(sql.SQL(definition))


def _relid(conn: Conn, table: TableName) -> int:
    row = conn.execute(
        "SELECT c.oid::int8 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relname = %s",
        (table.schema, table.name),
    ).fetchone()
    if row is None:
        raise ValueError(f"{table}: no such table")
    return int(row[0])


def install_capture(
    conn: Conn, tables: Sequence[TableName], retention: Retention = DEFAULT_RETENTION
) -> None:
    """Create (or upgrade) the log's tables and functions and capture ``tables``; in the caller's
    transaction, with the ``asyncai_watch`` schema already there. A table's log and ``log_id``
    survive a re-install (only its retention is updated), so readers keep their positions."""
    conn.execute(sql.SQL(_TABLES))
    for name, definition in _FUNCTIONS:
        _define(conn, name, definition)
    # Readers call read_log (it checks they may read the table); nobody but the seal trims.
    conn.execute("GRANT USAGE ON SCHEMA asyncai_watch TO PUBLIC")
    conn.execute(
        "REVOKE ALL ON FUNCTION asyncai_watch.trim(oid, bigint, bigint, interval, bigint) FROM PUBLIC"
    )
    # Logs of tables that are gone (dropped, or dropped and made again: a new oid, a new log).
    for (relid,) in conn.execute(
        "SELECT l.relid::int8 FROM asyncai_watch.logs l WHERE NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = l.relid)"
    ).fetchall():
        _drop_log(conn, int(relid))
    there = conn.execute(
        "SELECT 1 FROM pg_trigger WHERE tgname = 'asyncai_watch_seal' AND tgrelid = 'asyncai_watch.changes'::regclass"
    ).fetchone()
    if there is None:
        conn.execute(
            "CREATE CONSTRAINT TRIGGER asyncai_watch_seal AFTER INSERT ON asyncai_watch.changes"
            " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.first) EXECUTE FUNCTION asyncai_watch.seal()"
        )
    for t in tables:
        table = sql.Identifier(t.schema, t.name)
        relid = _relid(conn, t)
        for kind in ("seq", "bytes"):
            conn.execute(
                sql.SQL("CREATE SEQUENCE IF NOT EXISTS {} AS bigint MINVALUE 0 START 0").format(
                    sql.Identifier("asyncai_watch", f"{kind}_{relid}")
                )
            )
        conn.execute(
            "INSERT INTO asyncai_watch.logs (relid, log_id, max_age, max_bytes)"
            " VALUES (%s, md5(random()::text || clock_timestamp()::text || %s::text), %s, %s)"
            " ON CONFLICT (relid) DO UPDATE SET max_age = EXCLUDED.max_age, max_bytes = EXCLUDED.max_bytes",
            (relid, relid, retention.max_age, retention.max_bytes),
        )
        _drop_triggers(conn, relid)
        if not _cloned(conn, relid):  # (a partition of a captured table has its root's, cloned)
            conn.execute(
                sql.SQL(
                    "CREATE TRIGGER {} AFTER INSERT OR UPDATE OR DELETE ON {} FOR EACH ROW"
                    " EXECUTE FUNCTION asyncai_watch.capture()"
                ).format(sql.Identifier(CAPTURE_TRIGGERS[0]), table)
            )
        # TRUNCATE fires the statement triggers of each table it empties, and those are not
        # cloned onto partitions: every leaf gets one (a partitioned table holds no rows itself),
        # and the DDL event trigger gives one to a partition made later (triggers.add_triggers).
        for (leaf,) in conn.execute(
            "SELECT relid::regclass::text FROM pg_partition_tree(%s::oid::regclass) WHERE isleaf"
            " UNION SELECT c.oid::regclass::text FROM pg_class c WHERE c.oid = %s AND c.relkind = 'r'",
            (relid, relid),
        ).fetchall():
            conn.execute(sql.SQL(_TRUNCATE_TRIGGER % {"rel": leaf}))


def _cloned(conn: Conn, relid: int) -> bool:
    """Whether the table carries the row capture trigger cloned from a partitioned table above it."""
    return (
        conn.execute(
            "SELECT 1 FROM pg_trigger WHERE tgrelid = %s AND tgname = %s AND tgparentid <> 0",
            (relid, CAPTURE_TRIGGERS[0]),
        ).fetchone()
        is not None
    )


def _drop_triggers(conn: Conn, relid: int) -> None:
    """Drop the capture triggers of a table and its partitions, except the clones (which go with
    the partitioned table's, and may not be dropped alone)."""
    for rel, name in conn.execute(
        "SELECT g.tgrelid::regclass::text, g.tgname::text FROM pg_trigger g"
        " WHERE (g.tgrelid = %s OR g.tgrelid IN (SELECT relid FROM pg_partition_tree(%s::oid::regclass)))"
        " AND g.tgname = ANY (%s) AND g.tgparentid = 0",
        (relid, relid, list(CAPTURE_TRIGGERS)),
    ).fetchall():
        conn.execute(sql.SQL("DROP TRIGGER IF EXISTS {} ON {}").format(sql.Identifier(name), sql.SQL(rel)))


_TRUNCATE_TRIGGER = (
    "DROP TRIGGER IF EXISTS asyncai_watch_capture_truncate ON %(rel)s;"
    " CREATE TRIGGER asyncai_watch_capture_truncate AFTER TRUNCATE ON %(rel)s"
    " FOR EACH STATEMENT EXECUTE FUNCTION asyncai_watch.capture()"
)


def _drop_log(conn: Conn, relid: int) -> None:
    conn.execute("DELETE FROM asyncai_watch.changes WHERE relid = %s", (relid,))
    conn.execute("DELETE FROM asyncai_watch.xacts WHERE relid = %s", (relid,))
    conn.execute("DELETE FROM asyncai_watch.logs WHERE relid = %s", (relid,))
    for kind in ("seq", "bytes"):
        conn.execute(
            sql.SQL("DROP SEQUENCE IF EXISTS {}").format(sql.Identifier("asyncai_watch", f"{kind}_{relid}"))
        )


def remove_capture(conn: Conn, tables: Sequence[TableName]) -> None:
    """Take the capture off ``tables`` and drop their logs; the shared tables and functions go
    once no table is captured. In the caller's transaction."""
    there = conn.execute("SELECT to_regclass('asyncai_watch.logs') IS NOT NULL").fetchone()
    for t in tables:
        relid = _relid(conn, t)
        _drop_triggers(conn, relid)
        if there and there[0]:
            _drop_log(conn, relid)
    left = conn.execute(
        "SELECT count(*) FROM pg_trigger WHERE tgname = %s", (CAPTURE_TRIGGERS[0],)
    ).fetchone()
    if left is not None and left[0] == 0:
        conn.execute("DROP TABLE IF EXISTS asyncai_watch.changes, asyncai_watch.xacts, asyncai_watch.logs")
        for name, _definition in _FUNCTIONS:
            conn.execute(sql.SQL("DROP FUNCTION IF EXISTS {}").format(sql.Identifier("asyncai_watch", name)))


_LOG_READ = sql.SQL(
    "SELECT log_id, first_seq, last_seq, extract(epoch FROM max_age)::float8, max_bytes,"
    " seq, txid::text, op::text, old::text, new::text, to_json(at)::text"
    " FROM asyncai_watch.read_log(%s, %s, %s, %s)"
)
_TYPES: Final = {"I": "ADDED", "U": "MODIFIED", "D": "DELETED", "T": "TRUNCATED"}
_fields = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode


EXPIRE: Final = sql.SQL("SELECT asyncai_watch.expire(to_regclass(%s)::oid)")
"""Apply one table's age retention now (:func:`expire`'s answer: seconds to the next expiry)."""


def expire(table: TableName) -> tuple[sql.SQL, Sequence[Any]]:
    """The statement applying ``table``'s age retention; it answers the seconds until the next
    change ages out, or NULL when the table has no log (run it in a read-write transaction)."""
    return EXPIRE, (sql.Identifier(table.schema, table.name).as_string(None),)


def read_log(relid: int, after: tuple[str, int] | None, limit: int) -> tuple[sql.SQL, Sequence[Any]]:
    """The statement reading a table's log: a header row (``log_id``, first and last seq kept,
    retention), then up to ``limit`` events after the reader's position ``(log_id, seq)`` (none,
    or one in another log: the newest ``limit``)."""
    log_id, seq = after if after is not None else (None, None)
    return _LOG_READ, (relid, log_id, seq, limit)


def read_log_where(
    relid: int,
    table: TableName,
    where: Sequence[tuple[str, str]],
    after: tuple[str, int] | None,
    scan: int,
) -> tuple[sql.Composed, Sequence[Any]]:
    """:func:`read_log` of a filtered view: the header row, then the events among the next
    ``scan`` of the table's log whose row before or after matches ``where`` (compared as the
    column's type compares them: the row image read back into the table's row type), each with
    two more columns, whether the row before and the row after match; the header's last column
    is the newest seq looked at."""
    t = sql.Identifier(table.schema, table.name)

    def matches(image: str) -> sql.Composable:
        return sql.SQL("({} IS NOT NULL AND {})").format(
            sql.Identifier("r", image),
            sql.SQL(" AND ").join(
                sql.SQL("(jsonb_populate_record(NULL::{t}, r.{i}::jsonb)).{c} = f.{c}").format(
                    t=t, i=sql.Identifier(image), c=sql.Identifier(c)
                )
                for c, _ in where
            ),
        )

    query = sql.SQL(
        "WITH r AS (SELECT * FROM asyncai_watch.read_log(%s, %s, %s, %s)),"
        " m AS (SELECT r.*, {old} AS om, {new} AS nm FROM r CROSS JOIN jsonb_populate_record(NULL::{t}, %s) AS f"
        " WHERE r.seq IS NOT NULL)"
        " SELECT log_id, first_seq, last_seq, extract(epoch FROM max_age)::float8, max_bytes,"
        " (SELECT max(seq) FROM r), NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM r WHERE r.seq IS NULL"
        " UNION ALL (SELECT NULL, NULL, NULL, NULL, NULL, seq, txid::text, op::text, old::text, new::text,"
        " to_json(at)::text, om, nm FROM m WHERE om OR nm OR op = 'T' ORDER BY seq)"
    ).format(old=matches("old"), new=matches("new"), t=t)
    log_id, seq = after if after is not None else (None, None)
    return query, (relid, log_id, seq, scan, Jsonb(dict(where)))


@attrs.frozen
class LogPage:
    """One read of a table's log as the event-log body, and whether more events follow it."""

    text: str
    more: bool


def log_body(
    rows: Sequence[Sequence[Any]], table: TableName, primary_key: Sequence[str], columns: Sequence[str] | None
) -> LogPage:
    """The body of a :func:`read_log` answer (pure): ``{"log_id", "last_seq", "first_seq",
    "retention", "events": [{"seq", "type", "key", "object", "old", "txid", "at"}]}``, rows as the
    text PostgreSQL made (``row_to_json``), projected to ``columns`` when the config names them."""
    head, events = rows[0], rows[1:]
    log_id, first, last, age, size = head[:5]
    out = [_event(row, _TYPES[row[7]], table, primary_key, columns) for row in events]
    more = bool(events) and int(events[-1][5]) < int(last)
    return LogPage(_body(log_id, int(last), int(first), age, size, out), more)


def log_body_where(
    rows: Sequence[Sequence[Any]],
    after: tuple[str, int] | None,
    page: int,
    scan: int,
    table: TableName,
    primary_key: Sequence[str],
    columns: Sequence[str] | None,
) -> LogPage:
    """The body of a :func:`read_log_where` answer (pure): :func:`log_body`'s, with at most
    ``page`` events, ``from_seq`` (the body holds every event of the view after it: seqs it
    skips were other rows') and ``last_seq`` the newest seq looked at (of at most ``scan``) (the reader goes on from
    there). A reader with a position gets the oldest ``page`` after it; one without (a baseline)
    the newest, as :func:`read_log` answers. A row updated into the filter is ``ADDED``, out of it
    ``DELETED``."""
    head = next(r for r in rows if r[0] is not None)
    events = [r for r in rows if r[0] is None]
    log_id, first, last, age, size, looked = head[:6]
    first, last = int(first), int(last)
    through = last if looked is None else int(looked)
    positioned = after is not None and after[0] == log_id
    # No position, or one in another log: the newest part of the log (read_log's choice).
    start = after[1] if after is not None and positioned else last - scan
    start = max(start, first - 1)  # what the log no longer holds is missed: the reader gets a GAP
    if len(events) > page and positioned:
        # A reader catching up: the oldest page, and it goes on from its last event.
        events = events[:page]
        through = int(events[-1][5])
    elif len(events) > page:
        # No position (a watch's baseline, or a log that started over): the newest page, as
        # read_log's unfiltered answer, so a new watch starts at the log's end and gets nothing
        # older as news; the body holds every event of the view after the last one left out.
        start = int(events[-page - 1][5])
        events = events[-page:]
    out: list[str] = []
    for row in events:
        op, om, nm = row[7], row[11], row[12]
        typ = _TYPES[op]
        if op == "U" and not om:
            typ = "ADDED"  # updated into the filter
        elif op == "U" and not nm:
            typ = "DELETED"  # updated out of it: the row as it left
            row = (*row[:9], row[8], *row[10:])
        out.append(_event(row, typ, table, primary_key, columns))
    return LogPage(_body(log_id, through, first, age, size, out, start), through < last)


def _body(
    log_id: str, last: int, first: int, age: Any, size: Any, events: list[str], start: int | None = None
) -> str:
    retention = Retention(max_age=timedelta(seconds=float(age)), max_bytes=int(size))
    covered = "" if start is None else f'"from_seq":{start},'
    return (
        f'{{"log_id":{dumps(log_id)},"last_seq":{last},"first_seq":{first},{covered}'
        f'"retention":{dumps(retention.text())},"events":[{",".join(events)}]}}'
    )


def _event(
    row: Sequence[Any], typ: str, table: TableName, primary_key: Sequence[str], columns: Sequence[str] | None
) -> str:
    seq, txid, _op, old, new = row[5:10]
    at = row[10]
    parts = [f'{{"seq":{int(seq)},"type":"{typ}"']
    if typ == "TRUNCATED":
        # A partition emptied alone: its name too (``new`` holds it).
        part = "" if new is None else f',"partition":{bytes(_fields(new)["partition"]).decode()}'
        parts.append(f',"object":{{"table":{dumps(str(table))}{part}}}')
    else:
        shown = _fields(new if new is not None else old)
        key = "[" + ",".join(bytes(shown[c]).decode() if c in shown else "null" for c in primary_key) + "]"
        parts.append(f',"key":{dumps(key_text(key))},"object":{_project(shown, new or old, columns)}')
        if typ == "MODIFIED":
            parts.append(f',"old":{_project(_fields(old), old, columns)}')
    parts.append(f',"txid":{int(txid)},"at":{at}}}')
    return "".join(parts)


def _project(fields: dict[str, msgspec.Raw], text: str, columns: Sequence[str] | None) -> str:
    if columns is None:
        return text
    return "{" + ",".join(f"{dumps(c)}:{bytes(fields[c]).decode()}" for c in columns if c in fields) + "}"
