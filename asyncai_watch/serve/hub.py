"""Fan-out of pushed notices to the places a host can receive them.

An :class:`Outlet` is one such place: an open ``subscriptions/listen`` stream (2026-07-28,
any transport: sent request-scoped on the listen's stream, which the
:class:`~asyncai_watch.server.SubscriptionRegistry` writes: the outlet *forwards* each push
to it), or a connection (stdio, and a legacy ``initialize`` session: sent connection-scoped,
which is how a legacy host such as Claude Code receives channel notifications). Each outlet
has a bounded buffer and one writer task; publishing never waits, so a stalled host cannot
hold up the watches. A full buffer drops the push and counts it: the notice is still in the
ring, for ``watch_notices``.

Who gets a notice:

- ``exclusive`` (stdio: one process serves exactly one client): one outlet, the newest open
  listen if there is one, else the connection. The client sees each notice once however
  many listens it opens.
- otherwise (Streamable HTTP, any number of clients): every open outlet.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Literal

import anyio
import attrs

from .ring import Entry

__all__ = ["DEFAULT_BUFFER", "Hub", "Outlet"]

DEFAULT_BUFFER = 256

OutletKind = Literal["listen", "connection"]


@attrs.define(eq=False)
class Outlet:
    kind: OutletKind
    capacity: int
    forward: Callable[[Entry], bool] | None = None
    """Hand each push to this instead of the queue (a listen stream, whose own buffer bounds it);
    it answers False when it has no room."""
    on_close: Callable[[], None] | None = None
    queue: deque[Entry] = attrs.field(factory=deque)
    pushed: int = 0
    dropped: int = 0
    closed: bool = False
    _wake: anyio.Event = attrs.field(factory=anyio.Event)

    def offer(self, entry: Entry) -> bool:
        if self.closed:
            return False
        if self.forward is not None:
            taken = self.forward(entry)
            self.pushed += taken
            return taken
        if len(self.queue) >= self.capacity:
            return False
        self.queue.append(entry)
        self._wake.set()
        return True

    def close(self) -> None:
        self.closed = True
        self._wake.set()
        if self.on_close is not None:
            self.on_close()

    async def next_batch(self) -> list[Entry] | None:
        """Wait for something to send; ``None`` once closed and drained."""
        while not self.queue:
            if self.closed:
                return None
            await self._wake.wait()
            self._wake = anyio.Event()
        batch = list(self.queue)
        self.queue.clear()
        self.pushed += len(batch)
        return batch


@attrs.define
class Hub:
    exclusive: bool
    buffer: int = DEFAULT_BUFFER
    outlets: list[Outlet] = attrs.field(factory=list)
    published: int = 0
    dropped: int = 0
    """Pushes an outlet had no room for (the notices are still in the ring)."""
    unheard: int = 0
    """Notices published while no outlet was open (pull only)."""

    @contextmanager
    def attach(
        self,
        kind: OutletKind,
        *,
        forward: Callable[[Entry], bool] | None = None,
        on_close: Callable[[], None] | None = None,
    ) -> Iterator[Outlet]:
        outlet = Outlet(kind, self.buffer, forward, on_close)
        self.outlets.append(outlet)
        try:
            yield outlet
        finally:
            outlet.close()
            self.outlets.remove(outlet)

    def targets(self) -> list[Outlet]:
        open_ = [o for o in self.outlets if not o.closed]
        if not self.exclusive:
            return open_
        listens = [o for o in open_ if o.kind == "listen"]
        if listens:
            return [listens[-1]]
        return open_[-1:]

    def publish(self, entry: Entry) -> None:
        self.published += 1
        targets = self.targets()
        if not targets:
            self.unheard += 1
        for outlet in targets:
            if not outlet.offer(entry):
                outlet.dropped += 1
                self.dropped += 1

    def close(self) -> None:
        for outlet in self.outlets:
            outlet.close()
