"""The server's reading connections: read-only, with a statement timeout, and errors in one line.

A small pool opened on demand. Every session is ``default_transaction_read_only = on`` (each
statement runs in a read-only transaction: the server cannot write, whatever a config's query
says) with ``statement_timeout``, and autocommit, so a read is one round trip and holds no
snapshot or lock once answered. A connection found broken (``pg_terminate_backend``, a server
restart) is replaced and the read tried once more on the new one.

:func:`one_line` turns a driver error into the sentence a watcher reads: what went wrong with
which table, and what would fix it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio
import psycopg
from psycopg import errors as pgerrors
from psycopg import sql

__all__ = ["APP_NAME", "Database", "PgError", "one_line"]

log = logging.getLogger(__name__)

APP_NAME: Final = "asyncai-mcp-postgres"
Conn = psycopg.AsyncConnection[tuple[Any, ...]]


class PgError(Exception):
    """A read failed; ``str()`` is one line saying why. ``internal``: the server's fault or the
    database's (unreachable, too slow), not the watched resource's."""

    def __init__(self, message: str, *, internal: bool = False, refuse: bool = False) -> None:
        super().__init__(message)
        self.internal = internal
        self.refuse = refuse
        """The URI can only fail this way (no rights, a filter value its column cannot take):
        a listen naming it is refused, not acknowledged."""


def _first_line(text: str) -> str:
    return " ".join(text.strip().splitlines()[:1]) or text.strip()


_THE_DATABASES: Final = ("08", "40", "53", "55", "57", "58", "XX")
"""SQLSTATE classes that are the database's condition (connection, resources, shutdown,
lock or serialization, internal), not the watched resource's: -32603. Any other is -32002."""


def one_line(
    exc: psycopg.Error,
    what: str,
    *,
    role: str | None = None,
    timeout: float | None = None,
    hint: str = "",
) -> PgError:
    """``exc`` from reading ``what`` (e.g. ``public.payments``) as a :class:`PgError`; ``hint``
    (``"; ..."``) ends a message about the statement itself (e.g. where a named query's SQL is)."""
    primary = _first_line(exc.diag.message_primary or str(exc))
    if isinstance(exc, pgerrors.InsufficientPrivilege):
        who = f"role {role}" if role else "the server's role"
        return PgError(
            f"{what}: {primary}: {who} may not read it (GRANT SELECT ON it TO {role or 'that role'})",
            refuse=True,
        )
    if isinstance(exc, pgerrors.UndefinedTable):
        return PgError(f"{what}: {primary} (dropped or renamed?){hint}")
    if isinstance(exc, pgerrors.UndefinedColumn):
        return PgError(f"{what}: {primary} (the table was altered?){hint}")
    if isinstance(exc, pgerrors.QueryCanceled):
        limit = f" ({timeout:g} s, --statement-timeout)" if timeout is not None else ""
        return PgError(f"{what}: the read took longer than the statement timeout{limit}", internal=True)
    if isinstance(exc, psycopg.OperationalError):
        return PgError(f"{what}: cannot reach PostgreSQL: {primary}", internal=True)
    state = exc.sqlstate or "XX000"
    if state[:2] in _THE_DATABASES:
        return PgError(f"{what}: {type(exc).__name__}: {primary} (SQLSTATE {state})", internal=True)
    # The statement itself failed (class 42: a name or type it uses, 22: a value ...): say which.
    return PgError(f"{what}: {primary} (SQLSTATE {state}){hint}", refuse=state.startswith("22"))


class Database:
    def __init__(self, dsn: str, *, size: int = 4, statement_timeout: float = 5.0) -> None:
        self.dsn = dsn
        self.statement_timeout = statement_timeout
        self.queries = 0
        """Statements this server ran to read (the cost of watching; the bench counts it too)."""
        self.role: str | None = None
        self._free: list[Conn] = []
        self._slots = anyio.Semaphore(size)

    async def _connect(self) -> Conn:
        conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True, application_name=APP_NAME)
        try:
            await conn.execute(
                sql.SQL("SET default_transaction_read_only = on; SET statement_timeout = {}").format(
                    sql.Literal(f"{round(self.statement_timeout * 1000)}ms")
                )
            )
            if self.role is None:
                cur = await conn.execute("SELECT current_user::text")
                row = await cur.fetchone()
                self.role = str(row[0]) if row else None
        except BaseException:
            with anyio.CancelScope(shield=True):
                await conn.close()
            raise
        return conn

    @asynccontextmanager
    async def _conn(self) -> AsyncIterator[Conn]:
        async with self._slots:
            conn = self._free.pop() if self._free else await self._connect()
            reuse = False
            try:
                yield conn
                reuse = True
            except psycopg.Error as exc:
                # A statement that failed cleanly leaves the session as it was; a lost connection,
                # or a read cancelled mid-way (below: not a psycopg.Error), does not.
                reuse = not isinstance(exc, psycopg.OperationalError)
                if not reuse and not isinstance(exc, pgerrors.QueryCanceled):
                    # A lost connection: the idle ones were most likely cut too (a restart of
                    # PostgreSQL cuts them all), and the one retry must get a new one.
                    stale, self._free = self._free, []
                    with anyio.CancelScope(shield=True):
                        for old in stale:
                            await old.close()
                raise
            finally:
                if reuse and not (conn.closed or conn.broken):
                    self._free.append(conn)
                else:
                    with anyio.CancelScope(shield=True):
                        await conn.close()

    async def maintain(
        self, query: sql.SQL | sql.Composed | str, params: Sequence[Any] | None = None
    ) -> list[tuple[Any, ...]]:
        """All rows of one statement in a read-write transaction: a ``SECURITY DEFINER`` function
        of the change log that deletes (its age retention); the sessions stay read-only otherwise."""
        async with self._conn() as conn, conn.transaction():
            self.queries += 1
            await conn.execute("SET TRANSACTION READ WRITE")
            cur = await conn.execute(query, params or None)
            return await cur.fetchall()

    async def fetch(
        self, query: sql.SQL | sql.Composed | str, params: Sequence[Any] | None = None
    ) -> list[tuple[Any, ...]]:
        """All rows of one read-only statement; a lost connection is replaced and the read retried once."""
        for attempt in (1, 2):
            try:
                async with self._conn() as conn:
                    self.queries += 1
                    cur = await conn.execute(query, params or None)  # no params: '%' in a query stays '%'
                    return await cur.fetchall()
            except psycopg.OperationalError as exc:
                if attempt == 2 or isinstance(exc, pgerrors.QueryCanceled):
                    raise
                log.info("a reading connection was lost (%s); retrying on a new one", _first_line(str(exc)))
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        conns, self._free = self._free, []
        for conn in conns:
            await conn.close()
