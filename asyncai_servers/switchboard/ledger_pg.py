"""PostgreSQL ledger: several replicas share one database.

Claims take the oldest open todo with ``FOR UPDATE SKIP LOCKED``, so two
replicas claiming at once never block on or double-claim the same row. Every
committed transition sends ``pg_notify('switchboard', ...)`` inside its own
transaction (delivered only on commit), carrying the todo itself when it fits
in a NOTIFY (8000 bytes), so hearing it costs the other replicas no query; each
replica ``LISTEN``s and fans the other replicas' transitions out to its own
attached sessions.

NOTIFY is lossy across disconnects. That only costs doorbells and event-log
entries (the ledger and the pull verbs are the truth), and a reconnect catches
up the doorbells that matter most: it announces the push todos still open that
were created while the replica was not listening, so an idle attached agent is
not left waiting for a drain. "While not listening" is by commit order: each
row records its creating transaction (``created_xid``), and the catch-up asks
for the ones the previous LISTEN's snapshot did not see and that were not heard.
Other missed transitions (claims, completes ..)
are not replayed: the switchboard restarts its event logs on a reconnect, so
their readers get a GAP instead of a silent hole. The reconnect backoff
(:data:`LISTEN_BACKOFF`: 1, 2, 4 .. 16 s, for as long as it takes; a catch-up that fails after
the LISTEN succeeded counts as a failed attempt) sleeps on the injected clock, so tests drive it
with a fake one.

The verbs run on :class:`~.pg_pool.Pool`, which replaces broken connections and turns every
database failure into a :class:`~.ledger.LedgerError` (:class:`~.ledger.UnavailableError` when
the database is away), so nothing a database fault raises can end the server. The schema is
checked, and migrated only when behind, by :mod:`.pg_schema`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Final, TypeVar

import anyio
import psycopg
from psycopg import sql as pgsql

from asyncai_watch import Backoff
from asyncai_watch.clock import Clock, SystemClock

from .ledger import (
    COLUMNS,
    Change,
    Creator,
    LedgerError,
    Mark,
    RemoteChange,
    Todo,
    decode_notify,
    encode_json,
    encode_mark,
    encode_notify,
    not_claimable,
)
from .pg_pool import Conn, Pool, connect_kwargs, reason
from .pg_schema import SCHEMA_VERSION, ensure_schema

__all__ = ["NOTIFY_CHANNEL", "SCHEMA_VERSION", "PostgresLedger"]

log = logging.getLogger(__name__)
T = TypeVar("T")
NOTIFY_CHANNEL: Final = "switchboard"
LISTEN_BACKOFF: Final = Backoff(initial=1.0, cap=16.0, attempts=None)
"""Waits between failed LISTEN connects; a replica that stopped trying would ring nobody again."""
CATCH_UP_MAX: Final = 500
"""At most this many missed todos are announced after a reconnect (oldest first); pull finds the rest."""
HEARD_CHECKPOINT: Final = 1000
"""Heard creates remembered before a mark checkpoint moves the catch-up's reference snapshot forward."""
_COLS = ", ".join(COLUMNS)


def _in(values: Sequence[str] | None) -> tuple[str, list[Any]]:
    if values is None:
        return "TRUE", []
    return "queue = ANY(%s)", [list(values)]


