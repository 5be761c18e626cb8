"""One source per watched target: what it read last, and a task that re-reads when told.

A :class:`TableSource` keeps a table's rows (or a filtered view's) in a
:class:`~asyncai_servers.postgres.rowset.RowSet` (the event log, filtered or not, is the
database's durable change log); a
:class:`QuerySource` keeps a named query's last result. Reads of the resource are answered from
there, so any number of readers cost no query. What makes a source read the database:

- a ``NOTIFY`` naming keys of its table: it re-reads those keys (a ``NOTIFY`` without keys, or
  one naming more than :data:`MAX_REREAD` keys at once: the whole set). A query re-runs.
- the ``LISTEN`` connection coming back (:meth:`Source.resync`): the whole set, since a
  ``NOTIFY`` sent while it was down is lost.
- DDL on one of its tables, or any DDL while it is failing: the catalog is looked up again
  (does the table still exist, with that primary key, those triggers), then the whole set.

Requests pile up while a read runs and are served together by the next one, so a burst of
changes costs as many reads as the database can answer, not one per change.

A failure (a dropped table, lost rights, the row cap, the database unreachable) is one line: a
read of the state then fails with it, and a filtered event log gets it as an ``ERROR`` event
(after its first good read; before, the read fails). A table's durable change log (capture.py,
:meth:`TableSource.read_log`) is read from the database: its read fails with the same line,
except over the row cap, which does not concern the log. The next change, resync or DDL tries again; a
recovery is reported as the net change since the last good read.
"""

from __future__ import annotations

import json
import logging
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio
import psycopg
from psycopg import sql

from asyncai_servers.postgres.capture import (
    CAPTURE_TRIGGERS,
    LogPage,
    log_body,
    log_body_where,
    read_log,
    read_log_where,
)
from asyncai_servers.postgres.config import TableName, TableSpec
from asyncai_servers.postgres.db import Database, PgError, one_line
from asyncai_servers.postgres.listener import DdlChanged, RowsChanged
from asyncai_servers.postgres.queries import (
    TRIGGER_NAMES,
    TableMeta,
    catalog,
    first_reads,
    load_rows,
    meta_from_row,
    query_rows,
    reread_rows,
    shared_reread,
)
from asyncai_servers.postgres.rowset import OverCap, RowChange, RowSet, key_text, query_body
from asyncai_servers.postgres.uri import STATE_SCHEME, QueryTarget, TableTarget, table_template

__all__ = ["LOG_PAGE", "MAX_REREAD", "READY_TIMEOUT", "QuerySource", "Source", "TableGroup", "TableSource"]

log = logging.getLogger(__name__)

MAX_REREAD: Final = 1000
"""More changed keys than this waiting at once: the whole set is read instead of each key."""
READY_TIMEOUT: Final = 30.0
"""How long a read waits for a new source's first read."""
LOG_PAGE: Final = 100
"""Events one read of a durable log returns at most (the client's default ``events_per_update``:
a reader catching up reads page after page, signalled again after each, instead of a ``GAP``)."""
LOG_SCAN: Final = 2000
"""Events of the table's log one read of a filtered view's log looks at, at most (the view's
are among them: a reader far behind reads on, page after page)."""


class RowCapError(PgError):
    """The target holds more rows than its ``max_rows``: its state cannot be served, its durable
    change log still can (the log does not hold the rows)."""


