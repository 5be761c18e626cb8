"""The webhooks MCP server: verified deliveries as event logs and object states, pushed as they arrive.

Who does what:

- :class:`~.receiver.Receiver`: ``POST /hooks/SOURCE``, verified (:mod:`.verify`) and stored
  (:meth:`WebhooksServer.deliver`) before the 2xx.
- :class:`~.store.Store` (the SQLite file) or :class:`~.store_pg.PgStore` (PostgreSQL, shared by
  several replicas): one call at a time on a worker thread, so the event loop never waits on the
  disk. With PostgreSQL, :func:`~.store_pg.listen` hears the other replicas' commits and wakes
  this replica's listeners of the logs they appended to.
- A timer on the injected clock applies the retention every :data:`TRIM_INTERVAL` (at most),
  so an idle server trims too (the store trims at start and every 256 deliveries as well).
- :class:`~asyncai_watch.server.SubscriptionRegistry`: subscriptions of both MCP eras. It says when
  a URI gains its first listener or loses its last; the server keeps which spellings are listened
  to per log (``?a=1&b=2`` and ``?b=2&a=1`` are one log) and, after each stored delivery,
  notifies the spellings of every log it was appended to and of the object it updated. A
  filtered log is made (and filled from its source's log) before a listen on it is acknowledged,
  so nothing that arrives after the acknowledgment can be missed.

Nothing polls: a delivery (here or, with PostgreSQL, at another replica) is the only thing that
makes a notification.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.abc
import anyio.to_thread
import attrs
import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext

from asyncai_servers.webhooks.config import Config
from asyncai_servers.webhooks.fields import FILTER_FIELDS, Described, describe
from asyncai_servers.webhooks.receiver import DEFAULT_MAX_BODY, PATH_PREFIX, Receiver
from asyncai_servers.webhooks.store import MAX_VIEWS, DeliveryStore, Retention, Store
from asyncai_servers.webhooks.uri import (
    EVENTS_SCHEME,
    SOURCES_URI,
    STATE_SCHEME,
    LogTarget,
    StateTarget,
    UriError,
    parse_uri,
)
from asyncai_servers.webhooks.verify import Delivery
from asyncai_watch import EVENTS_MIME_TYPE
from asyncai_watch.clock import Clock, WallClock
from asyncai_watch.server.errors import resource_error
from asyncai_watch.server.eventlog import dumps, read_after
from asyncai_watch.server.subscriptions import DEFAULT_MAX_URIS, SubscriptionRegistry

if TYPE_CHECKING:
    from asyncai_servers.webhooks.store_pg import Changed, PgStore

__all__ = ["SERVER_NAME", "TRIM_INTERVAL", "WebhooksServer"]

log = logging.getLogger(__name__)

SERVER_NAME: Final = "webhooks"
JSON: Final = "application/json"
_FILTERS: Final = ",".join(FILTER_FIELDS)

Target = LogTarget | StateTarget
TRIM_INTERVAL: Final = 60.0
"""Seconds between retention passes of the timer (or ``--retain-age``, when shorter)."""


@attrs.define(eq=False)
class _Job:
    delivery: Delivery
    described: Described
    done: anyio.Event = attrs.Factory(anyio.Event)
    stored: bool = False
    error: Exception | None = None


class WebhooksServer:
    """The MCP server object, the receiver and the store (``server``, ``receiver``, ``store``)."""

    def __init__(
        self,
        config: Config,
        db: Path | str | None = None,
        *,
        dsn: str | None = None,
        retention: Retention = Retention(),  # noqa: B008  (frozen)
        max_body: int = DEFAULT_MAX_BODY,
        max_views: int = MAX_VIEWS,
        max_uris: int = DEFAULT_MAX_URIS,
        sync: str = "full",
        clock: Clock | None = None,
    ) -> None:
        """``db``: the SQLite file; or ``dsn``: a PostgreSQL database (several replicas may share it)."""
        if (db is None) == (dsn is None):
            raise ValueError("WebhooksServer takes exactly one of db (a SQLite file) and dsn (PostgreSQL)")
        self.config = config
        self.clock: Clock = clock if clock is not None else WallClock()
        now = self.clock.now
        kinds = {name: spec.kind for name, spec in config.sources.items()}
        self.store: DeliveryStore
        self._pg: PgStore | None = None
        if dsn is not None:
            from asyncai_servers.webhooks.store_pg import PgStore

            self.store = self._pg = PgStore(
                dsn, retention=retention, max_views=max_views, kinds=kinds, now=now
            )
        else:
            assert db is not None
            self.store = Store(db, retention=retention, max_views=max_views, kinds=kinds, sync=sync, now=now)
        self._disk = anyio.CapacityLimiter(1)  # one connection: one statement at a time
        self.receiver = Receiver(config.sources, self.deliver, max_body=max_body, now=now)
        self.endpoint: str | None = None
        """The receiver's base URL once it listens (``http://HOST:PORT/hooks/``)."""
        self.subscriptions = SubscriptionRegistry(
            SERVER_NAME,
            refuse=self._refusal,
            on_first=self._first,
            on_last=self._last,
            ready=self._ready,
            max_uris=max_uris,
        )
        self._queue: list[_Job] = []
        self._wake = anyio.Event()
        self._writer: anyio.abc.TaskGroup | None = None
        self._spellings: defaultdict[Target | None, Counter[str]] = defaultdict(Counter)
        self.server: Server[Any] = Server(
            SERVER_NAME,
            version="0.1.0",
            instructions=(
                "Webhook deliveries (GitHub, Stripe, Standard Webhooks, signed HMAC), each verified and stored "
                "once, as watchable resources pushed the moment they arrive (never polled). "
                f"{EVENTS_SCHEME}://SOURCE/EVENT is an event log (filter with ?{'&'.join(f'{f}=' for f in FILTER_FIELDS[:3])}...), "
                f"{STATE_SCHEME}://SOURCE/EVENT/ID an object's latest state (a workflow run by id); "
                f"{SOURCES_URI} lists the sources and what they received. Example: "
                'await watch_start(name="ci", uri="webhook-events://github/workflow_run?branch=main&conclusion=failure")'
            ),
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_templates,
            on_read_resource=self._read,
            **self.subscriptions.handlers(),
        )

    def close(self) -> None:
        self.subscriptions.close()
        self.store.close()

    def close_listeners(self) -> None:
        """End every open listen stream gracefully (an HTTP shutdown would otherwise wait on them)."""
        self.subscriptions.close()

    async def _disk_call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await anyio.to_thread.run_sync(fn, *args, limiter=self._disk)

    # -- deliveries --------------------------------------------------------------------------------

    async def deliver(self, delivery: Delivery) -> bool:
        """Store a verified delivery (committed on return) and notify its listeners; False for a retry.

        Deliveries that arrive while a commit is on disk wait for the next one and go in together
        (a group commit: one fsync for all of them), so the rate is not one fsync per delivery."""
        if self._writer is None:
            raise RuntimeError("WebhooksServer.deliver needs `async with server.running()`")
        described = describe(self.config.sources[delivery.source].kind, delivery.event, delivery.payload)
        job = _Job(delivery, described)
        self._queue.append(job)
        self._wake.set()
        await job.done.wait()
        if job.error is not None:
            raise job.error
        return job.stored

    @asynccontextmanager
    async def running(self) -> AsyncIterator[WebhooksServer]:
        """Run the writer (the one task that commits deliveries) and the retention timer while
        entered; with PostgreSQL, also the LISTEN for the other replicas' deliveries (in place
        before this yields, so every delivery committed after it is heard)."""
        async with anyio.create_task_group() as tg:
            self._writer = tg
            tg.start_soon(self._write)
            tg.start_soon(self._trim_timer)
            if self._pg is not None:
                from asyncai_servers.webhooks.store_pg import listen

                await tg.start(
                    partial(
                        listen,
                        self._pg.dsn,
                        self._pg.replica_id,
                        on_change=self._changed_elsewhere,
                        on_connect=self._publish_all,
                        clock=self.clock,
                    )
                )
            try:
                yield self
            finally:
                self._writer = None
                tg.cancel_scope.cancel()

    async def _write(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            batch, self._queue = self._queue, []
            try:
                results = await self._disk_call(
                    self.store.insert_many, [(j.delivery, j.described) for j in batch]
                )
            except Exception as exc:  # each sender gets a 503 and retries; nothing of the batch is stored
                for job in batch:
                    job.error = exc
                    job.done.set()
                continue
            for job, inserted in zip(batch, results, strict=True):
                if inserted is not None:
                    job.stored = True
                    # After the commit: a reader woken by this finds the delivery.
                    self._publish((*inserted.logs, inserted.state, None))
                job.done.set()

    async def _trim_timer(self) -> None:
        """Apply the retention every :data:`TRIM_INTERVAL` (or ``max_age``, when shorter), so
        deliveries age out of an idle server's logs too."""
        every = min(TRIM_INTERVAL, self.store.retention.max_age)
        while True:
            await self.clock.sleep_until(self.clock.now() + every)
            try:
                await self._disk_call(self.store.trim)
            except Exception:  # the database is away: the next pass (or the next delivery) trims
                log.exception("applying the retention failed")

    def _publish(self, targets: Iterable[Target | None]) -> None:
        for target in targets:
            for uri in self._spellings.get(target, ()):
                self.subscriptions.publish_nowait(uri)

    def _changed_elsewhere(self, change: Changed) -> None:
        """Another replica committed deliveries: wake the listeners of what they were appended to."""
        sources = set(change.sources)
        self._publish(
            [
                *change.logs,
                *change.states,
                *(t for t in list(self._spellings) if t is not None and t.source in sources),
                None,
            ]
        )

    def _publish_all(self) -> None:
        """LISTEN is (again) in place: anything missed while not listening is found by a read."""
        self._publish(list(self._spellings))

    # -- subscriptions -----------------------------------------------------------------------------

    def _parse(self, uri: str) -> Target | None:
        try:
            return parse_uri(uri, self.config.sources)
        except UriError as exc:
            raise resource_error(uri, str(exc)) from None

    def _refusal(self, uri: str) -> str | None:
        try:
            parse_uri(uri, self.config.sources)
        except UriError as exc:
            return str(exc)
        return None

    def _first(self, uri: str) -> None:
        self._spellings[parse_uri(uri, self.config.sources)][uri] += 1

    def _last(self, uri: str) -> None:
        target = parse_uri(uri, self.config.sources)
        spellings = self._spellings[target]
        spellings[uri] -= 1
        if spellings[uri] <= 0:
            del spellings[uri]
        if not spellings:
            del self._spellings[target]

    async def _ready(self, uris: Sequence[str]) -> None:
        """Before a listen's acknowledgment: make the filtered logs it names, so every delivery
        stored after the acknowledgment is in them."""
        for uri in uris:
            target = parse_uri(uri, self.config.sources)
            if isinstance(target, LogTarget) and target.filter:
                await self._disk_call(self.store.ensure_view, target)

    # -- reads -----------------------------------------------------------------------------------

    async def _read(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = params.uri
        target = self._parse(uri)
        if isinstance(target, LogTarget):
            page = await self._disk_call(self.store.read_log, target, read_after(params.meta))
            if page.more:  # the reader is catching up: tell it at once that there is more to read
                self.subscriptions.publish_nowait(uri)
            text, mime = page.text, EVENTS_MIME_TYPE
        elif isinstance(target, StateTarget):
            text, mime = await self._disk_call(self.store.read_state, target), JSON
        else:
            text, mime = await self._disk_call(self._sources_body), JSON
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type=mime, text=text)]
        )

    def _sources_body(self) -> str:
        counts = self.store.counts()
        sources = {}
        for name, spec in sorted(self.config.sources.items()):
            got = counts.get(name, {"deliveries": 0, "newest": None, "events": {}})
            sources[name] = {
                "kind": spec.kind,
                "endpoint": None if self.endpoint is None else self.endpoint + name,
                "path": PATH_PREFIX + name,
                "events_uri": f"{EVENTS_SCHEME}://{name}",
                **got,
            }
        return dumps(
            {
                "sources": sources,
                "retention": self.store.retention.text(),
                "accepted": self.receiver.accepted,
                "duplicates": self.receiver.duplicates,
                "refused": self.receiver.refused,
            }
        )

    async def _list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        out = [
            types.Resource(
                uri=SOURCES_URI,
                name="sources",
                description="The configured webhook sources: kind, endpoint, deliveries kept, event names seen.",
                mime_type=JSON,
            )
        ]
        for name, spec in sorted(self.config.sources.items()):
            out.append(
                types.Resource(
                    uri=f"{EVENTS_SCHEME}://{name}",
                    name=f"{name} events",
                    description=f"Every verified {spec.kind} delivery to {PATH_PREFIX}{name}, as an event log.\n"
                    f'Example: await watch_start(name="{name}", uri="{EVENTS_SCHEME}://{name}")',
                    mime_type=EVENTS_MIME_TYPE,
                )
            )
        return types.ListResourcesResult(resources=out)

    async def _list_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    uri_template=f"{EVENTS_SCHEME}://{{source}}/{{event}}{{?{_FILTERS}}}",
                    name="events",
                    description=(
                        "One source's deliveries of one event name (GitHub's X-GitHub-Event, a Stripe or Standard "
                        "Webhooks type), as an event log; each filter is an equality on a field of the delivery "
                        "(branch, conclusion, repository, action, ...; docs/servers/webhooks.md).\n"
                        'Example: await watch_start(name="ci", uri="webhook-events://github/workflow_run'
                        '?branch=main&conclusion=failure")'
                    ),
                    mime_type=EVENTS_MIME_TYPE,
                ),
                types.ResourceTemplate(
                    uri_template=f"{STATE_SCHEME}://{{source}}/{{event}}/{{id}}",
                    name="object",
                    description=(
                        "The latest delivery about one object: a GitHub workflow run, job or check by id, a pull "
                        "request by OWNER/REPO#NUMBER, a Stripe object by id.\n"
                        'Example: await watch_start(name="run", uri="webhook-state://github/workflow_run/30433642")'
                    ),
                    mime_type=JSON,
                ),
            ]
        )
