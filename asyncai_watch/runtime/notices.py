"""Every watch's debounce deadline in one heap, and the one task that sends notices.

Watches have no timers of their own: when a watch queues lines, its deadline
(:attr:`~asyncai_watch.core.deliver.Delivery.deadline`) goes into this heap, and the task here
sleeps on the injectable clock until the earliest one. A watch whose deadline moved (more lines:
the quiet time restarts, capped by the max wait) gets a new entry; the old one is stale and
skipped, and the task re-arms when the deadline it sleeps until is no longer the earliest.
Notices that are due at once (a watch that gave up) are queued here too, so every notice of a
manager leaves in one order, from one task.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Awaitable, Callable, Iterable

import anyio

from asyncai_watch.clock import Clock, move_on_at
from asyncai_watch.core.notice import Notice
from asyncai_watch.runtime.watcher import Watcher

__all__ = ["Notices"]

Send = Callable[[Watcher, Notice], Awaitable[None]]


class Notices:
    """The debounce heap and the notice task of one manager (see the module docstring)."""

    def __init__(self, clock: Clock, send: Send) -> None:
        self._clock = clock
        self._send = send
        self._heap: list[tuple[float, int, Watcher]] = []
        # The deadline the heap holds for each watch with lines queued: an entry whose deadline
        # is not this one is stale (the watch's deadline moved, or its notice was sent).
        self._scheduled: dict[Watcher, float] = {}
        self._order = itertools.count()
        self._now: deque[tuple[Watcher, Notice]] = deque()
        self._wake = anyio.Event()
        self._sleeping_until: float | None = None
        self.open = anyio.Event()
        """Nothing is sent before this is set (the manager sends its restore notice first)."""

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

    def now(self, watcher: Watcher, notices: Iterable[Notice]) -> None:
        """Send ``notices`` as soon as the task can, in order, before any later due one."""
        self._now.extend((watcher, notice) for notice in notices)
        self._wake.set()

    async def run(self) -> None:
        """Send notices as they come due, until cancelled."""
        await self.open.wait()
        while True:
            while self._now:
                watcher, notice = self._now.popleft()
                await self._send(watcher, notice)
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
