"""One connection's runner: it executes what the pure feed decides, and feeds back what happened.

The :class:`~asyncai_watch.core.feed.Feed` of a connection decides everything about its
subscriptions (which listens, which reads, who gets which read, when to resubscribe); the
:class:`Runner` only executes its actions and reports results back:

- :class:`~asyncai_watch.core.feed.OpenListen` starts a task that subscribes (entering
  :meth:`~asyncai_watch.mcp.source.ResourceSource.subscribe` is the ack), reports each update,
  and reports the end; :class:`~asyncai_watch.core.feed.CloseListen` cancels that task.
- :class:`~asyncai_watch.core.feed.Read` starts a task that reads the URI, parses it, runs the
  URI's shared extraction (:mod:`asyncai_watch.runtime.topic`) and only then reports the read
  done: the feed keeps one read per URI in flight, so extractions of a URI never overlap.
- The other actions are plain calls: watchers begin, take a read's events (the payload
  :class:`~asyncai_watch.core.feed.Deliver` carries), fail; the topic of a URI nobody watches is
  dropped; resubscribes are logged.

The actions are a closed union, dispatched with ``match`` ending in ``assert_never``: an action
the feed gains and this runner does not handle is a mypy error, never one dropped in silence.

Tasks: one per open listen (a handful per connection), one per read in flight (at most the
feed's ``max_reads``), and :meth:`Runner.run`, which wakes the feed at its deadline. An idle
watch has no task. Every task lives in the manager's task group.
"""

from __future__ import annotations

import random as _random
from collections.abc import Callable
from typing import assert_never

import anyio
import anyio.abc

from asyncai_watch.clock import Clock, move_on_at
from asyncai_watch.core.echo import clip
from asyncai_watch.core.extract import Pending
from asyncai_watch.core.feed import (
    Action,
    Begin,
    CloseListen,
    Deliver,
    Down,
    Feed,
    Forget,
    GaveUp,
    OpenListen,
    Read,
    ReadFailed,
    StartFailed,
    Up,
)
from asyncai_watch.core.limits import Limits
from asyncai_watch.errors import (
    BaselineError,
    NotWatchableError,
    ServerConnectionError,
    ServerError,
    ServerTimeoutError,
    SubscriptionLostError,
    WatchError,
    describe,
)
from asyncai_watch.mcp.source import ResourceSource
from asyncai_watch.runtime.notices import Notices
from asyncai_watch.runtime.offload import Offload
from asyncai_watch.runtime.topic import Topic, parse
from asyncai_watch.runtime.watcher import Marks, Watcher

__all__ = ["Runner"]


