"""One watcher per watched URI: discover, list, watch from the list's resourceVersion, resume.

A :class:`Watcher` is one anyio task running client-go's reflector with
kubectl: API discovery maps the URI's resource to its API path; ``kubectl get
--raw PATH`` lists it (the seed) and gives the List's resourceVersion;
``kubectl get --raw 'PATH?watch=true&resourceVersion=RV'`` streams every change
after RV through :class:`WatchState`. The watcher keeps the resourceVersion of
every event (BOOKMARKs too); when a stream ends it waits (:data:`KCP_BACKOFF`, the
library's :class:`~asyncai_watch.core.backoff.Backoff`, on the injected clock) and watches
again from there, with no re-list. An in-stream
``ERROR`` (kubectl still exits 0) is a failed attempt: the backoff grows. Only
``410 Gone`` (that resourceVersion left the API server's history) and ``504 Too
large resource version`` (the API server is behind it) re-list, appending the
synthetic events for what changed. :class:`WatcherPool` shares one watcher
between every listener of a URI and stops it after the last one leaves.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Final

import anyio
import anyio.abc
import attrs

from asyncai_servers.kcp.jsonstream import JsonStreamError
from asyncai_servers.kcp.kubectl import Kubectl, KubectlError, WatchPath
from asyncai_servers.kcp.state import WatchOutcome, WatchState
from asyncai_servers.kcp.uri import WatchTarget, parse_watch_uri
from asyncai_watch import Backoff
from asyncai_watch.clock import Clock, SystemClock
from asyncai_watch.server.eventlog import EventRing

__all__ = [
    "HEALTHY_AFTER",
    "KCP_BACKOFF",
    "RING_CHARS",
    "RING_EVENTS",
    "RING_WINDOW",
    "SeedError",
    "Watcher",
    "WatcherPool",
    "stderr_says_expired",
    "stderr_says_too_large",
]

log = logging.getLogger("asyncai_servers.kcp")

SEED_TIMEOUT: Final = 30.0
RING_EVENTS: Final = 8192
"""Events a watch URI's ring keeps for readers that send their position: 0.8 s at 10,000 events/s."""
RING_CHARS: Final = 8 << 20
"""...and at most this much JSON text, whatever the objects' size."""
RING_WINDOW: Final = 256
"""Events a read without a position returns (a full read's cost is bounded by this, not the ring)."""


KCP_BACKOFF: Final = Backoff(initial=0.8, cap=30.0, attempts=None)
"""client-go's reflector shape: 0.8 s doubling to 30 s, retried forever (``--backoff INITIAL:MAX``)."""
HEALTHY_AFTER: Final = 120.0
"""A failed stream that had lasted this long still resets the backoff (client-go: 2 min)."""


def _retries_forever(backoff: Backoff) -> Backoff:
    # A watcher has no one to give up to: its listeners wait for it as long as they listen.
    if backoff.attempts is not None:
        raise ValueError(
            f"a kcp watcher retries forever: backoff.attempts must be None, got {backoff.attempts}"
        )
    return backoff


# How kubectl prints an HTTP-level error Status: ``Error from server (REASON): MESSAGE``. 410 is reason
# Expired (the watch cache, etcd compaction) or Gone; a bare "410" elsewhere (an address, a name) is not.
_EXPIRED_STDERR: Final = re.compile(r"^Error from server \((?:Expired|Gone)\):", re.MULTILINE)
_TOO_LARGE_STDERR: Final = re.compile(
    r"^Error from server \(Timeout\):.*Too large resource version", re.MULTILINE
)


def stderr_says_expired(stderr: str) -> bool:
    """kubectl's stderr reports a 410 (the watch's resourceVersion left the API server's history)."""
    return _EXPIRED_STDERR.search(stderr) is not None


def stderr_says_too_large(stderr: str) -> bool:
    """kubectl's stderr reports a 504 ``Too large resource version`` (the API server is behind it)."""
    return _TOO_LARGE_STDERR.search(stderr) is not None


