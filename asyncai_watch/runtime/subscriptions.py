"""Where a watch subscribes: one ``subscriptions/listen`` and one read per (server, URI).

A :class:`Feed` holds the subscription of one URI on one source for every watch on it. Per
update signal it reads the resource once, parses the body once, and hands the same
:class:`~asyncai_watch.core.watch.Body` to each subscriber; each watch keeps its own
baseline or sequencer, filter, dedupe and debounce. When the subscription ends, the feed's
:class:`~asyncai_watch.core.watch.Resubscribe` policy says when to try again (1, 2, 4, 8,
16 s) or to give up, and every subscriber hears about it. The feed ends when its last
subscriber leaves.

A watch that joins a running feed gets a fresh read as its baseline (the same read is an
ordinary update for the others), so baselines and later reads are always in read order.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Final, Protocol

import anyio
import anyio.abc
import attrs

from asyncai_watch.clock import Clock, move_on_at
from asyncai_watch.core.echo import clip, redact
from asyncai_watch.core.eventlog import Position, position
from asyncai_watch.core.events import shape_for_mime_type
from asyncai_watch.core.limits import Limits
from asyncai_watch.core.watch import Body, GiveUp, Resubscribe, Retry
from asyncai_watch.errors import SubscriptionLostError, WatchError
from asyncai_watch.mcp.source import ResourceSource

__all__ = ["LARGE_BODY", "Down", "Feed", "GaveUp", "Inbox", "Subscriber", "Up", "describe"]

LARGE_BODY: Final = 256 * 1024
"""State bodies longer than this (characters) are parsed and diffed in a worker process."""

LARGE_EVENT_LOG: Final = 8 * 1024 * 1024
"""Event-log bodies up to this size are parsed here: the feed needs their position for its next
read (a positioned read of a fast log is a few thousand events); longer ones go to the worker."""


_DESCRIBE_CAP: Final = 2000  # an error's text in a notice or log: several quotes of input, capped


def describe(exc: BaseException) -> str:
    """``Type: message`` (or just the type), the way errors are named in notices and logs;
    URLs in the message lose their secrets (:func:`~asyncai_watch.core.echo.redact`)."""
    text = clip(redact(str(exc)), _DESCRIBE_CAP)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Subscriber(Protocol):
    """What a feed tells each watch on it. Every call is synchronous and must not block."""

    def body(self, body: Body) -> None:
        """A read after an update signal (or after a resubscribe)."""

    def read_failed(self, error: str) -> None:
        """A read after an update signal failed."""

    def up(self, attempt: int) -> None:
        """The subscription is up again (``attempt`` counts resubscribes since the last healthy one)."""

    def down(self, retry: Retry, reason: str) -> None:
        """The subscription ended; the feed resubscribes after ``retry.delay`` seconds."""

    def gave_up(self, attempts: int, reason: str) -> None:
        """The subscription ended for good; the feed is over."""


@attrs.frozen
class Up:
    """The subscription is up again (``attempt`` counts resubscribes since the last healthy one)."""

    attempt: int


@attrs.frozen
class Down:
    """The subscription ended; it is tried again after ``retry.delay`` seconds."""

    retry: Retry
    reason: str


@attrs.frozen
class GaveUp:
    """The subscription ended for good after ``attempts`` failed resubscribes."""

    attempts: int
    reason: str


@attrs.define(eq=False)
class Inbox:
    """A watch's side of a feed: what the feed said, until the watch's loop takes it.

    A newer body replaces one not yet taken (:meth:`~asyncai_watch.core.watch.Body.then`): a
    state diff against the newest read is the net change, and an event log's newest read holds
    the newer events (or reports the GAP); positioned event-log reads are joined instead.
    :meth:`wake` lets the loop's own jobs wake it too, so the loop waits in one place.
    """

    _body: Body | None = None
    _read_error: str | None = None
    _status: list[Up | Down | GaveUp] = attrs.field(factory=list)
    _wake: anyio.Event = attrs.field(factory=anyio.Event)

    def body(self, body: Body) -> None:
        self._body = body if self._body is None else self._body.then(body)
        self.wake()

    def read_failed(self, error: str) -> None:
        self._read_error = error
        self.wake()

    def up(self, attempt: int) -> None:
        self._status.append(Up(attempt))
        self.wake()

    def down(self, retry: Retry, reason: str) -> None:
        self._status.append(Down(retry, reason))
        self.wake()

    def gave_up(self, attempts: int, reason: str) -> None:
        self._status.append(GaveUp(attempts, reason))
        self.wake()

    def wake(self) -> None:
        self._wake.set()

    async def wait(self) -> None:
        """Return once something was put in (or :meth:`wake` was called) since the last wait."""
        await self._wake.wait()
        self._wake = anyio.Event()

    def take_status(self) -> list[Up | Down | GaveUp]:
        items, self._status = self._status, []
        return items

    def take_update(self) -> Body | str | None:
        """The next read to process: a failed read's error first, then the newest body."""
        if self._read_error is not None:
            error, self._read_error = self._read_error, None
            return error
        body, self._body = self._body, None
        return body


