"""Durable, exactly-once storage of deliveries: one SQLite file in WAL mode (stdlib :mod:`sqlite3`).

A delivery is committed (``synchronous=FULL``: on disk, not only in the OS) before the receiver
answers 2xx, so a delivery the sender saw accepted survives a crash of the server or the machine.
``UNIQUE(source, delivery_id)`` makes the sender's retries of one delivery one row: the retry is
answered 2xx too (the sender must stop retrying) and appends nothing.

Event logs are *views*: the unfiltered log of each ``(source, event)`` and of each source, made
with its first delivery, and each filtered log (``?branch=main``), made with its first read or
listen and filled at once from what the source's log still holds. Each view numbers its own
entries 1, 2, 3 ... (seqs contiguous per URI, as event-log readers need) and has a ``log_id``
made once, so positions stay valid across restarts: a reader that comes back after a restart
reads on from its seq, with no GAP, as long as retention kept what it missed.

Retention (:class:`Retention`): a delivery older than ``max_age``, or not among its source's
newest ``max_count``, is deleted with its log entries, checked every :data:`TRIM_EVERY` inserts
and at start. A reader behind what is left gets a GAP naming the retention. A retry that comes
after its delivery was trimmed is stored again (GitHub and Stripe retry for up to 3 days).

Filtered views are capped (``max_views``); past the cap the least recently used one is dropped
(a reader of it then sees a new ``log_id``: a GAP ``reset``).

The methods are synchronous; the server calls them one at a time on a worker thread.
"""

from __future__ import annotations

import secrets
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Protocol
from urllib.parse import parse_qsl

import attrs
import msgspec

from asyncai_servers.webhooks.fields import Described, describe
from asyncai_servers.webhooks.uri import LogTarget, StateTarget
from asyncai_servers.webhooks.verify import Delivery
from asyncai_watch.server.eventlog import dumps

__all__ = [
    "LOG_PAGE",
    "MAX_VIEWS",
    "TRIM_EVERY",
    "DeliveryStore",
    "Inserted",
    "LogPage",
    "Retention",
    "Store",
    "counts_of",
    "empty_page",
    "event_json",
    "iso",
    "log_page",
    "object_body",
]