@attrs.frozen(kw_only=True)
class _WatchEnd:
    """How one watch attempt ended."""

    healthy: bool
    """Resets the backoff: a clean end (server timeout), a 410, or a failure after a long stream."""
    relist: bool = False
    """The resourceVersion cannot be resumed from (410, too large): list again."""
    permanent: bool = False
    """No retry of this API path can work (e.g. 404): discover the resource again."""


class SeedError(Exception):
    """The first list failed; the message is kubectl's error plus hints."""


class Watcher:
    def __init__(
        self,
        uri: str,
        target: WatchTarget,
        kubectl: Kubectl,
        publish: Callable[[str], Awaitable[None]],
        *,
        clock: Clock,
        backoff: Backoff = KCP_BACKOFF,
        healthy_after: float = HEALTHY_AFTER,
        start_seq: int = 0,
        capacity: int = RING_EVENTS,
        max_chars: int | None = RING_CHARS,
        window: int | None = RING_WINDOW,
    ) -> None:
        self.uri = uri
        self.target = target
        self.kubectl = kubectl
        self.publish = publish
        self.clock = clock
        self.backoff = _retries_forever(backoff)
        self.healthy_after = healthy_after
        self.failures = 0
        """Failed attempts since the last healthy one: the next wait is ``backoff.delay(failures)``."""
        self.ring = EventRing(capacity, start_seq=start_seq, max_chars=max_chars, window=window)
        self.state = WatchState()
        self.ready = anyio.Event()
        self.seed_error: KubectlError | None = None
        # Counters tests and the bench read: watch (re)connects, lists (seed and re-lists after 410).
        self.connects = 0
        self.lists = 0
        self.streams_started = 0
        self.resource_version: str | None = None
        """Where the next watch resumes: the last event's (or the last list's) resourceVersion."""
        self.caught_up = anyio.Event()  # set after each re-list's events were appended
        self.notified = False
        """An update went out and no read has started since (see :meth:`_notify`)."""
        self.notifications = 0

    async def _notify(self) -> None:
        # Notify once until someone reads: every read returns the whole ring, so a reader that
        # was notified and has not read yet will see whatever is appended before its read. A
        # burst then costs one notification (and one read) per read the client makes, not one
        # per batch kubectl printed; the read clears the flag before it takes the body.
        if self.notified:
            return
        self.notified = True
        self.notifications += 1
        await self.publish(self.uri)

    def read(self, after: tuple[str, int] | None = None) -> str:
        """The ring's read body (after a reader's position, see ``EventRing.text``); from now on
        the next append notifies again."""
        self.notified = False
        return self.ring.text(after)

    async def _append(self, events: list[dict[str, object]]) -> None:
        if not events:
            return
        for ev in events:
            self.ring.append(ev)
        await self._notify()

    async def _error(self, message: str) -> None:
        self.ring.error(message)
        log.warning("%s: %s", self.uri, message)
        await self._notify()

    async def run(self) -> None:
        """Run until cancelled, or until the seed fails permanently (then ``seed_error`` says why)."""
        seeded = False
        path: WatchPath | None = None
        while True:
            fresh = False  # this watch starts from a list just made (not resumed)
            try:
                conn = await self.kubectl.connection_args(self.target.workspace, self.target.kcp)
                if path is None:
                    path = await self.kubectl.resolve(self.target, conn)
                if self.resource_version is None:
                    listed, list_rv = await self.kubectl.list_raw(path, conn)
                    fresh = True
            except KubectlError as exc:
                path = None  # discover again: the resource may have moved (a CRD reinstalled)
                if not seeded:
                    self.seed_error = await self.kubectl.explain_failure(exc, self.target)
                    self.ready.set()
                    if exc.permanent or self.seed_error.permanent:
                        return
                else:
                    await self._error(f"re-list failed: {exc.message}")
                await self._back_off()
                continue
            if fresh:
                self.lists += 1
                if not seeded:
                    self.state.seed(listed)
                    self.seed_error = None
                    seeded = True
                    self.ready.set()
                else:
                    await self._append(self.state.relist(listed))
                self.resource_version = list_rv
                self.caught_up.set()
                self.caught_up = anyio.Event()
            self.connects += 1
            end = await self._watch_once(path, conn)
            if end.permanent:
                path = None  # e.g. 404: the resource is gone from discovery; find it again and re-list
                self.resource_version = None
            if end.relist:
                self.resource_version = None
                if end.healthy and not fresh:
                    continue  # a resumed watch fell out of history (410): re-list at once
            if end.healthy:
                self.failures = 0
            await self._back_off()

    async def _back_off(self) -> None:
        delay = self.backoff.delay(self.failures)
        assert delay is not None  # attempts=None: checked in __init__
        self.failures += 1
        await self.clock.sleep_until(self.clock.now() + delay)

    async def _watch_once(self, path: WatchPath, conn: list[str]) -> _WatchEnd:
        """Stream one watch from ``resource_version`` and say how it ended."""
        expired = False
        failed: WatchOutcome | None = None
        began = self.clock.now()
        try:
            async with self.kubectl.watch(path, conn, self.resource_version) as stream:
                self.streams_started += 1
                try:
                    async for docs in stream.batches():
                        # One notification per batch: a listen stream's SDK buffer (1024) must not fill up
                        # with one notification per event during a burst (the SDK then ends the stream).
                        batch: list[dict[str, object]] = []
                        for doc in docs:
                            outcome = self.state.on_event(doc)
                            batch += outcome.events
                            if outcome.resource_version is not None:
                                self.resource_version = outcome.resource_version
                            if outcome.expired:
                                expired = True
                                break
                            if outcome.failed:
                                # The API server closes the stream after an ERROR; nothing after it counts.
                                failed = outcome
                                break
                        await self._append(batch)
                        if expired or failed is not None:
                            break
                except JsonStreamError as exc:
                    await self._error(f"kubectl watch output could not be parsed: {exc}")
                    return _WatchEnd(healthy=False)
        except KubectlError as exc:
            await self._error(exc.message)
            return _WatchEnd(healthy=False, permanent=exc.permanent)
        if expired:
            # 410 Gone: the resourceVersion was compacted out of the API server's history; re-list.
            log.info("%s: watch expired (410 Gone); re-listing", self.uri)
            return _WatchEnd(healthy=True, relist=True)
        if failed is not None:
            # kubectl exits 0 after an in-stream ERROR, but the watch failed: as client-go's reflector,
            # the backoff grows (a persistent 500 must not respawn kubectl every 0.8 s), and a too-large
            # resourceVersion (the API server is behind it, e.g. after an etcd restore) is re-listed.
            log.warning("%s: the API server ended the watch with an error", self.uri)
            return _WatchEnd(healthy=False, relist=failed.too_large)
        if stream.returncode not in (0, None):
            stderr = stream.stderr
            if stderr_says_expired(stderr):
                log.info("%s: kubectl reported an expired resourceVersion; re-listing", self.uri)
                return _WatchEnd(healthy=True, relist=True)
            await self._error(
                f"kubectl watch exited with status {stream.returncode}: {stderr or 'no stderr'}"
            )
            if stderr_says_too_large(stderr):
                return _WatchEnd(healthy=False, relist=True)
            failed_exit = KubectlError(stderr, stderr=stderr, returncode=stream.returncode)
            # A stream that failed at once and one that lived long are told apart by time, as client-go does.
            return _WatchEnd(
                healthy=self.clock.now() - began >= self.healthy_after,
                permanent=failed_exit.permanent,
            )
        return _WatchEnd(healthy=True)


