"""The PostgreSQL ledger's connections: a fixed number of slots that replace what breaks.

A slot holds a connection, or nothing once its connection broke. Each verb takes a slot (waiting
its turn, first come first served), connects it if it is empty, and runs its transaction. When
the connection turns out to be broken (the server restarted, an administrator terminated the
backend, the network dropped it), the slot is emptied, and:

- if the transaction body had not finished (COMMIT was not sent), nothing was applied: a
  connection that had been waiting in the pool is presumed to have died meanwhile, so the verb
  runs once more on a new connection; a new connection that fails too means the database is
  unavailable, and the verb fails with :class:`UnavailableError`;
- if it broke during COMMIT, the outcome is unknown: :class:`OutcomeUnknownError`.

Nothing waits for the database to come back and nothing probes it: the next verb connects on
demand, so it succeeds as soon as the database accepts connections again. A connection left
mid-transaction (a verb cancelled under it) is closed rather than reused.

Why not ``psycopg_pool``: its ``AsyncConnectionPool`` replaces a broken connection from a
background worker that retries on its own timer (``reconnect_timeout``, jittered backoff), so a
request after an outage waits for that worker's next attempt, up to the pool's ``timeout``
(default 30 s), instead of failing at once or succeeding as soon as the database is back; and
its broken-connection check (``check=``) costs a round trip on every checkout. What this ledger
needs is smaller than what it solves: a fixed size, connect on demand, drop what broke.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final, TypeVar

import anyio
import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus

from .ledger import LedgerError, OutcomeUnknownError, UnavailableError

__all__ = ["CONNECT_TIMEOUT", "Conn", "Pool", "connect_kwargs", "reason"]

log = logging.getLogger(__name__)
T = TypeVar("T")
Conn = psycopg.AsyncConnection[tuple[Any, ...]]
CONNECT_TIMEOUT: Final = 10
"""Seconds a connect may take (unless the DSN sets ``connect_timeout``): a dead host fails a verb in
this time rather than psycopg's default of 130 s."""
KEEPALIVES: Final = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3}
"""TCP keepalives (unless the DSN sets them): a server that vanished without closing the connection
(a host or network gone) is noticed in about a minute, not the system's two hours; this is what
ends a LISTEN that would otherwise wait forever."""
REASON_MAX: Final = 200


def reason(exc: BaseException) -> str:
    """The driver's message on one line, capped: what an error text quotes."""
    text = re.sub(r"\s+", " ", str(exc)).strip() or type(exc).__name__
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 1] + "…"


def connect_kwargs(dsn: str, application_name: str) -> dict[str, Any]:
    """Connection settings the DSN does not set itself: a name to find the connections by in
    ``pg_stat_activity``, a connect timeout and TCP keepalives."""
    given: Mapping[str, Any] = conninfo_to_dict(dsn)
    extra: dict[str, Any] = {}
    if "application_name" not in given:
        extra["application_name"] = application_name[:63]  # PostgreSQL's NAMEDATALEN - 1
    if "connect_timeout" not in given:
        extra["connect_timeout"] = CONNECT_TIMEOUT
    if not any(key in given for key in KEEPALIVES):
        extra.update(KEEPALIVES)
    return extra


class _Slot:
    __slots__ = ("conn",)

    def __init__(self) -> None:
        self.conn: Conn | None = None


class Pool:
    def __init__(self, dsn: str, size: int, *, application_name: str) -> None:
        if size < 1:
            raise ValueError(f"pool size must be >= 1, got {size}")
        self.dsn = dsn
        self.size = size
        self._kwargs = connect_kwargs(dsn, application_name)
        self._slots = [_Slot() for _ in range(size)]
        self._free_send, self._free_recv = anyio.create_memory_object_stream[_Slot](size)
        for slot in self._slots:
            self._free_send.send_nowait(slot)

    async def connect(self, **kwargs: Any) -> Conn:
        return await psycopg.AsyncConnection.connect(self.dsn, **{**self._kwargs, **kwargs})

    async def open(self) -> None:
        """Connect every slot now, so a wrong DSN or a database that is down fails the start."""
        for slot in self._slots:
            slot.conn = await self.connect()

    async def aclose(self) -> None:
        for slot in self._slots:
            await self._discard(slot)

    @staticmethod
    async def _discard(slot: _Slot) -> None:
        conn, slot.conn = slot.conn, None
        if conn is not None:
            with anyio.CancelScope(shield=True):
                await conn.close()

    @asynccontextmanager
    async def _slot(self) -> AsyncIterator[_Slot]:
        slot = await self._free_recv.receive()
        try:
            yield slot
        finally:
            conn = slot.conn
            # Mid-transaction (cancelled under a verb) or broken: never hand it to the next verb.
            if conn is not None and (conn.broken or conn.info.transaction_status != TransactionStatus.IDLE):
                await self._discard(slot)
            self._free_send.send_nowait(slot)

    async def transaction(self, body: Callable[[Conn], Awaitable[T]], *, read_only: bool = False) -> T:
        """Run ``body`` in one transaction on a working connection; see the module doc for failures.

        ``read_only``: ``body`` changes nothing, so a connection lost while committing is retried
        like one lost before. Errors of a statement on a working connection (a constraint, a
        lock timeout) roll the transaction back and come out as :class:`LedgerError`.
        """
        async with self._slot() as slot:
            for _attempt in range(2):
                fresh = slot.conn is None
                if fresh:
                    try:
                        slot.conn = await self.connect()
                    except psycopg.Error as exc:
                        raise UnavailableError(
                            f"PostgreSQL is unavailable ({reason(exc)}); nothing was changed, retry the call"
                        ) from None
                conn = slot.conn
                assert conn is not None
                committing = False
                try:
                    async with conn.transaction():
                        result = await body(conn)
                        committing = True
                    return result
                except psycopg.Error as exc:
                    if not conn.broken:
                        raise LedgerError(f"PostgreSQL error: {reason(exc)}") from exc
                    await self._discard(slot)
                    if committing and not read_only:
                        raise OutcomeUnknownError(
                            f"PostgreSQL connection lost while committing ({reason(exc)}); the change may or"
                            " may not have been applied: read it back (todo_list) before repeating it"
                            " (todo_create with the same idempotency_key, todo_claim and todo_complete"
                            " are safe to repeat)"
                        ) from None
                    if fresh:
                        raise UnavailableError(
                            f"PostgreSQL is unavailable ({reason(exc)}); nothing was changed, retry the call"
                        ) from None
                    # A connection that waited in the pool died meanwhile: once more on a new one.
                    log.info("switchboard ledger connection lost (%s); reconnecting", reason(exc))
        raise AssertionError("unreachable: the second attempt is always on a fresh connection")
