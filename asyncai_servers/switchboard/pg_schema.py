"""The PostgreSQL ledger's schema: read its version without touching ``todos``, migrate only when behind.

Every start reads ``switchboard_schema.version`` (a one-row table; the read locks nothing that
live traffic uses). At :data:`SCHEMA_VERSION` or later (a newer replica migrated first: migrations
only add, so an older replica keeps working) the start goes on without a single DDL statement.
Behind (or no version table: a new database, or one made before versions were kept), the start
migrates, in one transaction:

1. ``pg_advisory_xact_lock``: one migrating replica at a time; the others wait here (holding
   nothing live traffic needs), then find the version current and skip;
2. ``SET LOCAL lock_timeout`` (:data:`LOCK_TIMEOUT`) and ``LOCK TABLE todos IN ACCESS EXCLUSIVE
   MODE`` first: the one lock every step needs, taken before any other, so the migration never
   upgrades a lock it holds and cannot deadlock with a transaction that reads ``todos`` and then
   writes. Verbs queue behind the waiting lock for at most the timeout;
3. the steps from the stored version to :data:`SCHEMA_VERSION`, and the new version.

A lock timeout (a long transaction holds ``todos``), a deadlock or a lost connection rolls the
attempt back and it is retried after 1, 2, 4, 8 s (:data:`MIGRATE_BACKOFF`, on the ledger's clock);
after the last attempt the start fails with an error naming what blocked it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Final

import psycopg
import psycopg.errors

from asyncai_watch import Backoff
from asyncai_watch.clock import Clock

from .ledger import LedgerError, UnavailableError
from .pg_pool import Conn, Pool, reason

__all__ = ["LOCK_TIMEOUT", "MIGRATE_BACKOFF", "SCHEMA_VERSION", "ensure_schema"]

log = logging.getLogger(__name__)

SCHEMA_VERSION: Final = 1
LOCK_TIMEOUT: Final = "200ms"
"""How long a migration waits for ``todos``; verbs queued behind it wait at most this long."""
MIGRATE_BACKOFF: Final = Backoff(initial=1.0, cap=8.0, attempts=8)
"""Waits between migration attempts: 1, 2, 4, 8, 8, 8, 8, 8 s (47 s), then the start fails."""
MIGRATE_LOCK: Final = (7320211, 1)
"""The advisory lock (two-int form: its own key space, apart from the claims' one-bigint locks)."""

_BASE = """
CREATE TABLE IF NOT EXISTS todos (
    id BIGSERIAL PRIMARY KEY,
    queue TEXT NOT NULL,
    kind TEXT NOT NULL,
    summary TEXT NOT NULL,
    payload TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'open',
    creator TEXT NOT NULL,
    creator_attribution TEXT NOT NULL,
    creator_verified BOOLEAN NOT NULL,
    push BOOLEAN NOT NULL,
    idempotency_key TEXT,
    assignee TEXT,
    claimant TEXT,
    lease TEXT,
    lease_until DOUBLE PRECISION,
    attempts INTEGER NOT NULL DEFAULT 0,
    result TEXT,
    created_at DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    created_xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
    UNIQUE (creator, idempotency_key)
);
CREATE INDEX IF NOT EXISTS todos_queue_status ON todos (queue, status, id);
CREATE INDEX IF NOT EXISTS todos_lease ON todos (lease_until) WHERE status = 'claimed';
-- The creating transaction, so a LISTEN catch-up can ask "committed after that snapshot" (commit
-- order), not "id above the highest heard" (allocation order). Added in place to tables made
-- before it (that rewrites the table, once, under the migration's lock).
ALTER TABLE todos ADD COLUMN IF NOT EXISTS created_xid xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX IF NOT EXISTS todos_created_xid ON todos (created_xid);
CREATE TABLE IF NOT EXISTS switchboard_schema (
    one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
    version INTEGER NOT NULL
);
"""
"""Version 1, from nothing or from any table an unversioned release made (every step is idempotent)."""

MIGRATIONS: Final[Mapping[int, str]] = {1: _BASE}
"""The step to each version from the one before; a new step only adds (columns with defaults,
indexes, tables), so replicas one version behind keep working during a rolling upgrade."""

_RETRIED: Final = (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected)


async def _version(conn: Conn) -> int | None:
    cur = await conn.execute("SELECT to_regclass('switchboard_schema') IS NOT NULL")
    if not (await cur.fetchone() or (False,))[0]:
        return None
    cur = await conn.execute("SELECT version FROM switchboard_schema")
    row = await cur.fetchone()
    return None if row is None else int(row[0])


async def _migrate(conn: Conn) -> int | None:
    """One attempt, inside the caller's transaction; returns the version it found."""
    await conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", MIGRATE_LOCK)
    found = await _version(conn)  # another replica may have migrated while we waited
    if found is not None and found >= SCHEMA_VERSION:
        return found
    await conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
    cur = await conn.execute("SELECT to_regclass('todos') IS NOT NULL")
    if (await cur.fetchone() or (False,))[0]:
        await conn.execute("LOCK TABLE todos IN ACCESS EXCLUSIVE MODE")
    for version in range((found or 0) + 1, SCHEMA_VERSION + 1):
        await conn.execute(MIGRATIONS[version])
    await conn.execute(
        "INSERT INTO switchboard_schema (version) VALUES (%s)"
        " ON CONFLICT (one) DO UPDATE SET version = EXCLUDED.version",
        (SCHEMA_VERSION,),
    )
    return found


def _retried(exc: LedgerError) -> bool:
    return isinstance(exc, UnavailableError) or isinstance(exc.__cause__, _RETRIED)


async def ensure_schema(pool: Pool, clock: Clock) -> None:
    """Bring the schema to :data:`SCHEMA_VERSION` if it is behind; see the module doc."""
    failures = 0
    while True:
        try:
            found = await pool.transaction(_version, read_only=True)
            if found is not None and found >= SCHEMA_VERSION:
                if found > SCHEMA_VERSION:
                    log.info(
                        "switchboard schema is at version %d, newer than this release's %d",
                        found,
                        SCHEMA_VERSION,
                    )
                return
            was = await pool.transaction(_migrate)
        except LedgerError as exc:
            if not _retried(exc):
                raise
            delay = MIGRATE_BACKOFF.delay(failures)
            if delay is None:
                hint = (
                    " (a long transaction holding table todos kept the migration out: end it, or start"
                    " at a quieter time)"
                    if isinstance(exc.__cause__, psycopg.errors.LockNotAvailable)
                    else ""
                )
                raise LedgerError(
                    f"cannot migrate the switchboard schema to version {SCHEMA_VERSION} after"
                    f" {failures + 1} attempts: {reason(exc)}{hint}"
                ) from None
            failures += 1
            log.warning("switchboard schema migration failed (%s); retrying in %.0f s", reason(exc), delay)
            await clock.sleep_until(clock.now() + delay)
            continue
        if was is None or was < SCHEMA_VERSION:
            log.info("switchboard schema migrated from version %s to %d", was or "none", SCHEMA_VERSION)
        return