LOG_PAGE: Final = 100
"""Events one read returns at most (a reader further behind reads again: it is signalled)."""
TRIM_EVERY: Final = 256
MAX_VIEWS: Final = 10_000
_encode = msgspec.json.Encoder().encode

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS deliveries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    source TEXT NOT NULL,
    delivery_id TEXT NOT NULL,
    event TEXT NOT NULL,
    received REAL NOT NULL,
    fields TEXT NOT NULL,
    object_id TEXT,
    payload TEXT NOT NULL,
    UNIQUE (source, delivery_id)
);
CREATE INDEX IF NOT EXISTS deliveries_by_age ON deliveries (source, received);
CREATE TABLE IF NOT EXISTS views (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    source TEXT NOT NULL,
    event TEXT NOT NULL,
    filter TEXT NOT NULL,
    log_id TEXT NOT NULL,
    last_seq INTEGER NOT NULL DEFAULT 0,
    used REAL NOT NULL,
    UNIQUE (source, event, filter)
);
CREATE TABLE IF NOT EXISTS entries (
    view INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    delivery INTEGER NOT NULL,
    PRIMARY KEY (view, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS entries_by_delivery ON entries (delivery);
CREATE TABLE IF NOT EXISTS objects (
    source TEXT NOT NULL,
    event TEXT NOT NULL,
    object_id TEXT NOT NULL,
    delivery INTEGER NOT NULL,
    PRIMARY KEY (source, event, object_id)
) WITHOUT ROWID;
"""


@attrs.frozen
class Retention:
    """How much each source's log keeps: deliveries younger than ``max_age`` seconds, and at most
    ``max_count`` of them."""

    max_age: float = 7 * 86400.0
    max_count: int = 100_000

    def text(self) -> str:
        days = self.max_age / 86400
        age = f"{days:g}d" if days >= 1 else f"{self.max_age:g}s"
        return f"deliveries of the last {age}, at most {self.max_count:,} per source"


@attrs.frozen
class Inserted:
    """A stored delivery: the logs it was appended to and the object it updated."""

    seq: int
    """Its row id (global, for stats)."""
    logs: tuple[LogTarget, ...]
    state: StateTarget | None


@attrs.frozen
class LogPage:
    text: str
    more: bool


@attrs.define(eq=False)
class _View:
    id: int
    target: LogTarget
    log_id: str
    last_seq: int
    used: float
    """When it was last read (kept in memory, written at each trim: a read writes nothing)."""


class DeliveryStore(Protocol):
    """What the server needs of a store: :class:`Store` (SQLite) or
    :class:`~.store_pg.PgStore` (PostgreSQL). Synchronous: called one at a time on a worker thread."""

    retention: Retention

    def insert_many(self, batch: Sequence[tuple[Delivery, Described]]) -> list[Inserted | None]: ...
    def ensure_view(self, target: LogTarget) -> bool: ...
    def trim(self) -> int: ...
    def read_log(
        self, target: LogTarget, after: tuple[str, int] | None, limit: int = LOG_PAGE
    ) -> LogPage: ...
    def read_state(self, target: StateTarget) -> str: ...
    def counts(self) -> dict[str, dict[str, Any]]: ...
    def close(self) -> None: ...


def iso(at: float) -> str:
    return datetime.fromtimestamp(at, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Store:
    def __init__(
        self,
        path: Path | str,
        *,
        retention: Retention = Retention(),
        max_views: int = MAX_VIEWS,
        kinds: Mapping[str, str] | None = None,
        sync: str = "full",
        now: Callable[[], float] = time.time,
    ) -> None:
        self.path = path
        self.retention = retention
        self.max_views = max_views
        self.kinds: Mapping[str, str] = kinds or {}
        """Each source's kind: a state body's object is found again in the stored payload by it."""
        self.now = now
        self.db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        if sync not in ("full", "normal"):
            raise ValueError(f"sync must be 'full' or 'normal', got {sync!r}")
        # full: each commit is on disk before the 2xx (an fsync per commit); normal: it survives a
        # crash of this process, not of the machine (the WAL is synced at checkpoints only).
        self.db.execute(f"PRAGMA synchronous={sync.upper()}")
        self.db.executescript(_SCHEMA)
        self._views: dict[tuple[str, str, str], _View] = {}
        for vid, source, event, filt, log_id, last, used in self.db.execute(
            "SELECT id, source, event, filter, log_id, last_seq, used FROM views"
        ):
            target = LogTarget(source, event, tuple(sorted(parse_qsl(filt, keep_blank_values=True))))
            self._views[(source, event, filt)] = _View(vid, target, log_id, last, used)
        self._since_trim = 0
        self.trim()

    def close(self) -> None:
        self.db.close()

    # -- writing ---------------------------------------------------------------------------------

    def insert(self, delivery: Delivery, described: Described) -> Inserted | None:
        """Store ``delivery`` and append it to every log it belongs in, in one transaction;
        ``None`` when the source already has a delivery with its id (a retry)."""
        return self.insert_many([(delivery, described)])[0]

    def insert_many(self, batch: Sequence[tuple[Delivery, Described]]) -> list[Inserted | None]:
        """:meth:`insert` for each of ``batch``, all in one transaction (one fsync: a group commit),
        in order; nothing of it is stored when it raises."""
        now = self.now()
        db = self.db
        bumps: dict[int, int] = {}
        made: list[tuple[str, str, str]] = []
        out: list[Inserted | None] = []
        db.execute("BEGIN IMMEDIATE")
        try:
            for delivery, described in batch:
                out.append(self._insert(delivery, described, now, bumps, made))
            for vid, n in bumps.items():
                db.execute("UPDATE views SET last_seq = last_seq + ? WHERE id = ?", (n, vid))
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            for key in made:  # views made in the rolled-back transaction are gone
                self._views.pop(key, None)
            raise
        for view in self._views.values():
            view.last_seq += bumps.get(view.id, 0)
        self._since_trim += len(batch)
        if self._since_trim >= TRIM_EVERY:
            self.trim()
        return out

    def _insert(
        self,
        delivery: Delivery,
        described: Described,
        now: float,
        bumps: dict[int, int],
        made: list[tuple[str, str, str]],
    ) -> Inserted | None:
        db = self.db
        cur = db.execute(
            "INSERT OR IGNORE INTO deliveries (source, delivery_id, event, received, fields, object_id, payload)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                delivery.source,
                delivery.delivery_id,
                delivery.event,
                now,
                dumps(described.fields),
                described.object_id,
                _encode(delivery.payload).decode(),
            ),
        )
        if cur.rowcount == 0:
            return None
        row = cur.lastrowid
        assert row is not None
        for target in (LogTarget(delivery.source, delivery.event), LogTarget(delivery.source, "")):
            key = (target.source, target.event, target.filter_key)
            if key not in self._views:
                self._view(target, now)
                made.append(key)
        appended = [
            view
            for view in self._views.values()
            if view.target.source == delivery.source and view.target.matches(delivery.event, described.fields)
        ]
        for view in appended:
            seq = view.last_seq + bumps.get(view.id, 0) + 1
            db.execute("INSERT INTO entries (view, seq, delivery) VALUES (?, ?, ?)", (view.id, seq, row))
            bumps[view.id] = bumps.get(view.id, 0) + 1
        state = None
        if described.object_id is not None:
            db.execute(
                "INSERT OR REPLACE INTO objects (source, event, object_id, delivery) VALUES (?, ?, ?, ?)",
                (delivery.source, delivery.event, described.object_id, row),
            )
            state = StateTarget(delivery.source, delivery.event, described.object_id)
        return Inserted(row, tuple(v.target for v in appended), state)

    def _view(self, target: LogTarget, now: float) -> _View:
        """The view of ``target``, made (in the caller's transaction) when it does not exist yet."""
        key = (target.source, target.event, target.filter_key)
        view = self._views.get(key)
        if view is not None:
            return view
        log_id = secrets.token_hex(8)
        cur = self.db.execute(
            "INSERT INTO views (source, event, filter, log_id, used) VALUES (?, ?, ?, ?, ?)",
            (target.source, target.event, target.filter_key, log_id, now),
        )
        assert cur.lastrowid is not None
        view = _View(cur.lastrowid, target, log_id, 0, now)
        self._views[key] = view
        return view

    def ensure_view(self, target: LogTarget) -> bool:
        """Make the view of a filtered ``target`` (filled from its source's log); True when made now.
        Unfiltered views exist from their first delivery (a read of one before that is empty)."""
        key = (target.source, target.event, target.filter_key)
        if key in self._views or not target.filter:
            return False
        now = self.now()
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            filtered = [v for v in self._views.values() if v.target.filter]
            if len(filtered) >= self.max_views:
                oldest = min(filtered, key=lambda v: v.used)
                db.execute("DELETE FROM entries WHERE view = ?", (oldest.id,))
                db.execute("DELETE FROM views WHERE id = ?", (oldest.id,))
                del self._views[(oldest.target.source, oldest.target.event, oldest.target.filter_key)]
            view = self._view(target, now)
            base = self._views.get((target.source, target.event, ""))
            rows = (
                db.execute(
                    "SELECT d.id, d.event, d.fields FROM entries e JOIN deliveries d ON d.id = e.delivery"
                    " WHERE e.view = ? ORDER BY e.seq",
                    (base.id,),
                ).fetchall()
                if base is not None
                else []
            )
            seq = 0
            for row, event, fields in rows:
                if target.matches(event, msgspec.json.decode(fields)):
                    seq += 1
                    db.execute(
                        "INSERT INTO entries (view, seq, delivery) VALUES (?, ?, ?)", (view.id, seq, row)
                    )
            db.execute("UPDATE views SET last_seq = ? WHERE id = ?", (seq, view.id))
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            self._views.pop(key, None)
            raise
        view.last_seq = seq
        return True

    def trim(self) -> int:
        """Apply the retention; the number of deliveries deleted."""
        self._since_trim = 0
        cutoff = self.now() - self.retention.max_age
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            gone = db.execute("DELETE FROM deliveries WHERE received < ?", (cutoff,)).rowcount
            for (source,) in db.execute("SELECT DISTINCT source FROM deliveries").fetchall():
                gone += db.execute(
                    "DELETE FROM deliveries WHERE source = ? AND id <= (SELECT id FROM deliveries WHERE source = ?"
                    " ORDER BY id DESC LIMIT 1 OFFSET ?)",
                    (source, source, self.retention.max_count),
                ).rowcount
            db.executemany(
                "UPDATE views SET used = ? WHERE id = ?", [(v.used, v.id) for v in self._views.values()]
            )
            if gone:
                db.execute("DELETE FROM entries WHERE delivery NOT IN (SELECT id FROM deliveries)")
                db.execute("DELETE FROM objects WHERE delivery NOT IN (SELECT id FROM deliveries)")
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        return gone

    # -- reading ---------------------------------------------------------------------------------

    def read_log(self, target: LogTarget, after: tuple[str, int] | None, limit: int = LOG_PAGE) -> LogPage:
        """The event-log body of ``target``: the events after the reader's position ``(log_id, seq)``
        (at most ``limit``), or the newest ``limit`` for a reader with none (or another log's)."""
        self.ensure_view(target)
        view = self._views.get((target.source, target.event, target.filter_key))
        if view is None:  # an unfiltered log before its first delivery
            return empty_page(self.retention)
        view.used = self.now()
        first = self.db.execute("SELECT min(seq) FROM entries WHERE view = ?", (view.id,)).fetchone()[0]
        if after is not None and after[0] == view.log_id:
            rows = self.db.execute(
                "SELECT e.seq, d.delivery_id, d.event, d.received, d.fields, d.object_id, d.payload"
                " FROM entries e JOIN deliveries d ON d.id = e.delivery WHERE e.view = ? AND e.seq > ?"
                " ORDER BY e.seq LIMIT ?",
                (view.id, after[1], limit),
            ).fetchall()
        else:
            rows = self.db.execute(
                "SELECT * FROM (SELECT e.seq, d.delivery_id, d.event, d.received, d.fields, d.object_id, d.payload"
                " FROM entries e JOIN deliveries d ON d.id = e.delivery WHERE e.view = ?"
                " ORDER BY e.seq DESC LIMIT ?) ORDER BY seq",
                (view.id, limit),
            ).fetchall()
        return log_page(view.log_id, view.last_seq, first, self.retention, rows)

    def read_state(self, target: StateTarget) -> str:
        """The latest delivery about one object: ``{"source", "event", "id", "delivery_id",
        "received", "type", "fields", "object"}`` (``delivery_id`` null before the first)."""
        row = self.db.execute(
            "SELECT d.delivery_id, d.received, d.fields, d.payload FROM objects o"
            " JOIN deliveries d ON d.id = o.delivery WHERE o.source = ? AND o.event = ? AND o.object_id = ?",
            (target.source, target.event, target.object_id),
        ).fetchone()
        return object_body(target, row, self.kinds.get(target.source, "standard"))

    def counts(self) -> dict[str, dict[str, Any]]:
        """Per source: deliveries kept, the newest's time, and the event names with their counts."""
        return counts_of(
            self.db.execute(
                "SELECT source, event, count(*), max(received) FROM deliveries GROUP BY source, event"
            )
        )


def counts_of(rows: Iterable[Sequence[Any]]) -> dict[str, dict[str, Any]]:
    """Per source, from ``(source, event, count, newest received)`` rows: deliveries kept, the
    newest's time, and the event names with their counts (both stores)."""
    out: dict[str, dict[str, Any]] = {}
    for source, event, n, newest in rows:
        entry = out.setdefault(source, {"deliveries": 0, "newest": None, "events": {}})
        entry["deliveries"] += n
        entry["events"][event] = n
        stamp = iso(newest)
        if entry["newest"] is None or stamp > entry["newest"]:
            entry["newest"] = stamp
    return out


def event_json(
    seq: int, delivery_id: str, event: str, received: float, fields: str, object_id: str | None, payload: str
) -> str:
    action = msgspec.json.decode(fields).get("action")
    typ = f"{event}.{action}" if action else event
    return (
        f'{{"seq":{seq},"type":{dumps(typ)},"key":{dumps(object_id or delivery_id)},"event":{dumps(event)},'
        f'"delivery_id":{dumps(delivery_id)},"received":"{iso(received)}","object":{fields},"payload":{payload}}}'
    )


def object_body(target: StateTarget, row: Sequence[Any] | None, kind: str) -> str:
    """A state resource's body: the object's latest delivery, from its ``(delivery_id, received,
    fields, payload)`` row (``None``: none yet); shared by both stores."""
    head = {"source": target.source, "event": target.event, "id": target.object_id}
    if row is None:
        return dumps({**head, "delivery_id": None, "received": None, "fields": {}, "object": None})
    delivery_id, received, fields, payload = row
    obj = describe(kind, target.event, msgspec.json.decode(payload)).object
    return dumps(
        {
            **head,
            "delivery_id": delivery_id,
            "received": iso(received),
            "fields": msgspec.json.decode(fields),
            "object": obj,
        }
    )


def empty_page(retention: Retention) -> LogPage:
    """The body of an unfiltered log before its first delivery."""
    return LogPage(
        f'{{"log_id":"empty","last_seq":0,"first_seq":1,"retention":{dumps(retention.text())},"events":[]}}',
        False,
    )


def log_page(
    log_id: str, last_seq: int, first: int | None, retention: Retention, rows: Sequence[Sequence[Any]]
) -> LogPage:
    """An event-log body from a view's ``log_id``, ``last_seq``, smallest seq kept and the rows read
    (``seq, delivery_id, event, received, fields, object_id, payload``)."""
    events = [event_json(*row) for row in rows]
    text = (
        f'{{"log_id":"{log_id}","last_seq":{last_seq},'
        f'"first_seq":{first if first is not None else last_seq + 1},'
        f'"retention":{dumps(retention.text())},"events":[{",".join(events)}]}}'
    )
    return LogPage(text, bool(rows) and rows[-1][0] < last_seq)