class PostgresLedger:
    name = "postgres"

    def __init__(
        self, dsn: str, *, pool_size: int = 4, replica_id: str | None = None, clock: Clock | None = None
    ) -> None:
        self.dsn = dsn
        self.pool_size = pool_size
        self.replica_id = replica_id or uuid.uuid4().hex
        # For the LISTEN and migration backoffs (leases use the caller's now).
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.listener_pid: int | None = None
        """The backend pid of the current LISTEN connection (None while reconnecting); for diagnostics."""
        # Ids this replica created whose own NOTIFY it has not heard back yet: a catch-up after a
        # reconnect skips them (they rang here when created). Only lost notifies leave ids behind.
        self._own_unheard: set[int] = set()
        # In pg_stat_activity: "switchboard <replica>" for the pool, "... listen" for LISTEN
        # (cut to leave room for the suffix within PostgreSQL's 63 characters).
        self.application_name = f"switchboard {self.replica_id}"[:56]
        self._pool = Pool(dsn, pool_size, application_name=self.application_name)

    async def open(self) -> None:
        try:
            await self._pool.open()
        except psycopg.Error as exc:
            await self.aclose()
            raise LedgerError(f"cannot open PostgreSQL ledger: {reason(exc)}") from None
        try:
            await ensure_schema(self._pool, self.clock)
        except BaseException as exc:
            await self.aclose()
            if isinstance(exc, LedgerError):
                raise LedgerError(f"cannot open PostgreSQL ledger: {exc}") from None
            raise

    async def aclose(self) -> None:
        await self._pool.aclose()

    async def _tx(self, body: Callable[[Conn], Awaitable[T]]) -> T:
        return await self._pool.transaction(body)

    async def _read(self, body: Callable[[Conn], Awaitable[T]]) -> T:
        return await self._pool.transaction(body, read_only=True)

    async def _notify(self, conn: Conn, transition: str, todo: Todo, actor_pushes: bool) -> None:
        payload = encode_notify(self.replica_id, transition, todo, actor_pushes)
        await conn.execute("SELECT pg_notify(%s, %s)", (NOTIFY_CHANNEL, payload))

    @staticmethod
    async def _get(conn: Conn, todo_id: str, *, lock: bool = False) -> Todo | None:
        if not todo_id.isdigit():
            return None
        q = f"SELECT {_COLS} FROM todos WHERE id = %s" + (" FOR UPDATE" if lock else "")
        cur = await conn.execute(q, (int(todo_id),))
        row = await cur.fetchone()
        return None if row is None else Todo.from_row(row)

    async def create(
        self,
        *,
        queue: str,
        kind: str,
        summary: str,
        payload: Any,
        creator: Creator,
        idempotency_key: str | None,
        now: float,
    ) -> tuple[Todo, bool]:
        payload_text = encode_json(payload, "payload")

        async def body(conn: Conn) -> tuple[Todo, bool]:
            cur = await conn.execute(
                f"INSERT INTO todos (queue, kind, summary, payload, creator, creator_attribution,"
                f" creator_verified, push, idempotency_key, created_at, updated_at)"
                f" VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                f" ON CONFLICT (creator, idempotency_key) DO NOTHING RETURNING {_COLS}",
                (
                    queue,
                    kind,
                    summary,
                    payload_text,
                    creator.name,
                    creator.attribution,
                    creator.verified,
                    creator.push,
                    idempotency_key,
                    now,
                    now,
                ),
            )
            row = await cur.fetchone()
            if row is not None:
                todo = Todo.from_row(row)
                await self._notify(conn, "create", todo, creator.push)
                self._own_unheard.add(int(todo.id))  # before commit, so it precedes its NOTIFY
                return todo, True
            cur = await conn.execute(
                f"SELECT {_COLS} FROM todos WHERE creator = %s AND idempotency_key = %s",
                (creator.name, idempotency_key),
            )
            existing = await cur.fetchone()
            if existing is None:  # the conflicting insert was by a transaction that rolled back
                raise LedgerError("idempotency_key conflict with an uncommitted create; retry the call")
            return Todo.from_row(existing), False

        return await self._tx(body)

    async def get(self, todo_id: str) -> Todo | None:
        return await self._read(lambda conn: self._get(conn, todo_id))

    async def assign(self, todo_id: str, assignee: str | None, *, actor_pushes: bool, now: float) -> Change:
        async def body(conn: Conn) -> Change:
            old = await self._get(conn, todo_id, lock=True)
            if old is None:
                raise not_claimable(None, todo_id)
            if old.status == "done":
                raise LedgerError(f"todo {todo_id} is already done; it cannot be assigned")
            cur = await conn.execute(
                f"UPDATE todos SET assignee = %s, updated_at = %s WHERE id = %s RETURNING {_COLS}",
                (assignee, now, int(todo_id)),
            )
            todo = Todo.from_row(await cur.fetchone() or ())
            await self._notify(conn, "assign", todo, actor_pushes)
            return Change(transition="assign", todo=todo, old=old, actor_pushes=actor_pushes)

        return await self._tx(body)

    async def claim(
        self, queues: Sequence[str] | None, claimant: str, *, lease: str, lease_seconds: float, now: float
    ) -> tuple[Todo | None, bool]:
        where, args = _in(queues)

        async def body(conn: Conn) -> tuple[Todo | None, bool]:
            # One claim at a time per claimant (across replicas too): two concurrent claims by the
            # same agent must both see the todo it already holds, not SKIP LOCKED into a second one.
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"claim:{claimant}",))
            cur = await conn.execute(
                f"SELECT {_COLS} FROM todos WHERE status = 'claimed' AND claimant = %s AND lease_until > %s"
                f" AND {where} ORDER BY id LIMIT 1",
                (claimant, now, *args),
            )
            held = await cur.fetchone()
            if held is not None:
                return Todo.from_row(held), False
            cur = await conn.execute(
                f"UPDATE todos SET status = 'claimed', claimant = %s, lease = %s, lease_until = %s,"
                f" attempts = attempts + 1, updated_at = %s"
                f" WHERE id = (SELECT id FROM todos WHERE status = 'open' AND {where}"
                f" AND (assignee IS NULL OR assignee = %s) ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1)"
                f" RETURNING {_COLS}",
                (claimant, lease, now + lease_seconds, now, *args, claimant),
            )
            row = await cur.fetchone()
            if row is None:
                return None, False
            todo = Todo.from_row(row)
            await self._notify(conn, "claim", todo, False)
            return todo, True

        return await self._tx(body)

    async def _finish(
        self, todo_id: str, lease: str, now: float, sql: str, args: tuple[Any, ...], transition: str
    ) -> Change:
        async def body(conn: Conn) -> Change:
            old = await self._get(conn, todo_id, lock=True)
            if transition == "complete" and old is not None and old.status == "done" and old.lease == lease:
                return Change(transition="complete", todo=old, old=old)
            if old is None or old.status != "claimed" or old.lease != lease:
                raise not_claimable(old, todo_id)
            if old.lease_until is not None and old.lease_until <= now:
                raise not_claimable(old, todo_id, lease_expired=True)
            cur = await conn.execute(sql, (*args, now, int(todo_id)))
            todo = Todo.from_row(await cur.fetchone() or ())
            await self._notify(conn, transition, todo, False)
            return Change(transition=transition, todo=todo, old=old)  # type: ignore[arg-type]

        return await self._tx(body)

    async def complete(self, todo_id: str, lease: str, result: Any, *, now: float) -> Change:
        return await self._finish(
            todo_id,
            lease,
            now,
            f"UPDATE todos SET status = 'done', result = %s, lease_until = NULL, updated_at = %s"
            f" WHERE id = %s RETURNING {_COLS}",
            (encode_json(result, "result"),),
            "complete",
        )

    async def release(self, todo_id: str, lease: str, *, now: float) -> Change:
        return await self._finish(
            todo_id,
            lease,
            now,
            f"UPDATE todos SET status = 'open', claimant = NULL, lease = NULL, lease_until = NULL,"
            f" updated_at = %s WHERE id = %s RETURNING {_COLS}",
            (),
            "release",
        )

    async def list_todos(
        self,
        queues: Sequence[str] | None,
        *,
        status: str | None = None,
        after: str | None = None,
        limit: int = 50,
        claimable_by: str | None = None,
    ) -> list[Todo]:
        where, args = _in(queues)
        q = f"SELECT {_COLS} FROM todos WHERE {where}"
        if status is not None:
            q += " AND status = %s"
            args.append(status)
        if after is not None:
            q += " AND id > %s"
            args.append(int(after))
        if claimable_by is not None:
            q += " AND (assignee IS NULL OR assignee = %s)"
            args.append(claimable_by)
        q += " ORDER BY id LIMIT %s"
        args.append(limit)

        async def body(conn: Conn) -> list[Todo]:
            cur = await conn.execute(pgsql.SQL(q), args)
            return [Todo.from_row(r) for r in await cur.fetchall()]

        return await self._read(body)

    async def expire(self, now: float) -> list[Change]:
        async def body(conn: Conn) -> list[Change]:
            cur = await conn.execute(
                f"SELECT {_COLS} FROM todos WHERE status = 'claimed' AND lease_until <= %s"
                f" ORDER BY id FOR UPDATE SKIP LOCKED",
                (now,),
            )
            olds = [Todo.from_row(r) for r in await cur.fetchall()]
            if not olds:
                return []
            cur = await conn.execute(
                f"UPDATE todos SET status = 'open', claimant = NULL, lease = NULL, lease_until = NULL,"
                f" updated_at = %s WHERE id = ANY(%s) RETURNING {_COLS}",
                (now, [int(o.id) for o in olds]),
            )
            new = {t.id: t for t in map(Todo.from_row, await cur.fetchall())}
            for o in olds:
                await self._notify(conn, "expire", new[o.id], o.push)
            return [Change(transition="expire", todo=new[o.id], old=o, actor_pushes=o.push) for o in olds]

        return await self._tx(body)

    async def next_lease_deadline(self) -> float | None:
        async def body(conn: Conn) -> float | None:
            cur = await conn.execute("SELECT MIN(lease_until) FROM todos WHERE status = 'claimed'")
            row = await cur.fetchone()
            return None if row is None or row[0] is None else float(row[0])

        return await self._read(body)

    def remote_changes(self) -> AsyncIterator[RemoteChange]:
        return self._listen()

    async def _listen_snapshot(self, conn: Conn) -> str:
        """The snapshot taken right after LISTEN: anything it sees committed before (it is in the
        table), anything it does not see commits later (and is notified; a create committing in
        between is both, and ``_listen`` dedups it)."""
        cur = await conn.execute("SELECT pg_current_snapshot()::text")
        return str((await cur.fetchone() or ("",))[0])

    async def _missed(self, ref: str, snapshot: str, heard: set[int]) -> list[Todo]:
        """Open push todos committed after snapshot ``ref`` and not heard, oldest first.

        Own creates still waiting for their NOTIFY are skipped (they rang here when created); those
        the new LISTEN's ``snapshot`` sees will never be heard now, so they are forgotten.
        """

        async def body(conn: Conn) -> list[Todo]:
            cur = await conn.execute(
                f"SELECT {_COLS} FROM todos WHERE created_xid >= pg_snapshot_xmin(%s::pg_snapshot)"
                " AND NOT pg_visible_in_snapshot(created_xid, %s::pg_snapshot)"
                " AND status = 'open' AND push ORDER BY id",
                (ref, ref),
            )
            rows = await cur.fetchall()
            skip = heard | self._own_unheard
            missed = [t for t in map(Todo.from_row, rows) if int(t.id) not in skip]
            if self._own_unheard:
                cur = await conn.execute(
                    "SELECT id FROM todos WHERE id = ANY(%s) AND pg_visible_in_snapshot(created_xid, %s::pg_snapshot)",
                    (sorted(self._own_unheard), snapshot),
                )
                self._own_unheard -= {int(r[0]) for r in await cur.fetchall()}
            return missed[:CATCH_UP_MAX]

        return await self._read(body)

    async def _mark(self) -> tuple[str, str]:
        """Take a snapshot and NOTIFY a mark in one transaction: when the mark is heard, every
        transaction that snapshot sees has been heard too (NOTIFYs arrive in commit order)."""
        token = uuid.uuid4().hex

        async def body(conn: Conn) -> str:
            cur = await conn.execute("SELECT pg_current_snapshot()::text")
            snapshot = str((await cur.fetchone() or ("",))[0])
            await conn.execute(
                "SELECT pg_notify(%s, %s)", (NOTIFY_CHANNEL, encode_mark(self.replica_id, token))
            )
            return snapshot

        return token, await self._tx(body)

    async def _back_off(self, failures: int, what: str, exc: Exception) -> None:
        delay = LISTEN_BACKOFF.delay(failures)
        assert delay is not None  # attempts=None
        log.warning("switchboard LISTEN %s (%s); retrying in %.0f s", what, reason(exc), delay)
        await self.clock.sleep_until(self.clock.now() + delay)

    async def _listen(self) -> AsyncIterator[RemoteChange]:
        """Other replicas' transitions; reconnects with backoff when the LISTEN connection drops.

        Yields ``resync`` each time listening (re)starts. After a reconnect it also yields a
        ``create`` for each open push todo that was neither visible to the previous LISTEN's
        snapshot ``ref`` nor heard since: by commit order, so a create that drew a lower id but
        committed during the gap is found too. Heard creates are remembered only back to ``ref``,
        which a mark checkpoint moves forward every :data:`HEARD_CHECKPOINT` creates. A create
        committing between ``LISTEN`` and the snapshot is both caught up and NOTIFYed; its NOTIFY
        is skipped. A ``resync`` after the first means other transitions may have been missed:
        the switchboard tells its event-log readers so.
        """
        failures = 0  # failed attempts in a row (connect, LISTEN or catch-up)
        ref: str | None = None  # every create this snapshot sees has rung here (None before the first LISTEN)
        heard: set[int] = set()  # creates heard (or caught up) that ``ref`` does not see
        mark: tuple[str, str, set[int]] | None = None  # (token, snapshot, heard since it was taken)
        listen_kwargs = connect_kwargs(self.dsn, f"{self.application_name} listen")
        failed: Exception | None = None  # why the last catch-up did not finish
        while True:
            if failed is not None:  # listening worked but the catch-up did not: back off too
                await self._back_off(failures, "catch-up failed", failed)
                failures += 1
                failed = None
            conn: Conn | None = None
            try:
                conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True, **listen_kwargs)
                await conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                snapshot = await self._listen_snapshot(conn)
            except psycopg.Error as exc:
                if conn is not None:
                    with anyio.CancelScope(shield=True):
                        await conn.close()
                # Any failure before listening backs off, so a refusing server is never hammered.
                await self._back_off(failures, "connect failed", exc)
                failures += 1
                continue
            self.listener_pid = conn.info.backend_pid
            # Creates the catch-up announced: one that committed between LISTEN and the snapshot
            # is also NOTIFYed, and must not ring (or enter the event log) twice.
            announced: set[str] = set()
            try:
                yield RemoteChange(transition="resync", todo_id="", actor_pushes=False)
                try:
                    missed = [] if ref is None else await self._missed(ref, snapshot, heard)
                except LedgerError as exc:  # ``ref`` stays: the next attempt catches up the same gap
                    failed = exc
                    continue
                failures = 0
                if missed:
                    log.info("switchboard LISTEN reconnected; announcing %d missed todos", len(missed))
                ref, heard, mark = snapshot, {int(t.id) for t in missed}, None
                announced = {t.id for t in missed}
                for todo in missed:
                    yield RemoteChange(transition="create", todo_id=todo.id, actor_pushes=True, todo=todo)
                async for note in conn.notifies():
                    decoded = decode_notify(note.payload)
                    if decoded is None:
                        continue
                    replica, change = decoded
                    if isinstance(change, Mark):
                        if replica == self.replica_id and mark is not None and change.token == mark[0]:
                            ref, heard, mark = mark[1], mark[2], None
                        continue
                    if change.transition == "create" and change.todo_id.isdigit():
                        todo_id = int(change.todo_id)
                        heard.add(todo_id)
                        if mark is not None:
                            mark[2].add(todo_id)
                        if replica == self.replica_id:
                            self._own_unheard.discard(todo_id)
                    if len(heard) >= HEARD_CHECKPOINT and mark is None:
                        try:
                            token, taken = await self._mark()
                        except LedgerError as exc:  # no checkpoint this time: ``heard`` just grows
                            log.warning("switchboard LISTEN checkpoint failed: %s", exc)
                        else:
                            mark = (token, taken, set())
                    if replica == self.replica_id:
                        continue
                    if change.transition == "create" and change.todo_id in announced:
                        announced.discard(change.todo_id)
                        continue
                    yield change
            except psycopg.Error as exc:  # was listening: reconnect at once
                log.warning("switchboard LISTEN connection lost (%s); reconnecting", reason(exc))
            finally:
                self.listener_pid = None
                with anyio.CancelScope(shield=True):  # also on cancellation: do not leak the connection
                    await conn.close()
