"""The PostgreSQL MCP server: tables and named queries as watchable resources, pushed by the database.

Who does what:

- :class:`~asyncai_servers.postgres.listener.Listener`: the one ``LISTEN`` connection; each
  notification goes to the sources of its table (:meth:`PostgresServer._route`), and a
  re-established connection makes every source re-read (:meth:`PostgresServer._resync`).
- :mod:`~asyncai_servers.postgres.sources`: one source per watched target, reading the database
  only when told to, and answering every ``resources/read`` from what it read last.
- :class:`~asyncai_watch.server.SubscriptionRegistry`: the subscriptions of both MCP eras
  (``subscriptions/listen``; ``resources/subscribe`` from 2025-era clients). It says when a URI
  string gains its first listener (:meth:`PostgresServer._acquire`) or loses its last
  (:meth:`PostgresServer._release`); a source lives while one of its URIs is listened to (and
  :data:`IDLE_GRACE` seconds after, or after a read with no listener), so nothing is read for a
  table nobody watches.

Clients never send SQL: a URI names a table or a query of the config (uri.py), and the SQL is
composed by the driver (queries.py).
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio
import anyio.abc
import attrs
import mcp_types as types
import psycopg
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from asyncai_servers.postgres.capture import expire
from asyncai_servers.postgres.config import Config, TableName
from asyncai_servers.postgres.db import Database, PgError
from asyncai_servers.postgres.listener import RECONNECT, DdlChanged, Listener, RowsChanged
from asyncai_servers.postgres.sources import READY_TIMEOUT, QuerySource, Source, TableGroup, TableSource
from asyncai_servers.postgres.uri import (
    EVENTS_SCHEME,
    STATE_SCHEME,
    QueryTarget,
    Resource,
    TableTarget,
    UriError,
    parse_uri,
    query_uri,
    table_template,
    table_uri,
)
from asyncai_watch import EVENTS_MIME_TYPE, Backoff
from asyncai_watch.clock import Clock, SystemClock
from asyncai_watch.server.errors import resource_error
from asyncai_watch.server.eventlog import read_after
from asyncai_watch.server.policy import client_key
from asyncai_watch.server.subscriptions import DEFAULT_MAX_URIS, SubscriptionRegistry
from asyncai_watch.server.tool_dispatch import tool_handlers

__all__ = [
    "IDLE_GRACE",
    "MAX_SOURCES",
    "MAX_SOURCES_PER_CLIENT",
    "RETAIN_CHECK",
    "RETAIN_MIN",
    "SERVER_NAME",
    "PostgresServer",
]

log = logging.getLogger(__name__)

SERVER_NAME: Final = "postgres"
IDLE_GRACE: Final = 60.0
"""Seconds a source outlives its last listener (a client re-listening after a drop keeps its log)."""
MAX_SOURCES: Final = 20_000
"""Distinct targets (a table, each filtered view of one, a query) watched at once, all clients
together (``--max-sources``): each holds its rows in memory."""
MAX_SOURCES_PER_CLIENT: Final = 10_000
"""Distinct targets one client's listens hold at once (``--max-sources-per-client``), so that one
client cannot take all of :data:`MAX_SOURCES`."""
RETAIN_CHECK: Final = 3600.0
"""Seconds between two applications of the change logs' age retention, at most."""
RETAIN_MIN: Final = 1.0
"""...and at least (a change aging out right now is dropped at the next round)."""
JSON: Final = "application/json"

Target = TableTarget | QueryTarget


@attrs.define(eq=False)
class _Entry:
    source: Source
    scope: anyio.CancelScope
    listeners: int = 0
    readers: int = 0
    linger: anyio.CancelScope | None = None

    @property
    def idle(self) -> bool:
        return self.listeners == 0 and self.readers == 0