class Source:
    """What :class:`TableSource` and :class:`QuerySource` share: the wake-up loop and failure handling."""

    def __init__(self, db: Database, publish: Callable[[Source], Awaitable[None]]) -> None:
        self.db = db
        self._publish = publish
        self.uris: Counter[str] = Counter()
        """The URI strings open listen streams used for this source (publish names each)."""
        self.ready = anyio.Event()
        """Set after the first read, good or not."""
        self.error: PgError | None = None
        self.good = False
        """A read succeeded at least once."""
        self.signalled = False
        """An update went out and no read of the source started since (level-triggered publish)."""
        self.meta: dict[TableName, TableMeta] = {}
        self._revalidate = True
        self._all = True
        self._down: PgError | None = None
        """PostgreSQL is unreachable (the LISTEN connection cannot connect): why, until it is back."""
        self._told_down = False
        self.nudge: Callable[[], None] | None = None
        """Also called when the source has work (a :class:`TableGroup` runs its sources' steps)."""
        self.prefetched: dict[TableName, TableMeta] | PgError | None = None
        """The catalog as its group looked it up for all its sources, used by the next lookup."""
        self._wake = anyio.Event()
        self._wake.set()

    def tables(self) -> tuple[TableName, ...]:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    # -- what the server tells a source (synchronous: called from the LISTEN task) ---------------

    def _poke(self) -> None:
        self._wake.set()
        if self.nudge is not None:
            self.nudge()

    def changed(self, change: RowsChanged) -> None:
        self._all = True
        self._poke()

    def ddl(self, change: DdlChanged) -> None:
        oids = {m.oid for m in self.meta.values()}
        if change.oids is None or self.error is not None or oids & change.oids or not self.meta:
            self._revalidate = True
            self._all = True
            self._poke()

    def retry(self) -> None:
        """Read the whole set at the next step (its group runs it)."""
        self._all = True
        self._wake.set()

    def resync(self) -> None:
        self._down = None
        self._told_down = False
        self._all = True
        self._poke()

    def unreachable(self, error: PgError) -> None:
        """Nothing can be heard (the server cannot LISTEN): reads fail with ``error`` until
        :meth:`resync`, which re-reads and reports the net change."""
        self._down = error
        self._poke()

    @property
    def down(self) -> bool:
        return self._down is not None

    @property
    def has_work(self) -> bool:
        return self._wake.is_set()

    @property
    def will_revalidate(self) -> bool:
        return self._revalidate or self.error is not None or not self.meta

    # -- the loop ------------------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            await self.step()

    async def step(self) -> None:
        """Do what the source was woken for (its own loop, or its group's)."""
        self._wake = anyio.Event()
        prefetched, self.prefetched = self.prefetched, None  # for this step only, never a later one
        if self._down is not None:
            self._revalidate = True  # what changed meanwhile is unknown: look at it all again
            if self._told_down:
                self.error = self._down  # still down (the reason may read differently): nothing new
            else:
                self._told_down = True
                await self._failed(self._down)
            return
        revalidate = self._revalidate or self.error is not None or not self.meta
        self._revalidate = False
        try:
            if revalidate:
                if isinstance(prefetched, PgError):
                    raise prefetched
                self.meta = prefetched if prefetched is not None else await self._lookup()
            changed = await self._refresh(revalidate)
        except PgError as exc:
            await self._failed(exc)
            return
        except Exception as exc:  # a bug here must not take the server and every other watch down
            log.exception("%s: reading failed", self.describe())
            await self._failed(PgError(f"{self.describe()}: {type(exc).__name__}: {exc}", internal=True))
            return
        recovered = self.error is not None
        if recovered:
            log.warning("%s: reads work again", self.describe())
        first, self.good = not self.good, True
        self.error = None
        self.ready.set()
        # The first good read is the baseline every reader starts from: no update for it.
        if (changed and not first) or recovered:
            await self.publish()

    async def _refresh(self, revalidated: bool) -> bool:
        """Read what is wanted now; True when a reader would see something new."""
        raise NotImplementedError

    async def _failed(self, exc: PgError) -> None:
        self.ready.set()
        if self.error is not None and str(self.error) == str(exc):
            return  # still failing the same way: nothing new to tell
        log.warning("%s", exc)
        self.error = exc
        self._report(str(exc))
        await self.publish()

    def _report(self, message: str) -> None:
        """Tell event-log readers of a failure (table sources)."""

    async def publish(self) -> None:
        if self.signalled or not self.uris:
            return
        self.signalled = True
        await self._publish(self)

    async def wait_ready(self) -> None:
        with anyio.move_on_after(READY_TIMEOUT):
            await self.ready.wait()
        if not self.ready.is_set():
            raise PgError(
                f"{self.describe()}: the first read took over {READY_TIMEOUT:g} s; is PostgreSQL reachable?",
                internal=True,
            )

    # -- reading the catalog --------------------------------------------------------------------

    async def _lookup(self) -> dict[TableName, TableMeta]:
        tables = self.tables()
        query, params = catalog(tables)
        try:
            rows = await self.db.fetch(query, params)
        except psycopg.Error as exc:
            raise one_line(
                exc, self.describe(), role=self.db.role, timeout=self.db.statement_timeout
            ) from None
        found = {m.name: m for m in map(meta_from_row, rows)}
        for name in tables:
            meta = found.get(name)
            if meta is None:
                raise PgError(
                    f"{name} does not exist (dropped or renamed?); the watch resumes once it exists again "
                    "with its triggers (--install-triggers)"
                )
            _check(meta)
        return found


