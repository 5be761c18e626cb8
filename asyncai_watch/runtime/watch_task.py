"""One watch's task: the I/O side of a pure :class:`~asyncai_watch.core.watch.Watch`.

A :class:`WatchTask` holds what the manager started for one watch (its feed's inbox, its filter
session, the pure core) and runs its loop: wait for whichever comes first, the next thing the
feed hands it or the debounce deadline (on the injected clock), then feed the core and send
what it says. A read's events go through the filter in a job of the loop's own, so a slow
filter never holds back a notice that is due.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any, Literal

import anyio
import anyio.abc
import attrs

from asyncai_watch import log
from asyncai_watch.clock import Clock, move_on_at
from asyncai_watch.core.notice import Notice
from asyncai_watch.core.spec import WatchSpec
from asyncai_watch.core.watch import Body, Watch
from asyncai_watch.filters import FilterSession
from asyncai_watch.info import WatchInfo
from asyncai_watch.runtime.filtering import Result, lines_for
from asyncai_watch.runtime.offload import Offload
from asyncai_watch.runtime.subscriptions import Feed, GaveUp, Inbox, Up

__all__ = ["Status", "WatchTask"]

Status = Literal["starting", "running", "failed", "restore_failed"]
Deliver = Callable[["WatchTask", Notice], Awaitable[None]]


@attrs.define(eq=False)
class WatchTask:
    """One watch: its spec and status, the pure core, its feed and inbox, its filter, its task."""

    spec: WatchSpec
    status: Status = "starting"
    core: Watch | None = None
    server: str | None = None
    error: str | None = None
    feed: Feed | None = None
    inbox: Inbox = attrs.field(factory=Inbox)
    session: FilterSession | None = None
    result: Result | None = None  # a finished job's lines, until the loop takes them
    scope: anyio.CancelScope | None = None
    done: anyio.Event = attrs.field(factory=anyio.Event)
    settled: anyio.Event = attrs.field(factory=anyio.Event)  # the start finished, either way

    def info(self) -> WatchInfo:
        core = self.core
        return WatchInfo(
            name=self.spec.name,
            uri=self.spec.uri,
            status="running" if self.status == "starting" else self.status,
            shape=core.shape if core is not None else None,
            server=self.server,
            on_event=self.spec.on_event,
            events=core.events if core is not None else 0,
            notices=core.notices if core is not None else 0,
            error=self.error,
        )

    def log(self, event: str, *, verbose: bool, **fields: Any) -> None:
        log.emit(event, verbose=verbose, watch=self.spec.name, uri=self.spec.uri, **fields)

    def leave(self) -> None:
        """Detach from the feed (the last watch to leave ends its subscription)."""
        feed, self.feed = self.feed, None
        if feed is not None:
            feed.leave(self.inbox)

    async def end(self) -> None:
        """Stop the loop; when this was the last watch on its feed, wait until the subscription
        is closed too."""
        feed = self.feed
        if self.scope is not None:
            self.scope.cancel()
            await self.done.wait()
        else:
            self.leave()
        if feed is not None and not feed.subscribers:
            await feed.ended.wait()

    async def flush(self, deliver: Deliver) -> None:
        """Deliver the pending lines now, whatever their deadline."""
        notice = self.core.flush() if self.core is not None and self.status == "running" else None
        if notice is not None:
            await deliver(self, notice)

    # -- the loop --------------------------------------------------------------------------------

    async def run(
        self,
        stack: AsyncExitStack,
        *,
        clock: Clock,
        offload: Offload,
        deliver: Deliver,
        verbose: bool,
        task_status: anyio.abc.TaskStatus[None],
    ) -> None:
        """Serve the watch until it is stopped or its subscription gives up. ``stack`` holds the
        filter session, closed after the last job; ``deliver`` sends a notice on."""
        loop = _Loop(self, clock=clock, offload=offload, deliver=deliver, verbose=verbose)
        try:
            with anyio.CancelScope() as self.scope:
                task_status.started()
                async with stack:
                    async with anyio.create_task_group() as jobs:
                        gave_up = await loop.serve(jobs)
                        jobs.cancel_scope.cancel()
                    await loop.give_up(gave_up)
        finally:
            self.leave()
            if self.core is not None and self.core.remote:
                with anyio.CancelScope(shield=True):
                    await offload.forget(self.core)
            self.done.set()


@attrs.define
class _Loop:
    task: WatchTask
    clock: Clock
    offload: Offload
    deliver: Deliver
    verbose: bool

    async def serve(self, jobs: anyio.abc.TaskGroup) -> GaveUp:
        """Wait for the feed or the debounce deadline, whichever is first; feed the core."""
        task, core, inbox = self.task, self.task.core, self.task.inbox
        assert core is not None
        busy = False  # a read is being processed: newer ones wait in the inbox (newest wins)
        while True:
            async with move_on_at(self.clock, core.deadline):
                await inbox.wait()
            notice = core.due(self.clock.now())
            if notice is not None:
                await self.deliver(task, notice)
            for status in inbox.take_status():
                if isinstance(status, GaveUp):
                    return status
                if isinstance(status, Up):
                    task.log(
                        "watch.subscribed", verbose=self.verbose, server=task.server, attempt=status.attempt
                    )
                else:
                    retry = status.retry
                    task.log(
                        "watch.resubscribing",
                        verbose=self.verbose,
                        attempt=retry.attempt,
                        delay=retry.delay,
                        reason=status.reason,
                    )
            if task.result is not None:
                (lines, records), task.result, busy = task.result, None, False
                # The kept/deduped records only when the log takes them (usually it does not).
                wanted = log.events_enabled(verbose=self.verbose)
                log.events(
                    [*records, *core.add(lines, self.clock.now(), records=wanted)],
                    watch=task.spec.name,
                    uri=task.spec.uri,
                    verbose=self.verbose,
                )
            if not busy and (update := inbox.take_update()) is not None:
                busy = True
                jobs.start_soon(self._process, update)

    async def _process(self, update: Body | str) -> None:
        task = self.task
        assert task.core is not None
        task.result = await lines_for(task.core, update, task.session, self.offload)
        task.inbox.wake()

    async def give_up(self, gave_up: GaveUp) -> None:
        task = self.task
        assert task.core is not None
        task.status = "failed"
        task.error = gave_up.reason
        task.leave()
        notices = task.core.failed(gave_up.reason, gave_up.attempts)
        for notice in notices[:-1]:
            await self.deliver(task, notice)
        task.log("watch.failed", verbose=self.verbose, attempts=gave_up.attempts, reason=gave_up.reason)
        await self.deliver(task, notices[-1])
