"""SQLite ledger: one file, WAL, ``synchronous=FULL`` so an acknowledged create survives a crash.

sqlite3 is blocking, so every verb runs in a worker thread, one at a time
(a capacity-1 limiter), on one connection. ``BEGIN IMMEDIATE`` takes the write
lock up front, so separate processes sharing the file also serialize claims.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from .ledger import (
    COLUMNS,
    Change,
    Creator,
    LedgerError,
    RemoteChange,
    Todo,
    encode_json,
    not_claimable,
)

__all__ = ["SqliteLedger"]

T = TypeVar("T")
_COLS = ", ".join(COLUMNS)

SCHEMA = """
CREATE TABLE IF NOT EXISTS todos (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    queue TEXT NOT NULL,
    kind TEXT NOT NULL,
    summary TEXT NOT NULL,
    payload TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'open',
    creator TEXT NOT NULL,
    creator_attribution TEXT NOT NULL,
    creator_verified INTEGER NOT NULL,
    push INTEGER NOT NULL,
    idempotency_key TEXT,
    assignee TEXT,
    claimant TEXT,
    lease TEXT,
    lease_until REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    result TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    UNIQUE (creator, idempotency_key)
);
CREATE INDEX IF NOT EXISTS todos_queue_status ON todos (queue, status, id);
CREATE INDEX IF NOT EXISTS todos_lease ON todos (lease_until) WHERE status = 'claimed';
"""


def _in(column: str, values: Sequence[str] | None) -> tuple[str, list[Any]]:
    if values is None:
        return "1", []
    if not values:
        return "0", []
    return f"{column} IN ({', '.join('?' for _ in values)})", list(values)


class SqliteLedger:
    name = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._limiter = anyio.CapacityLimiter(1)

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn = self._conn
        if conn is None:
            raise RuntimeError("SqliteLedger is not open")
        return await anyio.to_thread.run_sync(fn, conn, limiter=self._limiter)

    async def open(self) -> None:
        def connect() -> sqlite3.Connection:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.executescript(SCHEMA)
            return conn

        try:
            self._conn = await anyio.to_thread.run_sync(connect, limiter=self._limiter)
        except sqlite3.Error as exc:
            raise LedgerError(f"cannot open SQLite ledger {str(self.path)!r}: {exc}") from None

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await anyio.to_thread.run_sync(conn.close, limiter=self._limiter)

    @staticmethod
    def _tx(conn: sqlite3.Connection, body: Callable[[sqlite3.Connection], T]) -> T:
        conn.execute("BEGIN IMMEDIATE")
        try:
            out = body(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return out

    @staticmethod
    def _get(conn: sqlite3.Connection, todo_id: str) -> Todo | None:
        if not todo_id.isdigit():
            return None
        row = conn.execute(f"SELECT {_COLS} FROM todos WHERE id = ?", (int(todo_id),)).fetchone()
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

        def body(conn: sqlite3.Connection) -> tuple[Todo, bool]:
            row = conn.execute(
                f"INSERT INTO todos (queue, kind, summary, payload, creator, creator_attribution,"
                f" creator_verified, push, idempotency_key, created_at, updated_at)"
                f" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                f" ON CONFLICT (creator, idempotency_key) DO NOTHING RETURNING {_COLS}",
                (
                    queue,
                    kind,
                    summary,
                    payload_text,
                    creator.name,
                    creator.attribution,
                    int(creator.verified),
                    int(creator.push),
                    idempotency_key,
                    now,
                    now,
                ),
            ).fetchone()
            if row is not None:
                return Todo.from_row(row), True
            row = conn.execute(
                f"SELECT {_COLS} FROM todos WHERE creator = ? AND idempotency_key = ?",
                (creator.name, idempotency_key),
            ).fetchone()
            return Todo.from_row(row), False

        return await self._run(lambda c: self._tx(c, body))

    async def get(self, todo_id: str) -> Todo | None:
        return await self._run(lambda c: self._get(c, todo_id))

    async def assign(self, todo_id: str, assignee: str | None, *, actor_pushes: bool, now: float) -> Change:
        def body(conn: sqlite3.Connection) -> Change:
            old = self._get(conn, todo_id)
            if old is None:
                raise not_claimable(None, todo_id)
            if old.status == "done":
                raise LedgerError(f"todo {todo_id} is already done; it cannot be assigned")
            row = conn.execute(
                f"UPDATE todos SET assignee = ?, updated_at = ? WHERE id = ? RETURNING {_COLS}",
                (assignee, now, int(todo_id)),
            ).fetchone()
            return Change(transition="assign", todo=Todo.from_row(row), old=old, actor_pushes=actor_pushes)

        return await self._run(lambda c: self._tx(c, body))

    async def claim(
        self, queues: Sequence[str] | None, claimant: str, *, lease: str, lease_seconds: float, now: float
    ) -> tuple[Todo | None, bool]:
        where, args = _in("queue", queues)

        def body(conn: sqlite3.Connection) -> tuple[Todo | None, bool]:
            held = conn.execute(
                f"SELECT {_COLS} FROM todos WHERE status = 'claimed' AND claimant = ? AND lease_until > ?"
                f" AND {where} ORDER BY id LIMIT 1",
                (claimant, now, *args),
            ).fetchone()
            if held is not None:
                return Todo.from_row(held), False
            row = conn.execute(
                f"UPDATE todos SET status = 'claimed', claimant = ?, lease = ?, lease_until = ?,"
                f" attempts = attempts + 1, updated_at = ?"
                f" WHERE id = (SELECT id FROM todos WHERE status = 'open' AND {where}"
                f" AND (assignee IS NULL OR assignee = ?) ORDER BY id LIMIT 1)"
                f" RETURNING {_COLS}",
                (claimant, lease, now + lease_seconds, now, *args, claimant),
            ).fetchone()
            return (None, False) if row is None else (Todo.from_row(row), True)

        return await self._run(lambda c: self._tx(c, body))

    def _finish(
        self, todo_id: str, lease: str, now: float, sql: str, args: tuple[Any, ...], transition: str
    ) -> Callable[[sqlite3.Connection], Change]:
        def body(conn: sqlite3.Connection) -> Change:
            old = self._get(conn, todo_id)
            if transition == "complete" and old is not None and old.status == "done" and old.lease == lease:
                return Change(transition="complete", todo=old, old=old)  # a retried complete: same answer
            if old is None or old.status != "claimed" or old.lease != lease:
                raise not_claimable(old, todo_id)
            if old.lease_until is not None and old.lease_until <= now:
                raise not_claimable(old, todo_id, lease_expired=True)
            row = conn.execute(sql, (*args, now, int(todo_id))).fetchone()
            return Change(transition=transition, todo=Todo.from_row(row), old=old)  # type: ignore[arg-type]

        return body

    async def complete(self, todo_id: str, lease: str, result: Any, *, now: float) -> Change:
        result_text = encode_json(result, "result")
        body = self._finish(
            todo_id,
            lease,
            now,
            f"UPDATE todos SET status = 'done', result = ?, lease_until = NULL, updated_at = ?"
            f" WHERE id = ? RETURNING {_COLS}",
            (result_text,),
            "complete",
        )
        return await self._run(lambda c: self._tx(c, body))

    async def release(self, todo_id: str, lease: str, *, now: float) -> Change:
        body = self._finish(
            todo_id,
            lease,
            now,
            f"UPDATE todos SET status = 'open', claimant = NULL, lease = NULL, lease_until = NULL,"
            f" updated_at = ? WHERE id = ? RETURNING {_COLS}",
            (),
            "release",
        )
        return await self._run(lambda c: self._tx(c, body))

    async def list_todos(
        self,
        queues: Sequence[str] | None,
        *,
        status: str | None = None,
        after: str | None = None,
        limit: int = 50,
        claimable_by: str | None = None,
    ) -> list[Todo]:
        where, args = _in("queue", queues)
        sql = f"SELECT {_COLS} FROM todos WHERE {where}"
        if status is not None:
            sql += " AND status = ?"
            args.append(status)
        if after is not None:
            sql += " AND id > ?"
            args.append(int(after))
        if claimable_by is not None:
            sql += " AND (assignee IS NULL OR assignee = ?)"
            args.append(claimable_by)
        sql += " ORDER BY id LIMIT ?"
        args.append(limit)
        rows = await self._run(lambda c: c.execute(sql, args).fetchall())
        return [Todo.from_row(r) for r in rows]

    async def expire(self, now: float) -> list[Change]:
        def body(conn: sqlite3.Connection) -> list[Change]:
            olds = [
                Todo.from_row(r)
                for r in conn.execute(
                    f"SELECT {_COLS} FROM todos WHERE status = 'claimed' AND lease_until <= ? ORDER BY id",
                    (now,),
                ).fetchall()
            ]
            rows = conn.execute(
                f"UPDATE todos SET status = 'open', claimant = NULL, lease = NULL, lease_until = NULL,"
                f" updated_at = ? WHERE status = 'claimed' AND lease_until <= ? RETURNING {_COLS}",
                (now, now),
            ).fetchall()
            new = {t.id: t for t in map(Todo.from_row, rows)}
            return [
                Change(transition="expire", todo=new[o.id], old=o, actor_pushes=o.push)
                for o in olds
                if o.id in new
            ]

        return await self._run(lambda c: self._tx(c, body))

    async def next_lease_deadline(self) -> float | None:
        row = await self._run(
            lambda c: c.execute("SELECT MIN(lease_until) FROM todos WHERE status = 'claimed'").fetchone()
        )
        return None if row is None or row[0] is None else float(row[0])

    def remote_changes(self) -> AsyncIterator[RemoteChange] | None:
        return None  # one process owns the file's fan-out; nothing to hear from