def _check(meta: TableMeta) -> None:
    name = meta.name
    if meta.kind not in ("r", "p"):
        raise PgError(
            f"{name} is not a table (pg_class.relkind {meta.kind!r}): only tables carry the triggers; "
            "watch a view through a [[query]] whose depends_on names its tables"
        )
    missing = [t for t in TRIGGER_NAMES if t not in meta.triggers]
    if missing:
        raise PgError(
            f"{name} has no asyncai-watch triggers ({', '.join(missing)} missing or disabled), so its changes "
            "would never be heard: run asyncai-mcp-postgres --config CONFIG --install-triggers as its owner"
        )
    if meta.unwatched:
        shown = ", ".join(meta.unwatched[:5]) + (
            f" and {len(meta.unwatched) - 5} more" if len(meta.unwatched) > 5 else ""
        )
        raise PgError(
            f"{name} has partitions without asyncai-watch triggers ({shown}), so their changes would never "
            "be heard: run asyncai-mcp-postgres --config CONFIG --install-triggers as its owner (as a "
            "superuser it also covers partitions created later)"
        )
    if not meta.readable:
        raise PgError(
            f"role {meta.role} may not read {name} (permission denied): GRANT USAGE ON SCHEMA "
            f"{name.schema} and SELECT ON {name} TO {meta.role}",
            refuse=True,
        )