@attrs.define
class _Entry:
    watcher: Watcher
    scope: anyio.CancelScope
    listeners: int = 0
    linger: anyio.CancelScope | None = None


class WatcherPool:
    """The server's watchers, keyed by the exact URI string listeners subscribed to."""

    def __init__(
        self,
        tg: anyio.abc.TaskGroup,
        kubectl: Kubectl,
        publish: Callable[[str], Awaitable[None]],
        *,
        clock: Clock | None = None,
        backoff: Backoff = KCP_BACKOFF,
        healthy_after: float = HEALTHY_AFTER,
        idle_grace: float = 60.0,
        seed_timeout: float = SEED_TIMEOUT,
        ring_events: int = RING_EVENTS,
        ring_chars: int | None = RING_CHARS,
        ring_window: int | None = RING_WINDOW,
    ) -> None:
        self._tg = tg
        self.kubectl = kubectl
        self.publish = publish
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.backoff = _retries_forever(backoff)  # a value: every watcher counts its own failures
        self.healthy_after = healthy_after
        self.idle_grace = idle_grace
        self.seed_timeout = seed_timeout
        self.ring_events = ring_events
        self.ring_chars = ring_chars
        self.ring_window = ring_window
        self.entries: dict[str, _Entry] = {}
        self._last_seq: dict[str, int] = {}  # keeps seq monotonic across a URI's watcher restarts

    def _start(self, uri: str, target: WatchTarget) -> _Entry:
        watcher = Watcher(
            uri,
            target,
            self.kubectl,
            self.publish,
            clock=self.clock,
            backoff=self.backoff,
            healthy_after=self.healthy_after,
            start_seq=self._last_seq.get(uri, 0),
            capacity=self.ring_events,
            max_chars=self.ring_chars,
            window=self.ring_window,
        )
        entry = _Entry(watcher=watcher, scope=anyio.CancelScope())
        self.entries[uri] = entry

        async def run() -> None:
            with entry.scope:
                try:
                    await watcher.run()
                except Exception as exc:  # one broken watcher must not take the server down
                    log.exception("%s: watcher crashed", uri)
                    watcher.seed_error = KubectlError(f"watcher failed: {exc!r}")
                    watcher.ready.set()
            self._last_seq[uri] = watcher.ring.last_seq
            if self.entries.get(uri) is entry and entry.listeners == 0:
                self._stop(uri)

        self._tg.start_soon(run)
        log.info("%s: watcher started", uri)
        return entry

    def _stop(self, uri: str) -> None:
        entry = self.entries.pop(uri, None)
        if entry is None:
            return
        self._last_seq[uri] = entry.watcher.ring.last_seq
        entry.scope.cancel()
        if entry.linger is not None:
            entry.linger.cancel()
        log.info("%s: watcher stopped", uri)

    def add_listener(self, uri: str) -> None:
        """A listen stream subscribed to ``uri``: start its watcher if it is the first."""
        try:
            target = parse_watch_uri(uri)
        except ValueError:
            return  # not ours; the read reports the URI error
        entry = self.entries.get(uri)
        if entry is None:
            entry = self._start(uri, target)
        entry.listeners += 1
        if entry.linger is not None:
            entry.linger.cancel()
            entry.linger = None

    def remove_listener(self, uri: str) -> None:
        entry = self.entries.get(uri)
        if entry is None:
            return
        entry.listeners -= 1
        if entry.listeners <= 0:
            self._stop(uri)

    def _linger(self, uri: str, entry: _Entry) -> None:
        """A read started this watcher with no listener: stop it after ``idle_grace`` unless one arrives."""
        scope = anyio.CancelScope()
        entry.linger = scope

        async def wait() -> None:
            with scope:
                await self.clock.sleep_until(self.clock.now() + self.idle_grace)
                if self.entries.get(uri) is entry and entry.listeners == 0:
                    self._stop(uri)

        self._tg.start_soon(wait)

    async def read(self, uri: str, after: tuple[str, int] | None = None) -> str:
        """The ring's read body; the first read awaits the seed and fails with its error."""
        target = parse_watch_uri(uri)
        entry = self.entries.get(uri)
        if entry is None:
            entry = self._start(uri, target)
            self._linger(uri, entry)
        watcher = entry.watcher
        with anyio.move_on_after(self.seed_timeout):
            await watcher.ready.wait()
        if not watcher.ready.is_set():
            raise SeedError(
                f"kubectl get {target.resource} did not answer within {self.seed_timeout:g} s "
                f"(workspace {target.workspace}); is the kcp server reachable?"
            )
        if watcher.seed_error is not None and watcher.connects == 0:
            error = watcher.seed_error
            if entry.listeners == 0 and self.entries.get(uri) is entry:
                self._stop(uri)  # the next read tries afresh
            raise SeedError(error.message)
        return watcher.read(after)