@attrs.define(eq=False)
class _Join:
    subscriber: Subscriber
    done: anyio.Event = attrs.field(factory=anyio.Event)
    body: Body | None = None
    error: BaseException | None = None


@attrs.define(eq=False)
class _Session:
    """One subscription's life: why it ended, once it has."""

    ended: bool = False
    reason: str = ""


class Feed:
    """The shared subscription of ``uri`` on ``source`` (see the module docstring)."""

    def __init__(
        self,
        source: ResourceSource,
        uri: str,
        *,
        limits: Limits,
        clock: Clock,
        on_end: Callable[[Feed], None],
    ) -> None:
        self.source = source
        self.uri = uri
        self.subscribers: set[Subscriber] = set()
        self.reads = 0
        """Reads made by this feed (one per update signal, plus one per joining watch)."""
        self._clock = clock
        self._policy = Resubscribe.for_limits(limits)
        self._on_end = on_end
        self._joiners: list[_Join] = []
        self._wanted = anyio.Event()  # a read is wanted: an update signal, a joiner, an end
        self._scope = anyio.CancelScope()
        self._started = False
        self._position: Position | None = None  # the event log's, after the last read (None: a state)
        self.ended = anyio.Event()
        """Set once the feed is over and its subscription closed."""

    # -- what the manager calls -----------------------------------------------------------------

    async def run(self, first: Subscriber, *, task_status: anyio.abc.TaskStatus[Body]) -> None:
        """Subscribe and read; hand the first body to ``start()``, then serve until the last
        subscriber leaves or the policy gives up. A first attempt that fails raises (in the
        caller of ``start()``)."""
        try:
            with self._scope:
                self.subscribers.add(first)
                await self._serve(task_status)
        finally:
            error = WatchError(f"watch_start: the subscription to {self.uri} ended before its first read")
            for join in self._joiners:
                join.error = error
                join.done.set()
            self._joiners.clear()
            self._on_end(self)
            self.ended.set()

    async def join(self, subscriber: Subscriber) -> Body:
        """Attach ``subscriber``; returns its baseline, a read made for it (raises if that failed)."""
        join = _Join(subscriber)
        self._joiners.append(join)
        self._want()
        try:
            await join.done.wait()
        except BaseException:
            if join in self._joiners:
                self._joiners.remove(join)
            self.leave(subscriber)
            raise
        if join.error is not None:
            self.leave(subscriber)  # a feed nobody is left on ends
            raise join.error
        assert join.body is not None
        return join.body

    def leave(self, subscriber: Subscriber) -> None:
        """Detach ``subscriber``; the last one to leave ends the subscription (:attr:`ended`
        is set once it is closed)."""
        self.subscribers.discard(subscriber)
        if not self.subscribers and not self._joiners:
            self._scope.cancel()

    # -- the subscription's life ----------------------------------------------------------------

    async def _serve(self, task_status: anyio.abc.TaskStatus[Body]) -> None:
        while True:
            session = _Session()
            try:
                async with self.source.listen(self.uri) as updates:
                    body = await self._first_read()
                    attempt = self._policy.subscribed(self._clock.now())
                    self._deliver_first(body, attempt, task_status)
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(self._pump, updates, session)
                        await self._follow(session)
                        tg.cancel_scope.cancel()
            except WatchError as exc:
                if not self._started:
                    raise
                session.reason = (
                    str(exc)
                    if isinstance(exc, SubscriptionLostError)
                    else f"resubscribe failed: {describe(exc)}"
                )
            except Exception as exc:
                if not self._started:
                    raise WatchError(
                        f"watch_start: subscribing to {clip(self.uri)} on server {self.source.name!r} failed: "
                        f"{describe(exc)}"
                    ) from exc
                session.reason = f"resubscribe failed: {describe(exc)}"
            self._fail_joiners(WatchError(f"watch_start: subscribing to {self.uri} failed: {session.reason}"))
            decision = self._policy.ended(self._clock.now())
            if isinstance(decision, GiveUp):
                for sub in list(self.subscribers):
                    sub.gave_up(decision.attempts, session.reason)
                return
            for sub in list(self.subscribers):
                sub.down(decision, session.reason)
            # Wait out the backoff; a watch that starts meanwhile tries again at once.
            async with move_on_at(self._clock, self._clock.now() + decision.delay):
                while not self._joiners:
                    await self._wait_wanted()

    async def _first_read(self) -> Body:
        try:
            return await self._read()
        except Exception as exc:
            if self._started:
                raise
            error = WatchError(
                f"watch_start: reading {clip(self.uri)} from server {self.source.name!r} failed: {describe(exc)}"
            )
            raise error from exc

    def _deliver_first(self, body: Body, attempt: int, task_status: anyio.abc.TaskStatus[Body]) -> None:
        if not self._started:
            self._started = True
            task_status.started(body)
        else:
            for sub in list(self.subscribers):
                sub.up(attempt)
                # Changes made while nobody was subscribed: delivered now.
                sub.body(body)
        self._resolve_joiners(body)

    async def _follow(self, session: _Session) -> None:
        """Read once per update signal (or joiner) until the subscription ends."""
        while True:
            await self._wait_wanted()
            if session.ended:
                return
            try:
                body = await self._read()
            except Exception as exc:
                error = describe(exc)
                for sub in list(self.subscribers):
                    sub.read_failed(error)
                self._fail_joiners(
                    WatchError(
                        f"watch_start: reading {clip(self.uri)} from server {self.source.name!r} failed: {error}"
                    )
                )
                continue
            for sub in list(self.subscribers):
                sub.body(body)
            self._resolve_joiners(body)

    async def _pump(self, updates: AsyncIterator[None], session: _Session) -> None:
        try:
            async for _ in updates:
                self._policy.updated()
                self._want()
            session.reason = "the server ended the subscription"
        except SubscriptionLostError as exc:
            session.reason = str(exc) or "subscription lost"
        except Exception as exc:
            session.reason = f"subscription failed: {describe(exc)}"
        session.ended = True
        self._want()

    async def _read(self) -> Body:
        after = self._position
        result = await self.source.read(self.uri, after=after)
        self.reads += 1
        event_log = shape_for_mime_type(result.mime_type) == "event-log"
        if len(result.text) > (LARGE_EVENT_LOG if event_log else LARGE_BODY):
            # Parsing holds the GIL: a large body is parsed in the large-body worker instead
            # (asyncai_watch.runtime.offload), never on the event loop. Its position is unknown here, so
            # the next read is a whole one.
            self._position = None
            return Body.raw(result.text, result.mime_type)
        body = Body.of(result.text, result.mime_type)
        if event_log:
            # Every watch on the feed takes every body (positioned ones are joined, never
            # replaced), so the next read can start where this one ended.
            self._position = position(body.value) if body.error is None else None
            if after is not None:
                body = attrs.evolve(body, delta=True)
        return body

    # -- joiners --------------------------------------------------------------------------------

    def _resolve_joiners(self, body: Body) -> None:
        joiners, self._joiners = self._joiners, []
        for join in joiners:
            self.subscribers.add(join.subscriber)
            join.body = body
            join.done.set()

    def _fail_joiners(self, error: BaseException) -> None:
        joiners, self._joiners = self._joiners, []
        for join in joiners:
            join.error = error
            join.done.set()

    def _want(self) -> None:
        self._wanted.set()

    async def _wait_wanted(self) -> None:
        await self._wanted.wait()
        self._wanted = anyio.Event()

    def __repr__(self) -> str:
        return f"<Feed {self.source.name}:{self.uri} subscribers={len(self.subscribers)}>"