class TableSource(Source):
    def __init__(
        self,
        target: TableTarget,
        db: Database,
        publish: Callable[[Source], Awaitable[None]],
    ) -> None:
        super().__init__(db, publish)
        self.target = target
        self.rows = RowSet(target.spec.max_rows)
        self._keys: dict[tuple[Any, ...], None] = {}
        self.group: TableGroup | None = None
        self.match: tuple[tuple[str, str], ...] | None = () if not target.filter else None
        """The filter's values as a row's are matched (queries.load_rows); None until read."""
        self._heard = False  # a change or a resync since the last refresh: the durable log may have grown
        self.preloaded: list[tuple[Any, ...]] | None = None
        """Its whole read, as its group read it for several new filtered sources at once (load_rows' shape)."""

    def heard(self) -> None:
        """Its table was written: every commit is a new entry of its durable log, even one the
        rows do not show (a row added and deleted before the re-read), so its readers are told.
        A filtered view is told when its rows change instead: signalling every view of a table
        at each write would wake every reader of 10,000 views for one row."""
        if not self.target.filter:
            self._heard = True

    async def told(self) -> None:
        """After its group's shared re-read: signal the log's readers of what was :meth:`heard`
        (a source with a step of its own to run signals after it instead)."""
        if self._heard and not self.has_work and self.good and self.error is None:
            self._heard = False
            await self.publish()

    def changed(self, change: RowsChanged) -> None:
        self.heard()
        super().changed(change)

    def resync(self) -> None:
        self.heard()
        super().resync()

    def tables(self) -> tuple[TableName, ...]:
        return (self.target.table,)

    def describe(self) -> str:
        return self.target.describe()

    @property
    def _meta(self) -> TableMeta:
        return self.meta[self.target.table]

    async def _refresh(self, revalidated: bool) -> bool:
        # Every commit to the table is a new entry in the durable log, even one the rows do not
        # show (a row added and deleted before the re-read): tell the log's readers.
        heard, self._heard = self._heard, False
        return await self._reread(revalidated) or heard

    async def _reread(self, revalidated: bool) -> bool:
        meta = self._meta
        if revalidated:
            self._check_columns(meta)
        # After a failure or DDL (revalidated), the whole set: what changed meanwhile is unknown.
        full, keys = self._all or revalidated, list(self._keys)
        self._all = False
        self._keys.clear()
        if not full and any(len(k) != len(meta.primary_key) for k in keys):
            full = True  # the primary key changed under us: the next failure revalidates
        try:
            if full:
                rows, self.preloaded = self.preloaded, None
                if rows is None:
                    query, params = load_rows(meta, self.target)
                    rows = await self._fetch(query, params)
                for k, r in rows:
                    if k is None:  # the filter's values, as a row's are matched
                        self.match = tuple(
                            zip([c for c, _ in self.target.filter], json.loads(r), strict=True)
                        )
                changes = self.rows.replace((str(k), str(r)) for k, r in rows if k is not None)
            elif keys:
                query, params = reread_rows(meta, self.target, keys)
                found = await self._fetch(query, params)
                changes = self.rows.update((str(k), None if r is None else str(r)) for k, r in found)
            else:
                return False
        except OverCap as exc:
            raise self._over_cap(exc) from None
        if self.group is not None:
            self.group.track(self, changes)
        return bool(changes)

    @property
    def steady(self) -> bool:
        """Up to date with nothing of its own to do: its group's re-read of changed keys serves it."""
        return (
            self.good
            and self.error is None
            and not self.has_work
            and self.match is not None
            and bool(self.meta)
        )

    async def apply(self, found: list[tuple[str, str | None]]) -> None:
        """Its part of its group's re-read: ``(key_json, row_json or None)``, None when the row is
        gone or does not match this source's filter."""
        try:
            changes = self.rows.update(found)
        except OverCap as exc:
            await self._failed(self._over_cap(exc))
            return
        if self.group is not None:
            self.group.track(self, changes)
        if changes:
            await self.publish()

    async def _fetch(self, query: Any, params: Any) -> list[tuple[Any, ...]]:
        try:
            return await self.db.fetch(query, params)
        except psycopg.Error as exc:
            self._revalidate = True  # e.g. a column went: look at the catalog before the next read
            raise one_line(
                exc, self.describe(), role=self.db.role, timeout=self.db.statement_timeout
            ) from None

    def _check_columns(self, meta: TableMeta) -> None:
        spec = self.target.spec
        if not meta.primary_key:
            raise PgError(
                f"{meta.name} has no primary key, and rows are keyed by it: add one "
                f"(ALTER TABLE {meta.name} ADD PRIMARY KEY (...)) or watch it through a [[query]]"
            )
        named = [*spec.where, *(spec.columns or ())]
        gone = [c for c in dict.fromkeys(named) if c not in meta.columns]
        if gone:
            raise PgError(
                f"{meta.name} has no column {', '.join(map(repr, gone))} (named in the config's where/columns); "
                f"its columns: {', '.join(meta.columns)}"
            )

    def _over_cap(self, exc: OverCap) -> RowCapError:
        spec = self.target.spec
        narrower = (
            f"watch fewer rows with a filter ({table_template(STATE_SCHEME, spec)}) or raise it"
            if spec.where
            else "raise it, or allow a filter column (where = [...]) and watch fewer rows"
        )
        return RowCapError(
            f"{self.describe()} has more than {exc.max_rows} rows, the row cap (max_rows = {exc.max_rows} "
            f"in the config's [[table]] for {spec.table}); {narrower}"
        )

    async def read_log(self, after: tuple[str, int] | None) -> LogPage:
        """The durable log after the reader's position (call after :meth:`wait_ready`): at most
        :data:`LOG_PAGE` events; another ``log_id`` (or none) gets the newest page."""
        self.signalled = False
        meta = self.meta.get(self.target.table)
        if (self.error is not None and not isinstance(self.error, RowCapError)) or meta is None:
            assert self.error is not None
            raise self.error  # the table is gone, or unreadable, or the database is: so is its log
        if CAPTURE_TRIGGERS[0] not in meta.triggers:
            raise PgError(
                f"{meta.name} has no durable change log ({CAPTURE_TRIGGERS[0]} missing or disabled; an "
                "install before it kept the log in memory): run asyncai-mcp-postgres --config CONFIG "
                "--install-triggers again as its owner"
            )
        where = self.target.filter
        query: sql.SQL | sql.Composed
        if where:
            query, params = read_log_where(meta.oid, meta.name, where, after, LOG_SCAN)
        else:
            query, params = read_log(meta.oid, after, LOG_PAGE)
        try:
            rows = await self.db.fetch(query, params)
        except psycopg.Error as exc:
            raise one_line(exc, f"{self.describe()} (its change log)", role=self.db.role) from None
        if where:
            return log_body_where(
                rows, after, LOG_PAGE, LOG_SCAN, meta.name, meta.primary_key, self.target.spec.columns
            )
        return log_body(rows, meta.name, meta.primary_key, self.target.spec.columns)

    def read(self) -> str:
        """The state body (call after :meth:`wait_ready`); raises its :class:`PgError`."""
        self.signalled = False  # before the read: a change from now on is signalled again
        if self.error is not None:
            raise self.error
        return self.rows.body()


