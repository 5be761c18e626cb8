"""Which server serves a URI: each server's listing, cached.

A :class:`Catalogs` keeps one :class:`~asyncai_watch.core.routing.ServerListing` per source.
Sources are listed concurrently, and only when their entry is missing: at the first use, after
the server said ``notifications/resources/list_changed``, or when a URI routes nowhere (a
miss refreshes every source once, then routes again). A warm ``watch_start`` or
``read_resource`` therefore makes no list requests at all.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import anyio
import attrs

from asyncai_watch.clock import Clock, SystemClock
from asyncai_watch.core.backoff import Backoff
from asyncai_watch.core.echo import quoted
from asyncai_watch.core.resources import ListedResource
from asyncai_watch.core.routing import Route, ServerListing, route
from asyncai_watch.errors import NotWatchableError, RoutingError, WatchError
from asyncai_watch.mcp.source import ResourceSource, TriableSource

__all__ = ["Catalogs", "Listing"]

_LIST_CHANGED_BACKOFF = Backoff(initial=1.0, cap=16.0, attempts=5)


@attrs.frozen
class Listing:
    """One source's catalog, or why it could not be listed."""

    source: ResourceSource
    catalog: ServerListing | None
    error: BaseException | None = None


class Catalogs:
    """Cached catalogs for ``sources``; :meth:`route` picks the server for a URI."""

    def __init__(
        self,
        sources: Sequence[ResourceSource],
        *,
        describe: Callable[[BaseException], str],
        on_list_failed: Callable[[ResourceSource, BaseException], None] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._sources = tuple(sources)
        names = [s.name for s in self._sources]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise WatchError(
                f"server names must be unique, got {', '.join(dupes)} twice; pass name=... when connecting"
            )
        self._by_name = {s.name: s for s in self._sources}
        self._describe = describe
        self._on_list_failed = on_list_failed
        self._cache: dict[str, ServerListing] = {}
        self._locks = {s.name: anyio.Lock() for s in self._sources}
        self._generation = dict.fromkeys(self._by_name, 0)
        self.list_requests = 0
        """How many sources were listed (a pair of list requests each); for tests and benches."""

    def source(self, name: str) -> ResourceSource:
        return self._by_name[name]

    def invalidate(self, source: ResourceSource) -> None:
        """Forget ``source``'s listing: the next use lists it again."""
        self._cache.pop(source.name, None)
        self._generation[source.name] += 1

    async def listings(self, *, refresh: bool = False) -> list[Listing]:
        """Every source's catalog, in source order (listing the missing ones concurrently)."""
        wanted = [s for s in self._sources if refresh or s.name not in self._cache]
        errors = await self._refresh(wanted, force=refresh)
        return [
            Listing(s, self._cache.get(s.name), errors.get(s.name))
            for s in self._sources
            if s.name in self._cache or s.name in errors
        ]

    async def route(self, uri: str, *, what: str) -> tuple[ResourceSource, Route]:
        """The source that serves ``uri`` and how; raises :class:`RoutingError` naming the options."""
        listings = await self.listings()
        try:
            found = self._route(uri, listings)
        except RoutingError:
            # A miss: a server may have added the URI since it was listed. Refresh once.
            listings = await self.listings(refresh=True)
            found = self._route(uri, listings, what=what)
        return self._by_name[found.server], found

    def _route(self, uri: str, listings: Sequence[Listing], *, what: str = "") -> Route:
        catalogs = [entry.catalog for entry in listings if entry.catalog is not None]
        unreachable = [
            f"{entry.source.name} ({self._describe(entry.error)})"
            for entry in listings
            if entry.error is not None
        ]
        if not catalogs:
            raise RoutingError(
                f"{what}: no connected server can serve {quoted(uri)}"
                + (
                    f"; unreachable: {', '.join(unreachable)}"
                    if unreachable
                    else "; no servers are connected"
                )
            )
        try:
            return route(uri, catalogs)
        except RoutingError as exc:
            if unreachable:
                raise RoutingError(f"{exc} (unreachable servers: {', '.join(unreachable)})") from exc
            raise

    async def _refresh(self, sources: Sequence[ResourceSource], *, force: bool) -> dict[str, BaseException]:
        errors: dict[str, BaseException] = {}
        if not sources:
            return errors
        seen = {s.name: self._generation[s.name] for s in sources}
        async with anyio.create_task_group() as tg:
            for s in sources:
                tg.start_soon(self._list_one, s, seen[s.name], force, errors)
        return errors

    async def _list_one(
        self, source: ResourceSource, seen: int, force: bool, errors: dict[str, BaseException]
    ) -> None:
        async with self._locks[source.name]:
            # Another task listed it while this one waited: its answer is as fresh as ours would be.
            if source.name in self._cache and (not force or self._generation[source.name] != seen):
                return
            self.list_requests += 1
            try:
                resources = await source.list_resources()
                templates = await source.list_templates()
                await _try_subscription(source, resources)
            except Exception as exc:
                errors[source.name] = exc
                if self._on_list_failed is not None:
                    self._on_list_failed(source, exc)
                return
            self._cache[source.name] = ServerListing(
                name=source.name,
                resources=resources,
                templates=templates,
                subscribable=source.watchable,
                by_trial=isinstance(source, TriableSource) and source.watchability == "accepted",
                protocol=source.protocol_version,
            )
            self._generation[source.name] += 1

    async def follow_list_changes(self, source: ResourceSource) -> None:
        """Invalidate ``source``'s listing on each ``notifications/resources/list_changed``.

        Runs until cancelled. A server that cannot tell ends this at once (routing then refreshes
        on a miss only); a lost subscription invalidates and resubscribes with a watch's backoff
        (1, 2, 4, 8, 16 s), and when those five retries fail in a row gives up the same way.
        """
        retries = 0  # since the last change heard
        while True:
            try:
                async with source.listen_list_changed() as changes:
                    async for _ in changes:
                        retries = 0  # it works: a later loss starts the backoff afresh
                        self.invalidate(source)
            except NotWatchableError:
                return
            except Exception:
                pass
            # Ended or lost.
            self.invalidate(source)  # a change may have come while nobody listened
            delay = _LIST_CHANGED_BACKOFF.delay(retries)
            if delay is None:
                return
            retries += 1
            await self._clock.sleep_until(self._clock.now() + delay)


async def _try_subscription(source: ResourceSource, resources: Sequence[ListedResource]) -> None:
    """The capability fallback, as a listing sees it: a server that lists resources but does not
    advertise ``resources.subscribe`` is tried once, on its first resource; a refusal only leaves
    it not watchable (its listing and reads still work)."""
    if source.watchable or not resources or not isinstance(source, TriableSource):
        return
    if source.watchability != "untried":
        return
    with contextlib.suppress(NotWatchableError):
        await source.try_subscription(resources[0].uri)
