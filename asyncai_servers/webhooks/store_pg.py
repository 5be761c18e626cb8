"""The same storage as :mod:`.store`, in PostgreSQL: several server replicas on one database.

The schema rules are the SQLite store's: ``UNIQUE(source, delivery_id)`` (a retry sent to any
replica is one row), each log a *view* with its own contiguous seqs and a ``log_id`` made once,
retention by age and count. What several replicas add:

- **Seqs without gaps or duplicates.** A transaction that appends to a source's logs first takes
  that source's transaction-level advisory lock, then reads the source's views (a statement
  after the lock, so under READ COMMITTED it sees every view committed before it: one a replica
  made a moment ago is appended to), and moves each view's ``last_seq`` (its counter row) in the
  same transaction. Appends to one source are thereby serial across replicas; sources do not
  wait on each other (a batch takes its sources' locks in name order: no deadlock).
- **No polling between replicas.** The appending transaction sends ``pg_notify`` on
  :data:`CHANNEL` naming the logs and objects it touched (delivered at commit, so a replica that
  hears it reads the delivery). Each replica ``LISTEN``s (:func:`listen`) and wakes its own
  listeners; it skips its own notifications (it woke its listeners after the commit already).
  A lost LISTEN connection is reconnected with a backoff on the injected clock, and each
  (re)connect wakes every listener: a notification sent while not listening is lost, the read
  it prompts is not.
- **Reads from one snapshot** (REPEATABLE READ, read-only): a page's ``last_seq`` and events agree.
- **Retention is a prefix**: by count, the oldest of each source; by age, everything up to the
  newest expired delivery of a source (replicas' clocks may differ a little; a log never loses a
  delivery in its middle).

When each filtered view was last read is kept per replica in memory and written (the newest of
the replicas' times) at each trim, so a read writes nothing. Past ``max_views`` filtered views,
making one drops the least recently used, of any source, under that source's lock too (only
tried: when that source is busy the cap is passed by one until the next view is made; two
replicas never wait on each other's locks in a cycle).

Synchronous (``psycopg``), like :class:`~.store.Store`: the server calls it one call at a time
on a worker thread. A connection found broken is replaced at the next call (the failed call
raised: its sender got a 503 and retries).
"""

from __future__ import annotations

import logging
import secrets
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final
from urllib.parse import parse_qsl

import anyio
import anyio.abc
import attrs
import msgspec
import psycopg

from asyncai_servers.webhooks.fields import Described
from asyncai_servers.webhooks.store import (
    LOG_PAGE,
    MAX_VIEWS,
    TRIM_EVERY,
    Inserted,
    LogPage,
    Retention,
    counts_of,
    empty_page,
    log_page,
    object_body,
)
from asyncai_servers.webhooks.uri import LogTarget, StateTarget
from asyncai_servers.webhooks.verify import Delivery
from asyncai_watch import Backoff
from asyncai_watch.clock import Clock, SystemClock
from asyncai_watch.server.eventlog import dumps

__all__ = ["CHANNEL", "Changed", "PgStore", "decode_notify", "listen", "password_in"]

log = logging.getLogger(__name__)