class QuerySource(Source):
    def __init__(
        self, target: QueryTarget, db: Database, publish: Callable[[Source], Awaitable[None]]
    ) -> None:
        super().__init__(db, publish)
        self.target = target
        self.body: str | None = None

    def tables(self) -> tuple[TableName, ...]:
        return self.target.spec.depends_on

    def describe(self) -> str:
        return self.target.describe()

    async def _refresh(self, revalidated: bool) -> bool:
        if not (self._all or revalidated):
            return False
        self._all = False
        spec = self.target.spec
        query, params = query_rows(spec)
        try:
            rows = await self.db.fetch(query, params)
        except psycopg.Error as exc:
            self._revalidate = True
            hint = (
                f"; the config's [[query]] {spec.name!r} sql fails as written (try it in psql as role "
                f"{self.db.role}): fix it, or the tables it reads"
            )
            raise one_line(
                exc, self.describe(), role=self.db.role, timeout=self.db.statement_timeout, hint=hint
            ) from None
        if len(rows) > spec.max_rows:
            raise PgError(
                f"{self.describe()} returned more than {spec.max_rows} rows, the row cap (max_rows = "
                f"{spec.max_rows} in the config's [[query]] {spec.name!r}); narrow the query or raise it"
            )
        body = query_body([(None if k is None else str(k), str(r)) for k, r in rows])
        changed = body != self.body
        self.body = body
        return changed

    def read(self) -> str:
        self.signalled = False
        if self.error is not None:
            raise self.error
        assert self.body is not None
        return self.body