class PostgresServer:
    """The MCP server object plus the sources and the listener it runs (``async with running()``)."""

    def __init__(
        self,
        config: Config,
        dsn: str,
        *,
        statement_timeout: float = 5.0,
        pool_size: int = 4,
        clock: Clock | None = None,
        reconnect: Backoff = RECONNECT,
        idle_grace: float = IDLE_GRACE,
        max_uris: int = DEFAULT_MAX_URIS,
        max_sources: int = MAX_SOURCES,
        max_sources_per_client: int = MAX_SOURCES_PER_CLIENT,
    ) -> None:
        self.config = config
        self.max_sources = max_sources
        self.max_sources_per_client = max_sources_per_client
        self._client_targets: defaultdict[str, Counter[Target]] = defaultdict(Counter)
        """Per client (as the HTTP guard names it), the targets its open listens hold."""
        self.db = Database(dsn, size=pool_size, statement_timeout=statement_timeout)
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.idle_grace = idle_grace
        self.listener = Listener(
            dsn,
            on_change=self._route,
            on_resync=self._resync,
            on_down=self._down,
            clock=self.clock,
            backoff=reconnect,
        )
        self.reconnect = reconnect
        self._unreachable: str | None = None
        """Why PostgreSQL cannot be reached, from the LISTEN connection's last failed connect."""
        self.subscriptions = SubscriptionRegistry(
            SERVER_NAME,
            refuse=self._refusal,
            on_first=self._acquire,
            on_last=self._release,
            ready=self._on_ready,
            max_uris=max_uris,
        )
        self._entries: dict[Target, _Entry] = {}
        self._by_table: defaultdict[TableName, set[Source]] = defaultdict(set)
        self._groups: dict[TableName, tuple[TableGroup, anyio.CancelScope]] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self.server: Server[Any] = Server(
            SERVER_NAME,
            version="0.1.0",
            instructions=(
                "PostgreSQL tables and named queries, watchable without polling (the database pushes "
                "each commit through LISTEN/NOTIFY). pg://SCHEMA/TABLE is a table's rows keyed by primary "
                "key; pg-events://SCHEMA/TABLE its changes as an event log; pg-query://NAME a named "
                "query's result. resources/list shows what the config allows."
            ),
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_templates,
            on_read_resource=self._read,
            **tool_handlers(SERVER_NAME, (), {}),  # resources only: clients never send SQL
            **{**self.subscriptions.handlers(), "on_subscriptions_listen": self._listen},
        )

    # -- lifecycle -------------------------------------------------------------------------------

    @asynccontextmanager
    async def running(self) -> AsyncIterator[PostgresServer]:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self.listener.run)
            tg.start_soon(self._retain)
            try:
                yield self
            finally:
                self._tg = None
                tg.cancel_scope.cancel()
        with anyio.CancelScope(shield=True):
            await self.db.aclose()

    async def _retain(self) -> None:
        """Apply each configured table's age retention (``--retain-age``) on this server's clock,
        whether or not anyone watches it: at start, then when the next kept change ages out (as
        the database says), at least every :data:`RETAIN_CHECK` seconds and at most every
        :data:`RETAIN_MIN` (the writers also trim, every 256 seqs)."""
        while True:
            wait = RETAIN_CHECK
            for spec in self.config.tables:
                query, params = expire(spec.table)
                try:
                    rows = await self.db.maintain(query, params)
                except psycopg.Error as exc:  # e.g. an install without the function: says so once a round
                    log.warning(
                        "%s: applying the change log's age retention failed (an install older than "
                        "asyncai_watch.expire needs --install-triggers again): %s",
                        spec.table,
                        str(exc).strip(),
                    )
                    continue
                if rows and rows[0][0] is not None:
                    wait = min(wait, max(float(rows[0][0]), RETAIN_MIN))
            await self.clock.sleep_until(self.clock.now() + wait)

    def close_listeners(self) -> None:
        """End every open listen stream gracefully (an HTTP shutdown would otherwise wait on them)."""
        self.subscriptions.close()

    # -- sources: one per target, alive while listened to ----------------------------------------

    def _resource(self, uri: str) -> Resource:
        try:
            return parse_uri(uri, self.config)
        except UriError as exc:
            raise resource_error(uri, str(exc)) from None

    def _refusal(self, uri: str) -> str | None:
        """Why a subscription to ``uri`` is refused (-32602 before anything is acknowledged), or None."""
        try:
            parse_uri(uri, self.config)
        except UriError as exc:
            return str(exc)
        return None

    def _start(self, target: Target) -> _Entry:
        if self._tg is None:
            raise RuntimeError("PostgresServer.running() is not active")
        source: Source
        if isinstance(target, TableTarget):
            source = TableSource(target, self.db, self._publish)
        else:
            source = QuerySource(target, self.db, self._publish)
        if self._unreachable is not None:
            source.unreachable(self._outage(source))
        entry = _Entry(source=source, scope=anyio.CancelScope())
        self._entries[target] = entry
        for table in source.tables():
            self._by_table[table].add(source)
        if isinstance(source, TableSource):
            self._group(source.target.table).add(source)  # its group reads for it
        else:

            async def run() -> None:
                with entry.scope:
                    await source.run()

            self._tg.start_soon(run)
        log.info("%s: watching", source.describe())
        return entry

    def _group(self, table: TableName) -> TableGroup:
        found = self._groups.get(table)
        if found is not None:
            return found[0]
        assert self._tg is not None
        group, scope = TableGroup(table, self.db), anyio.CancelScope()
        self._groups[table] = (group, scope)

        async def run() -> None:
            with scope:
                await group.run()

        self._tg.start_soon(run)
        return group

    def _over_cap(self, target: Target) -> str | None:
        """Why a new source for ``target`` may not start (the cap on sources), or None."""
        if target in self._entries or len(self._entries) < self.max_sources:
            return None
        for idle_target, entry in list(self._entries.items()):  # lingering ones give way first
            if entry.idle:
                self._stop(idle_target, entry)
                if len(self._entries) < self.max_sources:
                    return None
        return (
            f"this server watches {len(self._entries):,} targets (tables, filtered views, queries), the most it "
            f"allows (--max-sources {self.max_sources:,}); stop some watches, or raise --max-sources"
        )

    def _stop(self, target: Target, entry: _Entry) -> None:
        if self._entries.get(target) is not entry:
            return
        del self._entries[target]
        for table in entry.source.tables():
            self._by_table[table].discard(entry.source)
            if not self._by_table[table]:
                del self._by_table[table]
        entry.scope.cancel()
        source = entry.source
        if isinstance(source, TableSource) and source.group is not None:
            group = source.group
            group.remove(source)
            if not group.sources and self._groups.get(group.table, (None,))[0] is group:
                self._groups.pop(group.table)[1].cancel()
        if entry.linger is not None:
            entry.linger.cancel()
        log.info("%s: no longer watched", entry.source.describe())

    def _linger(self, target: Target, entry: _Entry) -> None:
        """Stop ``entry`` :attr:`idle_grace` seconds from now unless a listener or a read comes first."""
        if self._tg is None:
            return
        if entry.linger is not None:
            entry.linger.cancel()  # the grace starts again from now
        scope = entry.linger = anyio.CancelScope()

        async def wait() -> None:
            with scope:
                await self.clock.sleep_until(self.clock.now() + self.idle_grace)
                if entry.idle:
                    self._stop(target, entry)

        self._tg.start_soon(wait)

    def _acquire(self, uri: str) -> None:
        """``uri`` gained its first listener (the registry refused it already if it is not served);
        past the cap on sources nothing starts, and :meth:`_on_ready` refuses the listen."""
        target = self._resource(uri).target
        if self._over_cap(target) is not None:
            return
        entry = self._entries.get(target) or self._start(target)
        entry.listeners += 1
        entry.source.uris[uri] += 1
        if entry.linger is not None:
            entry.linger.cancel()
            entry.linger = None

    def _release(self, uri: str) -> None:
        """``uri`` lost its last listener."""
        target = self._resource(uri).target
        entry = self._entries.get(target)
        if entry is None:
            return
        entry.listeners -= 1
        entry.source.uris[uri] -= 1
        if entry.source.uris[uri] <= 0:
            del entry.source.uris[uri]
        if entry.idle:
            self._linger(target, entry)

    async def _on_ready(self, uris: Sequence[str]) -> None:
        """Before a listen's ack (or a subscribe's answer): refuse it when a URI is over the cap on
        sources or can only fail; else its listeners have had no update yet, so the next change
        must signal them even if an earlier one is still unread by another listener."""
        sources: dict[Source, str] = {}
        for uri in uris:
            target = self._resource(uri).target
            entry = self._entries.get(target)
            if entry is None:
                raise MCPError(types.INVALID_PARAMS, f"{uri}: {self._over_cap(target) or 'not watched'}")
            sources.setdefault(entry.source, uri)
        # A URI that can only fail (no rights, a value its column cannot take) is refused now, not
        # acknowledged: wait for the first reads (its group runs them, one statement each).
        refused: list[str] = []
        for source, uri in sources.items():
            if not source.ready.is_set():
                with anyio.move_on_after(READY_TIMEOUT):
                    await source.ready.wait()
            if source.error is not None and source.error.refuse:
                refused.append(f"{uri}: {source.error}")
        if refused:
            more = f" (and {len(refused) - 3} more)" if len(refused) > 3 else ""
            raise MCPError(types.INVALID_PARAMS, "; ".join(refused[:3]) + more)
        for source in sources:
            source.signalled = False

    async def _listen(
        self, ctx: ServerRequestContext[Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        """The registry's listen, within the cap on one client's sources: it holds each target its
        listens name (a table, a filtered view, a query) from before the acknowledgment to their end."""
        targets: set[Target] = set()
        for n, uri in enumerate(params.notifications.resource_subscriptions or ()):
            with contextlib.suppress(UriError):  # the registry refuses it, naming why
                targets.add(parse_uri(uri, self.config).target)
            if n % 1000 == 999:
                await anyio.lowlevel.checkpoint()
        scope = getattr(ctx.request, "scope", None)
        client = client_key(scope if isinstance(scope, dict) else None)
        held = self._client_targets[client]
        adding = sum(1 for t in targets if t not in held)
        if adding and len(held) + adding > self.max_sources_per_client:
            if not held:
                del self._client_targets[client]
            raise MCPError(
                types.INVALID_PARAMS,
                f"this client's listens would hold {len(held) + adding:,} targets (tables, filtered views, "
                f"queries), more than one client may (--max-sources-per-client {self.max_sources_per_client:,}); "
                f"it holds {len(held):,}: end some listens or name fewer filtered URIs, or raise "
                "--max-sources-per-client",
            )
        held.update(targets)
        try:
            return await self.subscriptions.listen(ctx, params)
        finally:
            held.subtract(targets)
            for target in targets:
                if held[target] <= 0:
                    del held[target]
            if not held:
                self._client_targets.pop(client, None)

    async def _publish(self, source: Source) -> None:
        for uri in list(source.uris):
            await self.subscriptions.publish(uri)

    async def _more(self, source: Source) -> None:
        """A durable log's reader got a full page and more follows: signal its event-log URIs."""
        for uri in list(source.uris):
            if uri.startswith(f"{EVENTS_SCHEME}:"):
                await self.subscriptions.publish(uri)

    # -- what the database says ------------------------------------------------------------------

    def _route(self, change: RowsChanged | DdlChanged) -> None:
        if isinstance(change, RowsChanged):
            for source in self._by_table.get(change.table, ()):
                if isinstance(source, QuerySource):
                    source.changed(change)
            group = self._groups.get(change.table)
            if group is not None:
                group[0].changed(change)  # one re-read for all of the table's sources
        else:
            log.info("DDL (%s): the sources it may concern look at the catalog again", change.tag)
            for entry in list(self._entries.values()):
                entry.source.ddl(change)

    def _resync(self) -> None:
        self._unreachable = None
        for entry in list(self._entries.values()):
            entry.source.resync()

    def _down(self, reason: str) -> None:
        self._unreachable = reason
        for entry in list(self._entries.values()):
            entry.source.unreachable(self._outage(entry.source))

    def _outage(self, source: Source) -> PgError:
        assert self._unreachable is not None
        return PgError(
            f"{source.describe()}: cannot reach PostgreSQL, so changes cannot be heard: {self._unreachable} "
            f"(not watching until it is back; the server tries again every {self.reconnect.cap:g} s at most "
            "and then reports the net change)",
            internal=True,
        )

    # -- handlers ----------------------------------------------------------------------------------

    async def _read(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = params.uri
        resource = self._resource(uri)
        full = self._over_cap(resource.target)
        if full is not None:
            raise resource_error(uri, f"{uri}: {full}")
        entry = self._entries.get(resource.target) or self._start(resource.target)
        source = entry.source
        entry.readers += 1  # a read keeps its source (one nobody listens to lingers after it)
        try:
            await source.wait_ready()
            if isinstance(source, TableSource) and resource.events:
                page = await source.read_log(read_after(params.meta))
                text = page.text
                if page.more and self._tg is not None:
                    # The reader is catching up: tell it at once that there is more to read.
                    self._tg.start_soon(self._more, source)
            elif isinstance(source, TableSource):
                text = source.read()
            else:
                assert isinstance(source, QuerySource)
                text = source.read()
        except PgError as exc:
            raise (
                MCPError(types.INTERNAL_ERROR, str(exc)) if exc.internal else resource_error(uri, str(exc))
            ) from None
        finally:
            entry.readers -= 1
            if entry.idle:
                self._linger(resource.target, entry)
        mime = EVENTS_MIME_TYPE if resource.events else JSON
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type=mime, text=text)]
        )

    async def _list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        out: list[types.Resource] = []
        for spec in self.config.tables:
            state, events = table_uri(STATE_SCHEME, spec.table), table_uri(EVENTS_SCHEME, spec.table)
            name = str(spec.table)
            out.append(
                types.Resource(
                    uri=state,
                    name=name,
                    description=(
                        f"The rows of {name} as a JSON object keyed by primary key (at most {spec.max_rows} "
                        "rows); watchers get ADDED / MODIFIED (with the changed columns) / DELETED per row.\n"
                        f'Example: await watch_start(name="{spec.table.name}", uri="{state}")'
                    ),
                    mime_type=JSON,
                )
            )
            out.append(
                types.Resource(
                    uri=events,
                    name=f"{name} changes",
                    description=(
                        f"Row changes of {name} as an event log: ADDED (insert), MODIFIED (update, with "
                        "`old`), DELETED (delete); object = the row.\n"
                        f'Example: await watch_start(name="{spec.table.name}-changes", uri="{events}")'
                    ),
                    mime_type=EVENTS_MIME_TYPE,
                )
            )
        for query in self.config.queries:
            uri = query_uri(query.name)
            shape = f"an object keyed by {', '.join(query.key)}" if query.key else "a JSON array of rows"
            out.append(
                types.Resource(
                    uri=uri,
                    name=f"query {query.name}",
                    description=(
                        f"The result of the named query {query.name!r} as {shape}; re-run when "
                        f"{', '.join(map(str, query.depends_on))} change(s).\n"
                        f'Example: await watch_start(name="{query.name}", uri="{uri}")'
                    ),
                    mime_type=JSON,
                )
            )
        return types.ListResourcesResult(resources=out)

    async def _list_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        out: list[types.ResourceTemplate] = []
        for spec in self.config.tables:
            if not spec.where:
                continue
            column = spec.where[0]
            for scheme, mime, what in (
                (STATE_SCHEME, JSON, "rows, keyed by primary key"),
                (
                    EVENTS_SCHEME,
                    EVENTS_MIME_TYPE,
                    "row changes as an event log (a row updated into the filter is ADDED, out of it DELETED)",
                ),
            ):
                example = table_uri(scheme, spec.table, ((column, "VALUE"),))
                out.append(
                    types.ResourceTemplate(
                        uri_template=table_template(scheme, spec),
                        name=f"{spec.table} {scheme} filtered",
                        description=(
                            f"The {what} of {spec.table} whose columns equal the given values "
                            f"(filter columns: {', '.join(spec.where)}).\n"
                            f'Example: await watch_start(name="{spec.table.name}", uri="{example}")'
                        ),
                        mime_type=mime,
                    )
                )
        return types.ListResourceTemplatesResult(resource_templates=out)