CHANNEL: Final = "asyncai_webhooks"
APP_NAME: Final = "asyncai-mcp-webhooks"
_LOCK_CLASS: Final = 0x77E6B0C5
"""This server's advisory-lock class (an int4); the second key is the source name's hash."""
_NOTIFY_MAX: Final = 7900
"""Bytes of a NOTIFY payload (PostgreSQL's cap is 8000): past it, the notification names sources only."""
RECONNECT: Final = Backoff(initial=1.0, cap=16.0, attempts=None)
_encode = msgspec.json.Encoder().encode

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS webhook_deliveries (
    id BIGSERIAL PRIMARY KEY,
    source TEXT NOT NULL,
    delivery_id TEXT NOT NULL,
    event TEXT NOT NULL,
    received DOUBLE PRECISION NOT NULL,
    fields TEXT NOT NULL,
    object_id TEXT,
    payload TEXT NOT NULL,
    UNIQUE (source, delivery_id)
);
CREATE INDEX IF NOT EXISTS webhook_deliveries_by_age ON webhook_deliveries (source, received);
CREATE TABLE IF NOT EXISTS webhook_views (
    id BIGSERIAL PRIMARY KEY,
    source TEXT NOT NULL,
    event TEXT NOT NULL,
    filter TEXT NOT NULL,
    log_id TEXT NOT NULL,
    last_seq BIGINT NOT NULL DEFAULT 0,
    used DOUBLE PRECISION NOT NULL,
    UNIQUE (source, event, filter)
);
CREATE TABLE IF NOT EXISTS webhook_entries (
    view BIGINT NOT NULL REFERENCES webhook_views (id) ON DELETE CASCADE,
    seq BIGINT NOT NULL,
    delivery BIGINT NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    PRIMARY KEY (view, seq)
);
CREATE INDEX IF NOT EXISTS webhook_entries_by_delivery ON webhook_entries (delivery);
CREATE TABLE IF NOT EXISTS webhook_objects (
    source TEXT NOT NULL,
    event TEXT NOT NULL,
    object_id TEXT NOT NULL,
    delivery BIGINT NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    PRIMARY KEY (source, event, object_id)
);
CREATE INDEX IF NOT EXISTS webhook_objects_by_delivery ON webhook_objects (delivery);
"""

Conn = psycopg.Connection[tuple[Any, ...]]


def password_in(dsn: str) -> bool:
    """Whether ``dsn`` (a URI or ``key=value`` string) carries a password."""
    from psycopg.conninfo import conninfo_to_dict

    return bool(conninfo_to_dict(dsn).get("password"))


@attrs.define(eq=False)
class _View:
    id: int
    target: LogTarget
    last_seq: int


def _target(source: str, event: str, filt: str) -> LogTarget:
    return LogTarget(source, event, tuple(sorted(parse_qsl(filt, keep_blank_values=True))))


def _lock(conn: Conn, source: str) -> None:
    conn.execute("SELECT pg_advisory_xact_lock(%s::int4, hashtext(%s))", (_LOCK_CLASS, source))


class PgStore:
    def __init__(
        self,
        dsn: str,
        *,
        retention: Retention = Retention(),  # noqa: B008  (frozen)
        max_views: int = MAX_VIEWS,
        kinds: Mapping[str, str] | None = None,
        now: Callable[[], float] = time.time,
        replica_id: str | None = None,
    ) -> None:
        self.dsn = dsn
        self.retention = retention
        self.max_views = max_views
        self.kinds: Mapping[str, str] = kinds or {}
        self.now = now
        self.replica_id = replica_id or uuid.uuid4().hex[:12]
        """Names this process in its notifications (it skips its own) and in ``application_name``."""
        self._used: dict[int, float] = {}
        self._since_trim = 0
        self._conn: Conn | None = None
        conn = self._connection()
        with conn.transaction():
            # Replicas starting together: one makes the tables, the others wait and find them.
            conn.execute("SELECT pg_advisory_xact_lock(%s::int4, 0)", (_LOCK_CLASS,))
            conn.execute(_SCHEMA)
        self.trim()

    def _connection(self) -> Conn:
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            if conn is not None:
                conn.close()
            self._conn = None
            conn = psycopg.connect(
                self.dsn,
                autocommit=True,  # transactions are explicit (conn.transaction())
                application_name=f"{APP_NAME} {self.replica_id}",
                keepalives=1,
                keepalives_idle=30,
                keepalives_interval=10,
                keepalives_count=3,
            )
            self._conn = conn
        return conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- writing ---------------------------------------------------------------------------------

    def insert(self, delivery: Delivery, described: Described) -> Inserted | None:
        return self.insert_many([(delivery, described)])[0]

    def insert_many(self, batch: Sequence[tuple[Delivery, Described]]) -> list[Inserted | None]:
        """Store each of ``batch`` and append it to its logs, all in one transaction (a group
        commit), in order; ``None`` for a delivery some replica already stored (a retry)."""
        now = self.now()
        conn = self._connection()
        out: list[Inserted | None] = []
        with conn.transaction():
            views: dict[str, dict[tuple[str, str], _View]] = {}
            for source in sorted({d.source for d, _ in batch}):
                _lock(conn, source)
                views[source] = {
                    (event, filt): _View(vid, _target(source, event, filt), last)
                    for vid, event, filt, last in conn.execute(
                        "SELECT id, event, filter, last_seq FROM webhook_views WHERE source = %s", (source,)
                    )
                }
            bumped: dict[int, _View] = {}
            for delivery, described in batch:
                out.append(self._insert(conn, delivery, described, now, views[delivery.source], bumped))
            if bumped:
                with conn.cursor() as cur:
                    cur.executemany(
                        "UPDATE webhook_views SET last_seq = %s WHERE id = %s",
                        [(v.last_seq, v.id) for v in bumped.values()],
                    )
                conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, self._notify_payload(out)))
        self._since_trim += len(batch)
        if self._since_trim >= TRIM_EVERY:
            self.trim()
        return out

    def _insert(
        self,
        conn: Conn,
        delivery: Delivery,
        described: Described,
        now: float,
        views: dict[tuple[str, str], _View],
        bumped: dict[int, _View],
    ) -> Inserted | None:
        for event in (delivery.event, ""):
            if (event, "") not in views:  # an unfiltered log is made with its first delivery
                (vid,) = conn.execute(
                    "INSERT INTO webhook_views (source, event, filter, log_id, used)"
                    " VALUES (%s, %s, '', %s, %s) RETURNING id",
                    (delivery.source, event, secrets.token_hex(8), now),
                ).fetchone() or (0,)
                views[(event, "")] = _View(vid, LogTarget(delivery.source, event), 0)
        appended = [v for v in views.values() if v.target.matches(delivery.event, described.fields)]
        # One round trip: the delivery, its entries (the next seq of each log) and its object; a
        # retry inserts no delivery, so nothing else either.
        row = conn.execute(
            "WITH d AS (INSERT INTO webhook_deliveries"
            " (source, delivery_id, event, received, fields, object_id, payload)"
            " VALUES (%(source)s, %(id)s, %(event)s, %(now)s, %(fields)s, %(object)s, %(payload)s)"
            " ON CONFLICT (source, delivery_id) DO NOTHING RETURNING id),"
            " e AS (INSERT INTO webhook_entries (view, seq, delivery)"
            " SELECT x.v, x.s, d.id FROM d CROSS JOIN unnest(%(views)s::bigint[], %(seqs)s::bigint[]) AS x(v, s)),"
            " o AS (INSERT INTO webhook_objects (source, event, object_id, delivery)"
            " SELECT %(source)s, %(event)s, %(object)s, d.id FROM d WHERE %(object)s::text IS NOT NULL"
            " ON CONFLICT (source, event, object_id) DO UPDATE SET delivery = EXCLUDED.delivery)"
            " SELECT id FROM d",
            {
                "source": delivery.source,
                "id": delivery.delivery_id,
                "event": delivery.event,
                "now": now,
                "fields": dumps(described.fields),
                "object": described.object_id,
                "payload": _encode(delivery.payload).decode(),
                "views": [v.id for v in appended],
                "seqs": [v.last_seq + 1 for v in appended],
            },
        ).fetchone()
        if row is None:
            return None
        for view in appended:
            view.last_seq += 1
            bumped[view.id] = view
        state = None
        if described.object_id is not None:
            state = StateTarget(delivery.source, delivery.event, described.object_id)
        return Inserted(row[0], tuple(v.target for v in appended), state)

    def _notify_payload(self, stored: Sequence[Inserted | None]) -> str:
        logs = {(t.source, t.event, t.filter_key) for i in stored if i is not None for t in i.logs}
        states = {
            (i.state.source, i.state.event, i.state.object_id)
            for i in stored
            if i is not None and i.state is not None
        }
        payload = _encode({"r": self.replica_id, "l": sorted(logs), "s": sorted(states)})
        if len(payload) > _NOTIFY_MAX:  # too much to name: every log and object of these sources
            sources = sorted({t[0] for t in logs})
            payload = _encode({"r": self.replica_id, "src": sources})
        return payload.decode()

    def ensure_view(self, target: LogTarget) -> bool:
        """Make the view of a filtered ``target`` (filled from its source's log); True when made now."""
        if not target.filter:
            return False
        conn = self._connection()
        key = (target.source, target.event, target.filter_key)
        exists = "SELECT id FROM webhook_views WHERE source = %s AND event = %s AND filter = %s"
        if conn.execute(exists, key).fetchone() is not None:
            return False
        now = self.now()
        with conn.transaction():
            _lock(conn, target.source)
            if conn.execute(exists, key).fetchone() is not None:  # another replica made it meanwhile
                return False
            (count,) = conn.execute("SELECT count(*) FROM webhook_views WHERE filter <> ''").fetchone() or (
                0,
            )
            if count >= self.max_views:
                self._write_used(conn)
                victim = conn.execute(
                    "SELECT id, source FROM webhook_views WHERE filter <> '' ORDER BY used LIMIT 1"
                ).fetchone()
                # The least recently used goes, with its entries (ON DELETE CASCADE), under its
                # source's lock too (a replica appending to it must not find it gone midway).
                # Only tried: when that source is busy, the cap is passed by one until the next.
                if victim is not None and (
                    victim[1] == target.source
                    or conn.execute(
                        "SELECT pg_try_advisory_xact_lock(%s::int4, hashtext(%s))", (_LOCK_CLASS, victim[1])
                    ).fetchone()
                    == (True,)
                ):
                    conn.execute("DELETE FROM webhook_views WHERE id = %s", (victim[0],))
            (vid,) = conn.execute(
                "INSERT INTO webhook_views (source, event, filter, log_id, used) VALUES (%s, %s, %s, %s, %s)"
                " RETURNING id",
                (*key, secrets.token_hex(8), now),
            ).fetchone() or (0,)
            rows = conn.execute(
                "SELECT d.id, d.event, d.fields FROM webhook_views v JOIN webhook_entries e ON e.view = v.id"
                " JOIN webhook_deliveries d ON d.id = e.delivery"
                " WHERE v.source = %s AND v.event = %s AND v.filter = '' ORDER BY e.seq",
                (target.source, target.event),
            ).fetchall()
            entries = [
                (vid, seq, did)
                for seq, (did, _event) in enumerate(
                    ((d, e) for d, e, f in rows if target.matches(e, msgspec.json.decode(f))), start=1
                )
            ]
            if entries:
                with conn.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO webhook_entries (view, seq, delivery) VALUES (%s, %s, %s)", entries
                    )
                conn.execute("UPDATE webhook_views SET last_seq = %s WHERE id = %s", (len(entries), vid))
        return True

    def _write_used(self, conn: Conn) -> None:
        if self._used:
            with conn.cursor() as cur:
                cur.executemany(
                    "UPDATE webhook_views SET used = GREATEST(used, %s) WHERE id = %s",
                    [(used, vid) for vid, used in self._used.items()],
                )
            self._used.clear()

    def trim(self) -> int:
        """Apply the retention (each source's oldest go first); the number of deliveries deleted."""
        self._since_trim = 0
        cutoff = self.now() - self.retention.max_age
        conn = self._connection()
        gone = 0
        with conn.transaction():
            self._write_used(conn)
        for (source,) in conn.execute("SELECT DISTINCT source FROM webhook_deliveries").fetchall():
            with conn.transaction():
                _lock(conn, source)
                row = conn.execute(
                    "SELECT GREATEST("
                    " (SELECT max(id) FROM webhook_deliveries WHERE source = %s AND received < %s),"
                    " (SELECT id FROM webhook_deliveries WHERE source = %s ORDER BY id DESC LIMIT 1 OFFSET %s))",
                    (source, cutoff, source, self.retention.max_count),
                ).fetchone()
                if row is not None and row[0] is not None:
                    cur = conn.execute(
                        "DELETE FROM webhook_deliveries WHERE source = %s AND id <= %s", (source, row[0])
                    )
                    gone += cur.rowcount
        return gone

    # -- reading ---------------------------------------------------------------------------------

    def read_log(self, target: LogTarget, after: tuple[str, int] | None, limit: int = LOG_PAGE) -> LogPage:
        self.ensure_view(target)
        conn = self._connection()
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            view = conn.execute(
                "SELECT id, log_id, last_seq FROM webhook_views WHERE source = %s AND event = %s AND filter = %s",
                (target.source, target.event, target.filter_key),
            ).fetchone()
            if view is None:  # an unfiltered log before its first delivery
                return empty_page(self.retention)
            vid, log_id, last_seq = view
            if target.filter:
                self._used[vid] = self.now()
            (first,) = conn.execute(
                "SELECT min(seq) FROM webhook_entries WHERE view = %s", (vid,)
            ).fetchone() or (None,)
            cols = "e.seq, d.delivery_id, d.event, d.received, d.fields, d.object_id, d.payload"
            join = "FROM webhook_entries e JOIN webhook_deliveries d ON d.id = e.delivery WHERE e.view = %s"
            if after is not None and after[0] == log_id:
                rows = conn.execute(
                    f"SELECT {cols} {join} AND e.seq > %s ORDER BY e.seq LIMIT %s", (vid, after[1], limit)
                ).fetchall()
            else:
                rows = conn.execute(
                    f"SELECT * FROM (SELECT {cols} {join} ORDER BY e.seq DESC LIMIT %s) AS newest ORDER BY seq",
                    (vid, limit),
                ).fetchall()
        return log_page(log_id, last_seq, first, self.retention, rows)

    def read_state(self, target: StateTarget) -> str:
        row = (
            self._connection()
            .execute(
                "SELECT d.delivery_id, d.received, d.fields, d.payload FROM webhook_objects o"
                " JOIN webhook_deliveries d ON d.id = o.delivery"
                " WHERE o.source = %s AND o.event = %s AND o.object_id = %s",
                (target.source, target.event, target.object_id),
            )
            .fetchone()
        )
        return object_body(target, row, self.kinds.get(target.source, "standard"))

    def counts(self) -> dict[str, dict[str, Any]]:
        return counts_of(
            self._connection().execute(
                "SELECT source, event, count(*), max(received) FROM webhook_deliveries GROUP BY source, event"
            )
        )