class TableGroup:
    """Every :class:`TableSource` of one table, and the one task that reads for them.

    A ``NOTIFY`` naming keys costs one statement however many sources (filtered URIs) watch the
    table: the rows with those keys are read once, unfiltered, with their ``where`` columns as
    matched (queries.shared_reread), and each source's rows are updated from them in memory: a
    row goes to the sources whose filter it matches (an index by filter value), and leaves those
    that held it and no longer match (an index by key). What a source needs on its own (its
    first read, a whole read after DDL, a resync or an error) runs here too, one source after
    another, after the catalog is looked up once for all of them; so a source's reads never
    overlap the shared ones. Per change the work is the changed rows' sources, not every source.
    """

    def __init__(self, table: TableName, db: Database) -> None:
        self.table = table
        self.db = db
        self.sources: set[TableSource] = set()
        self.holders: defaultdict[str, set[TableSource]] = defaultdict(set)
        """Which filtered sources hold a row (by key): those the row may leave."""
        self._unfiltered: set[TableSource] = set()
        self._needy: dict[TableSource, None] = {}
        """Sources woken for work of their own, in order."""
        self._unsteady: set[TableSource] = set()
        """Sources the shared re-read does not serve (new, failing, or with work of their own)."""
        self._index: dict[tuple[str, ...], dict[tuple[str, ...], list[TableSource]]] | None = None
        self._keys: dict[tuple[Any, ...], None] = {}
        self._wake = anyio.Event()
        self.rereads = 0
        """Shared re-reads run (each one statement)."""
        self.first_reads = 0
        """Shared first reads run (each one statement for every new filtered source on the same columns)."""

    def add(self, source: TableSource) -> None:
        source.group = self
        source.nudge = lambda: self._mark(source)
        self.sources.add(source)
        if not source.target.filter:
            self._unfiltered.add(source)
        self._index = None
        self._mark(source)

    def _mark(self, source: TableSource) -> None:
        self._needy[source] = None
        self._unsteady.add(source)
        self._wake.set()  # the current event: the loop replaces it each round

    def remove(self, source: TableSource) -> None:
        self.sources.discard(source)
        self._unfiltered.discard(source)
        self._unsteady.discard(source)
        self._needy.pop(source, None)
        self._index = None
        for key in source.rows.rows:
            held = self.holders.get(key)
            if held is not None:
                held.discard(source)
                if not held:
                    del self.holders[key]

    def track(self, source: TableSource, changes: list[RowChange]) -> None:
        if not source.target.filter:
            return
        for change in changes:
            if change.type == "ADDED":
                self.holders[change.key].add(source)
            elif change.type == "DELETED":
                held = self.holders.get(change.key)
                if held is not None:
                    held.discard(source)
                    if not held:
                        del self.holders[change.key]

    def changed(self, change: RowsChanged) -> None:
        for source in self._unfiltered:
            source.heard()
        if change.keys is None or len(self._keys) + len(change.keys) > MAX_REREAD:
            self._keys.clear()
            for source in self.sources:
                source.changed(change)  # a whole read each
            return
        self._keys.update(dict.fromkeys(change.keys))
        self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            keys, self._keys = list(self._keys), {}
            if keys:
                await self._reread(keys)
                for source in list(self._unsteady):
                    if source.error is not None and not source.has_work:
                        source.retry()  # a failing source tries again at each change, on its own
                        self._needy[source] = None
                for source in list(self._unfiltered):
                    await source.told()
            needy, self._needy = list(self._needy), {}
            needy = [s for s in needy if s.has_work and s in self.sources]
            prefetched: dict[TableName, TableMeta] | PgError | None = None
            if any(s.will_revalidate and not s.down for s in needy):
                try:
                    prefetched = await needy[0]._lookup()
                except PgError as exc:
                    prefetched = exc
                except Exception:
                    log.exception("%s: the catalog lookup failed", self.table)
                    prefetched = None
                for source in needy:
                    source.prefetched = prefetched if source.will_revalidate else None
            if isinstance(prefetched, dict) and self.table in prefetched:
                await self._first_reads(prefetched[self.table], needy)
            for source in needy:
                if source not in self.sources:  # stopped meanwhile
                    continue
                before = source.match
                await source.step()
                source.preloaded = None  # (unused when the step failed before reading)
                if source.steady:
                    self._unsteady.discard(source)
                else:
                    self._unsteady.add(source)
                if source.match != before:
                    self._index = None

    async def _first_reads(self, meta: TableMeta, needy: list[TableSource]) -> None:
        """New filtered sources filtering on the same columns get their first read from one
        statement (queries.first_reads) instead of one each: 10,000 new filtered URIs of a table
        cost one round trip. A failure (a value a column cannot take) leaves each to read on its
        own, which says which one failed."""
        fresh: dict[tuple[str, ...], list[TableSource]] = {}
        for source in needy:
            if source.target.filter and not source.good and source.error is None and not source.down:
                fresh.setdefault(tuple(c for c, _ in source.target.filter), []).append(source)
        for batch in fresh.values():
            if len(batch) < 2:
                continue
            query, params = first_reads(meta, batch[0].target.spec, [s.target.filter for s in batch])
            self.first_reads += 1
            try:
                found = await self.db.fetch(query, params)
            except psycopg.Error as exc:
                log.info("%s: a shared first read failed, each source reads on its own: %s", self.table, exc)
                continue
            rows: defaultdict[int, list[tuple[Any, ...]]] = defaultdict(list)
            for n, match, key, row in found:
                held = rows[int(n)]
                if not held:
                    held.append((None, match))
                if key is not None:
                    held.append((key, row))
            for n, source in enumerate(batch, 1):
                source.preloaded = rows.get(n)

    def _filters(self) -> dict[tuple[str, ...], dict[tuple[str, ...], list[TableSource]]]:
        """Filtered sources by their filter's columns, then by its values as matched."""
        if self._index is None:
            index: dict[tuple[str, ...], dict[tuple[str, ...], list[TableSource]]] = {}
            for source in self.sources:
                if source.target.filter and source.match is not None:
                    columns = tuple(c for c, _ in source.match)
                    values = tuple(v for _, v in source.match)
                    index.setdefault(columns, {}).setdefault(values, []).append(source)
            self._index = index
        return self._index

    def _meta(self) -> tuple[TableMeta, TableSpec] | None:
        for source in self.sources:
            if source not in self._unsteady:
                meta = source.meta.get(self.table)
                if meta is not None:
                    return meta, source.target.spec
        return None

    async def _reread(self, keys: list[tuple[Any, ...]]) -> None:
        found_meta = self._meta()
        if found_meta is None:
            return  # no source is served by a shared read: each reads on its own
        meta, spec = found_meta
        if any(len(k) != len(meta.primary_key) for k in keys):
            for source in list(self.sources):  # the primary key changed under us: each looks again
                source.ddl(DdlChanged("primary key", None))
            return
        query, params = shared_reread(meta, spec, keys)
        self.rereads += 1
        try:
            found = await self.db.fetch(query, params)
        except psycopg.Error:
            for source in list(self.sources):  # each tries on its own, and says why if it fails
                source.ddl(DdlChanged("re-read failed", None))
            return
        unsteady = self._unsteady
        unfiltered = [s for s in self._unfiltered if s not in unsteady]
        index = self._filters()
        answers: defaultdict[TableSource, list[tuple[str, str | None]]] = defaultdict(list)
        for key_json, row, match_json in found:
            key_json, row = str(key_json), None if row is None else str(row)
            matched: set[TableSource] = set()
            if row is not None and index:
                values = dict(zip(spec.where, json.loads(match_json), strict=True))
                for columns, by_values in index.items():
                    matched.update(by_values.get(tuple(values[c] for c in columns), ()))
            for source in unfiltered:
                answers[source].append((key_json, row))
            for source in matched:
                if source not in unsteady:
                    answers[source].append((key_json, row))
            for source in self.holders.get(key_text(key_json), ()):
                if source not in unsteady and source not in matched:
                    answers[source].append((key_json, None))
        for source, rows in answers.items():
            await source.apply(rows)
            if source.error is not None:
                self._unsteady.add(source)
