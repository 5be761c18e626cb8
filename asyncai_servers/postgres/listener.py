"""The one ``LISTEN asyncai_watch`` connection: what the database pushes, and a resync after a gap.

:func:`decode` (pure) reads a trigger's payload (triggers.py) into a :class:`RowsChanged` or a
:class:`DdlChanged`. :class:`Listener` holds the connection: it calls ``on_resync`` each time
``LISTEN`` is (re)established, then ``on_change`` for each notification, in commit order. A
``NOTIFY`` sent while the connection was down is lost for good, so ``on_resync`` is where the
server re-reads everything it watches: ``LISTEN`` comes first, so a change committed after the
re-read's snapshot is notified, and one committed before it is in the re-read.

A lost connection (``pg_terminate_backend``, a database restart, a network cut: TCP keepalives
find a silent one) is reconnected at once; failed connects back off (1, 2, 4 .. 16 s by
default) on the injected clock, and each one calls ``on_down``: until ``on_resync``, the server
cannot know what changes, and says so. While nothing changes, the connection only waits: no query.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

import anyio
import attrs
import msgspec
import psycopg

from asyncai_servers.postgres.config import TableName
from asyncai_servers.postgres.db import APP_NAME
from asyncai_servers.postgres.rowset import Number
from asyncai_servers.postgres.triggers import CHANNEL
from asyncai_watch import Backoff
from asyncai_watch.clock import Clock, SystemClock

__all__ = ["LISTEN_APP_NAME", "RECONNECT", "DdlChanged", "Listener", "RowsChanged", "decode"]

log = logging.getLogger(__name__)

LISTEN_APP_NAME: Final = f"{APP_NAME} listen"
"""``application_name`` of the LISTEN connection (find it in ``pg_stat_activity``)."""
RECONNECT: Final = Backoff(initial=1.0, cap=16.0, attempts=None)


@attrs.frozen
class RowsChanged:
    """Rows of ``table`` changed: these primary keys (each a list of the key's column values),
    or ``None``: any row may have (too many keys for one notification, TRUNCATE, no key)."""

    table: TableName
    op: str
    keys: tuple[tuple[Any, ...], ...] | None


@attrs.frozen
class DdlChanged:
    """DDL ran; on these tables (``pg_class`` oids), or ``None``: on anything (GRANT, our triggers)."""

    tag: str
    oids: frozenset[int] | None


class _Payload(msgspec.Struct, forbid_unknown_fields=False):
    s: str | None = None
    t: str | None = None
    op: str = ""
    k: list[list[Any]] | None = None
    ddl: str | None = None
    # jsonb_agg makes a JSON string of an ``oid`` ("16768"); triggers installed before 0.2 send those.
    oids: list[int | str] | None = None


_decode = msgspec.json.Decoder(_Payload, float_hook=Number).decode  # keys exact: rowset.Number


def decode(payload: str) -> RowsChanged | DdlChanged | None:
    """A notification's payload, or None when it is not one of ours (logged, then ignored)."""
    try:
        p = _decode(payload)
    except msgspec.DecodeError:
        log.warning("ignored a notification on %s that is not ours: %.200s", CHANNEL, payload)
        return None
    if p.ddl is not None:
        if p.oids is None:
            return DdlChanged(p.ddl, None)
        try:
            return DdlChanged(p.ddl, frozenset(int(oid) for oid in p.oids))
        except ValueError:
            return DdlChanged(p.ddl, None)  # unreadable oids: every watch looks again
    if p.s is None or p.t is None:
        log.warning("ignored a notification on %s without a table: %.200s", CHANNEL, payload)
        return None
    keys = None if p.k is None else tuple(tuple(k) for k in p.k)
    return RowsChanged(TableName(p.s, p.t), p.op, keys)


class Listener:
    def __init__(
        self,
        dsn: str,
        *,
        on_change: Callable[[RowsChanged | DdlChanged], None],
        on_resync: Callable[[], None],
        on_down: Callable[[str], None] = lambda _reason: None,
        clock: Clock | None = None,
        backoff: Backoff = RECONNECT,
    ) -> None:
        self.dsn = dsn
        self.on_change = on_change
        self.on_resync = on_resync
        self.on_down = on_down
        """Called with the reason each time a connect fails: nothing is heard until ``on_resync``."""
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.backoff = backoff
        self.backend_pid: int | None = None
        """The LISTEN connection's backend pid while it is up."""
        self.connects = 0

    async def run(self) -> None:
        failures = 0  # failed connects in a row
        while True:
            conn: psycopg.AsyncConnection[tuple[Any, ...]] | None = None
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self.dsn,
                    autocommit=True,
                    application_name=LISTEN_APP_NAME,
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
                delay = self.backoff.delay(failures)
                assert delay is not None  # attempts=None: forever
                failures += 1
                log.warning("LISTEN connect failed (%s); retrying in %g s", _line(exc), delay)
                # A lost connection is tried again at once; only when that fails is PostgreSQL
                # unreachable (a LISTEN cut with the database up is a resync, not an outage).
                self.on_down(_line(exc))
                await self.clock.sleep_until(self.clock.now() + delay)
                continue
            failures = 0
            self.connects += 1
            self.backend_pid = conn.info.backend_pid
            if self.connects > 1:
                log.warning("LISTEN re-established; re-reading every watched table")
            try:
                # After LISTEN, before the first notification: anything committed while not
                # listening is re-read; anything after is heard.
                self.on_resync()
                async for note in conn.notifies():
                    change = decode(note.payload)
                    if change is not None:
                        self.on_change(change)
            except psycopg.Error as exc:
                log.warning("LISTEN connection lost (%s); reconnecting", _line(exc))
            finally:
                self.backend_pid = None
                with anyio.CancelScope(shield=True):
                    await conn.close()


def _line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