class Runner:
    """Executes the feed of one source (see the module docstring)."""

    def __init__(
        self,
        source: ResourceSource,
        *,
        limits: Limits,
        clock: Clock,
        offload: Offload,
        notices: Notices,
        tg: anyio.abc.TaskGroup,
        marks: Marks | None = None,
        random: Callable[[], float] = _random.random,
    ) -> None:
        self.source = source
        # The mode is the connection's, known once it is up (a bridge's upstreams connect in the
        # background, and may come back speaking another version): see _mode().
        self.feed: Feed[Watcher, Pending] = Feed(
            backoff=limits.backoff,
            healthy_after=limits.resubscribe_max,
            jitter=limits.resubscribe_jitter,
            random=random,
        )
        self.topics: dict[str, Topic] = {}
        self._limits = limits
        self._clock = clock
        self._offload = offload
        self._notices = notices
        self._tg = tg
        self._marks = marks  # with a resume store: each watch's checkpoint after each read
        self._listens: dict[int, anyio.CancelScope] = {}
        self._closed: dict[int, anyio.Event] = {}  # listens cancelled whose task has not ended yet
        self._wake = anyio.Event()
        self._sleeping_until: float | None = None  # the deadline run() waits for

    # -- what the manager calls -------------------------------------------------------------------

    async def run(self) -> None:
        """Wake the feed at its deadline (resubscribes, failed reads tried again), until cancelled."""
        while True:
            self._sleeping_until = self.feed.deadline
            async with move_on_at(self._clock, self._sleeping_until):
                await self._wake.wait()
            self._wake = anyio.Event()
            self._mode()
            self._execute(self.feed.tick(self._clock.now()))

    async def join(self, watcher: Watcher) -> None:
        """Subscribe ``watcher`` to its URI; returns once it began on a read (raises when that
        failed, once a subscription made only for it is closed again)."""
        watcher.joining()
        self._mode()
        self._execute(self.feed.watch(watcher.uri, watcher, self._clock.now()))
        try:
            failure = await watcher.begun()
        except BaseException:
            if watcher.joined_unsettled:
                self._execute(self.feed.unwatch(watcher.uri, watcher, self._clock.now()))
            raise
        if failure is not None:
            await self._closes()
            raise failure

    def _mode(self) -> None:
        """Tell the feed when the connection takes URIs another way than it did (read before the
        feed may open listens: a connection's version is known once it is up)."""
        if (mode := self.source.subscription_mode) != self.feed.mode:
            self.feed.speaks(mode)

    async def leave(self, watcher: Watcher) -> None:
        """Unsubscribe ``watcher``; returns once the listens this closed have ended."""
        if watcher not in self.feed.watchers(watcher.uri):
            return  # it failed, and the feed forgot it then
        self._execute(self.feed.unwatch(watcher.uri, watcher, self._clock.now()))
        await self._closes()

    async def _closes(self) -> None:
        """Wait until every listen closed so far has ended (the server has seen it go)."""
        with anyio.CancelScope(shield=True):
            for done in [self._closed[i] for i in self._closed if i not in self._listens]:
                await done.wait()

    # -- executing actions ------------------------------------------------------------------------

    def _execute(self, actions: list[Action[Watcher, Pending]], cause: BaseException | None = None) -> None:
        """Carry out ``actions`` in order (a closed set: a missing branch is a type error);
        ``cause`` is the exception of the failure they answer."""
        now = self._clock.now()
        for action in actions:
            match action:
                case Deliver(uri=uri, watchers=watchers, payload=payload):
                    assert payload is not None  # a read after the first one always brings its events
                    checkpoint = self.topics[uri].checkpoint() if self._marks is not None else None
                    for watcher in watchers:
                        watcher.take(payload, now, checkpoint)
                case Read(uri=uri):
                    self._tg.start_soon(self._read, uri, name=f"read {uri}")
                case Begin(uri=uri, watchers=watchers):
                    topic = self.topics[uri]
                    checkpoint = topic.checkpoint() if self._marks is not None else None
                    for watcher in watchers:
                        watcher.begin(topic.shape, self._notices.schedule, self._marks, checkpoint)
                case OpenListen(id=listen):
                    scope = self._listens[listen] = anyio.CancelScope()
                    self._closed[listen] = anyio.Event()
                    self._tg.start_soon(self._listen, listen, scope, name=f"listen {listen}")
                case CloseListen(id=listen):
                    self._listens.pop(listen).cancel()
                case ReadFailed(error=error, watchers=watchers):
                    for watcher in watchers:
                        watcher.read_failed(error, now)
                case StartFailed(error=error, watchers=watchers):
                    for watcher in watchers:
                        watcher.fail_start(error, cause)
                case Forget(uri=uri):
                    topic = self.topics.pop(uri)
                    self._tg.start_soon(topic.forget)
                case Up(watchers=watchers, attempt=attempt):
                    for watcher in watchers:
                        watcher.log("watch.subscribed", server=self.source.name, attempt=attempt)
                case Down(watchers=watchers, retry=retry, reason=reason):
                    for watcher in watchers:
                        watcher.log(
                            "watch.resubscribing", attempt=retry.attempt, delay=retry.delay, reason=reason
                        )
                case GaveUp(watchers=watchers, attempts=attempts, reason=reason):
                    for watcher in watchers:
                        self._notices.now(watcher, watcher.give_up(attempts, reason))
                case _:
                    assert_never(action)
        if self.feed.deadline != self._sleeping_until:
            self._wake.set()  # run() sleeps until another time

    # -- tasks ------------------------------------------------------------------------------------

    async def _listen(self, listen: int, scope: anyio.CancelScope) -> None:
        reason, refused = "the server ended the subscription", False
        cause: BaseException | None = None
        try:
            with scope:
                uris = self.feed.send(listen)  # watches that started since it was opened are in it
                async with self.source.subscribe(uris) as updates:
                    self._execute(self.feed.acked(listen, updates.honored, self._clock.now()))
                    async for uri in updates:
                        self._execute(self.feed.updated(uri, self._clock.now()))
        except (ServerError, NotWatchableError) as exc:
            reason, refused, cause = (
                f"subscribing on server {self.source.name!r} failed: {describe(exc)}",
                True,
                exc,
            )
        except SubscriptionLostError as exc:
            reason, cause = str(exc) or "subscription lost", exc
        except WatchError as exc:
            reason, cause = f"subscribing on server {self.source.name!r} failed: {describe(exc)}", exc
        except Exception as exc:
            reason, cause = f"subscription failed: {describe(exc)}", exc
        finally:
            self._closed.pop(listen).set()
        if scope.cancel_called:
            return  # closed by the feed, which has already let it go
        self._listens.pop(listen, None)
        self._execute(self.feed.ended(listen, reason, self._clock.now(), refused=refused), cause=cause)

    async def _read(self, uri: str) -> None:
        """Read ``uri``, extract its events (or make its baseline), then report the read done."""
        topic = self.topics.get(uri)
        pending: Pending | None = None
        try:
            result = await self.source.read(uri, after=topic.position if topic is not None else None)
            body = parse(result)
            if topic is None:
                self.topics[uri] = await Topic.begin(uri, body, self._limits, self._offload)
            else:
                pending = await topic.read(body)
        except Exception as exc:
            # A failed connection ends its listens, and resubscribing reads again; a server's error
            # answer is tried again after the backoff.
            again = not isinstance(exc, ServerConnectionError | ServerTimeoutError)
            error = _read_error(exc, uri, self.source.name)
            self._execute(self.feed.read_failed(uri, error, self._clock.now(), again=again), cause=exc)
        else:
            self._execute(self.feed.read_done(uri, self._clock.now(), pending))


def _read_error(exc: BaseException, uri: str, server: str) -> str:
    if isinstance(exc, BaselineError):
        return exc.reason  # a baseline that cannot be one says why
    return f"reading {clip(uri)} from server {server!r} failed: {describe(exc)}"
