"""Every notice of a manager leaves here: one heap of debounce deadlines, one queue, one task.

Watches have no timers of their own: when a watch queues lines, its deadline
(:attr:`~asyncai_watch.core.deliver.Delivery.deadline`) goes into this heap, and the task here
sleeps on the injectable clock until the earliest one. A watch whose deadline moved (more lines:
the quiet time restarts, capped by the max wait) gets a new entry; the old one is stale and
skipped, and the task re-arms when the deadline it sleeps until is no longer the earliest.
Notices that are due at once (a watch that gave up, a flush, the restore notice, a saved watch
restored later) are queued here too, so every notice of a manager leaves in one order, from one
task, through one exit (:meth:`Notices._send`: logged, then onto the manager's stream).
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
from collections import deque
from collections.abc import Iterable

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from asyncai_watch.clock import Clock, move_on_at
from asyncai_watch.core.notice import Notice
from asyncai_watch.runtime.resume import Resume
from asyncai_watch.runtime.watcher import Watcher

__all__ = ["Notices"]


class Notices:
    """The debounce heap, the queue and the notice task of one manager (see the module docstring)."""

    def __init__(
        self, clock: Clock, stream: MemoryObjectSendStream[Notice], *, resume: Resume | None = None
    ) -> None:
        self._clock = clock
        self._resume = resume
        self._stream = stream
        self._heap: list[tuple[float, int, Watcher]] = []
        # The deadline the heap holds for each watch with lines queued: an entry whose deadline
        # is not this one is stale (the watch's deadline moved, or its notice was sent).
        self._scheduled: dict[Watcher, float] = {}
        self._order = itertools.count()
        # Notices due at once (the watch they are of, if any), and markers set once all before them left.
        self._now: deque[tuple[Watcher | None, Notice | anyio.Event]] = deque()
        self._wake = anyio.Event()
        self._sleeping_until: float | None = None
        self._open = anyio.Event()
        self._ended = False

    def schedule(self, watcher: Watcher) -> None:
        """``watcher`` queued lines: its deadline goes into the heap (if it moved)."""
        deadline = watcher.delivery.deadline
        old = self._scheduled.get(watcher)
        if deadline is None:
            self._scheduled.pop(watcher, None)
            return
        self._scheduled[watcher] = deadline
        if deadline == old:
            return
        heapq.heappush(self._heap, (deadline, next(self._order), watcher))
        sleeping = self._sleeping_until
        if sleeping is None or deadline < sleeping or old == sleeping:
            self._wake.set()  # the task sleeps until a time that is no longer the earliest

    def now(self, watcher: Watcher | None, notices: Iterable[Notice]) -> None:
        """Send ``notices`` (of ``watcher``, or of no watch) as soon as the task can, in order,
        before any later due one."""
        self._now.extend((watcher, notice) for notice in notices)
        self._wake.set()

    async def sent(self) -> None:
        """Return once every notice queued so far has left (at once when the task has ended)."""
        if not self._ended:
            marker = anyio.Event()
            self._now.append((None, marker))
            self._wake.set()
            await marker.wait()

    async def flush(self, watchers: Iterable[Watcher]) -> None:
        """Send each watch's pending lines now as a notice, without waiting for its debounce;
        returns once they have left."""
        for watcher in watchers:
            self.now(watcher, [notice] if (notice := watcher.delivery.flush()) is not None else [])
        await self.sent()

    async def open(self, first: Notice | None = None) -> None:
        """Let notices leave, ``first`` before any other (returns once it has left). Nothing
        leaves before: the manager opens with its restore notice."""
        if first is not None and not self._ended:
            # Only it is waited for: the ones queued meanwhile could fill the buffer before anyone reads.
            marker = anyio.Event()
            self._now.extendleft([(None, marker), (None, first)])
            self._open.set()
            await marker.wait()
        self._open.set()

    def close(self) -> None:
        """The manager is closing: readers of its notices reach the end of the stream."""
        self._stream.close()

    async def run(self) -> None:
        """Send notices as they come due, until cancelled."""
        try:
            await self._open.wait()
            await self._loop()
        finally:
            self._ended = True
            for _, item in self._now:
                if isinstance(item, anyio.Event):
                    item.set()  # nobody waits for notices that will not leave

    async def _loop(self) -> None:
        while True:
            while self._now:
                watcher, item = self._now.popleft()
                if isinstance(item, anyio.Event):
                    item.set()
                else:
                    await self._send(watcher, item)
            heap = self._heap
            while heap and self._scheduled.get(heap[0][2]) != heap[0][0]:
                heapq.heappop(heap)  # stale: that watch's deadline moved, or it was flushed
            self._sleeping_until = heap[0][0] if heap else None
            async with move_on_at(self._clock, self._sleeping_until):
                await self._wake.wait()
            self._wake = anyio.Event()
            self._sleeping_until = None
            await self._send_due()

    async def _send_due(self) -> None:
        now = self._clock.now()
        heap = self._heap
        while heap and heap[0][0] <= now:
            deadline, _, watcher = heapq.heappop(heap)
            if self._scheduled.get(watcher) != deadline:
                continue  # stale
            del self._scheduled[watcher]
            notice = watcher.delivery.due(now)
            if notice is not None:
                await self._send(watcher, notice)
            self.schedule(watcher)  # lines that came while the notice was sent

    async def _send(self, watcher: Watcher | None, notice: Notice) -> None:
        """The one exit: a watch's notice is logged, kept until its turn completes (with a resume
        store), then every notice goes onto the stream."""
        if self._resume is not None and self._resume.on:
            notice = self._resume.handed(
                watcher.name if watcher is not None else None,
                # Its checkpoint moves only when no line of it waits after this notice.
                watcher.checkpoint if watcher is not None and watcher.delivery.deadline is None else None,
                notice,
            )
        if watcher is not None:
            extra = {k: v for k, v in notice.meta.items() if k not in ("name", "uri")}
            watcher.log("watch.notice", lines=notice.text.count("\n") + 1, text=notice.text, **extra)
        # If nobody reads notices any more (the agent closed its end), the log above still has it.
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await self._stream.send(notice)
