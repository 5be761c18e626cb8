"""Fan-out of doorbells and ``resources/updated`` signals to attached sessions.

Each attached session (an open ``subscriptions/listen`` stream) is a
:class:`Subscriber` with a bounded doorbell buffer. Publishing is a plain
synchronous call that never waits: a full buffer drops the doorbell and
counts it (the ledger still has the todo; the agent's pull recovers it), so a
stalled session cannot slow ``todo_create`` for anyone. Resource updates are
level-triggered (a set of URIs), so they cannot overflow.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
import attrs

from .config import Credential
from .doorbell import Doorbell

__all__ = ["DEFAULT_BUFFER", "Hub", "HubStats", "Subscriber"]

DEFAULT_BUFFER = 64


@attrs.define(eq=False)
class Subscriber:
    credential: Credential
    uris: frozenset[str]
    capacity: int
    doorbells: deque[Doorbell] = attrs.field(factory=deque)
    pending_uris: dict[str, None] = attrs.field(factory=dict)  # ordered set
    dropped: int = 0
    rung: int = 0
    closed: bool = False
    _wake: anyio.Event = attrs.field(factory=anyio.Event)

    def offer(self, doorbell: Doorbell) -> bool:
        if self.closed:
            return False
        if len(self.doorbells) >= self.capacity:
            self.dropped += 1
            return False
        self.doorbells.append(doorbell)
        self.rung += 1
        self._wake.set()
        return True

    def updated(self, uri: str) -> None:
        if not self.closed and uri in self.uris:
            self.pending_uris[uri] = None
            self._wake.set()

    def close(self) -> None:
        self.closed = True
        self._wake.set()

    async def next_batch(self) -> tuple[list[Doorbell], list[str]] | None:
        """Wait for something to send; None once closed and drained."""
        while not (self.doorbells or self.pending_uris):
            if self.closed:
                return None
            await self._wake.wait()
            self._wake = anyio.Event()
        bells = list(self.doorbells)
        self.doorbells.clear()
        uris = list(self.pending_uris)
        self.pending_uris.clear()
        return bells, uris


@attrs.frozen
class HubStats:
    subscribers: int
    rung: int
    dropped: int


class Hub:
    def __init__(self, *, buffer: int = DEFAULT_BUFFER) -> None:
        if buffer < 1:
            raise ValueError(f"doorbell buffer must be >= 1, got {buffer}")
        self.buffer = buffer
        self._subs: set[Subscriber] = set()
        self._dropped_gone = 0  # drops of subscribers that have since left
        self._rung_gone = 0
        self._changed = anyio.Event()
        self._closed = False

    @contextmanager
    def subscribe(self, credential: Credential, uris: frozenset[str] = frozenset()) -> Iterator[Subscriber]:
        sub = Subscriber(credential=credential, uris=uris, capacity=self.buffer)
        if self._closed:  # shutting down: the stream ends as soon as it starts
            sub.close()
        self._subs.add(sub)
        self._signal()
        try:
            yield sub
        finally:
            sub.close()
            self._subs.discard(sub)
            self._dropped_gone += sub.dropped
            self._rung_gone += sub.rung
            self._signal()

    def _signal(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_changed(self) -> None:
        """Wait until a session attaches or detaches (tests and benches use it instead of polling)."""
        await self._changed.wait()

    def ring(self, doorbell: Doorbell, queue: str, assignee: str | None) -> int:
        """Offer ``doorbell`` to every attached session in scope; return how many took it."""
        took = 0
        for sub in list(self._subs):
            if not sub.credential.can_see(queue):
                continue
            if assignee is not None and sub.credential.name != assignee:
                continue
            took += sub.offer(doorbell)
        return took

    def updated(self, uri: str) -> None:
        for sub in list(self._subs):
            sub.updated(uri)

    def close(self) -> None:
        self._closed = True
        for sub in list(self._subs):
            sub.close()

    @property
    def subscribers(self) -> int:
        return len(self._subs)

    def stats(self) -> HubStats:
        return HubStats(
            subscribers=len(self._subs),
            rung=self._rung_gone + sum(s.rung for s in self._subs),
            dropped=self._dropped_gone + sum(s.dropped for s in self._subs),
        )