# -- hearing the other replicas ------------------------------------------------------------------


@attrs.frozen
class Changed:
    """What another replica's commit appended to (``sources``: anything of these sources)."""

    logs: tuple[LogTarget, ...] = ()
    states: tuple[StateTarget, ...] = ()
    sources: tuple[str, ...] = ()


class _Payload(msgspec.Struct):
    r: str
    l: list[tuple[str, str, str]] = []  # noqa: E741  (the wire's short names)
    s: list[tuple[str, str, str]] = []
    src: list[str] = []


_decode = msgspec.json.Decoder(_Payload).decode


def decode_notify(payload: str, replica_id: str) -> Changed | None:
    """A notification's payload; None when it is this replica's own or not one of ours."""
    try:
        p = _decode(payload)
    except msgspec.DecodeError:
        log.warning("ignored a notification on %s that is not ours: %.200s", CHANNEL, payload)
        return None
    if p.r == replica_id:
        return None
    return Changed(tuple(_target(*t) for t in p.l), tuple(StateTarget(*s) for s in p.s), tuple(p.src))


async def listen(
    dsn: str,
    replica_id: str,
    *,
    on_change: Callable[[Changed], None],
    on_connect: Callable[[], None],
    clock: Clock | None = None,
    backoff: Backoff = RECONNECT,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """``LISTEN`` for the other replicas' commits, for ever; ``task_status.started()`` once the
    first ``LISTEN`` is in place. ``on_connect`` runs after each ``LISTEN``: whatever was committed
    while not listening is found by the reads it prompts."""
    clock = clock if clock is not None else SystemClock()
    failures = 0
    started = False
    while True:
        conn: psycopg.AsyncConnection[tuple[Any, ...]] | None = None
        try:
            conn = await psycopg.AsyncConnection.connect(
                dsn,
                autocommit=True,
                application_name=f"{APP_NAME} {replica_id} listen",
                keepalives=1,
                keepalives_idle=30,
                keepalives_interval=10,
                keepalives_count=3,
            )
            await conn.execute(f"LISTEN {CHANNEL}")
        except psycopg.Error as exc:
            if conn is not None:
                with anyio.CancelScope(shield=True):
                    await conn.close()
            delay = backoff.delay(failures)
            assert delay is not None  # attempts=None: for ever
            failures += 1
            log.warning("LISTEN connect failed (%s); retrying in %g s", " ".join(str(exc).split()), delay)
            await clock.sleep_until(clock.now() + delay)
            continue
        failures = 0
        try:
            on_connect()
            if not started:
                started = True
                task_status.started()
            async for note in conn.notifies():
                change = decode_notify(note.payload, replica_id)
                if change is not None:
                    on_change(change)
        except psycopg.Error as exc:
            log.warning("LISTEN connection lost (%s); reconnecting", " ".join(str(exc).split()))
        finally:
            with anyio.CancelScope(shield=True):
                await conn.close()
