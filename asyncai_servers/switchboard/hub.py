"""Fan-out of doorbells and ``resources/updated`` signals to attached sessions.

Each open ``subscriptions/listen`` stream is a :class:`Subscriber` with a
bounded doorbell buffer. A *session* is a credential attached to this server
process through one or more streams: 2026-07-28 has no protocol session
(every Streamable HTTP request stands alone, and a stdio process serves one
client), and the credential is already the unit of identity here (claims,
assignees and scopes are per credential). A doorbell goes to **one** stream
per session: the newest open stream whose client declared ``claude/channel``
(else the newest open stream), falling through to an older one when that
buffer is full. So a client with two listens gets each doorbell once, and
keeps getting them when one listen closes.

Publishing is a plain synchronous call that never waits: when no stream of a
session has room the doorbell is dropped and counted (the ledger still has
the todo; the agent's pull recovers it), so a stalled session cannot slow
``todo_create`` for anyone. Resource updates go to every stream whose filter
names the URI; they are level-triggered (a set of URIs), so they cannot
overflow.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
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
    channel: bool = False
    """The client declared ``claude/channel``: its SDK delivers doorbells instead of dropping them."""
    doorbells: deque[Doorbell] = attrs.field(factory=deque)
    pending_uris: dict[str, None] = attrs.field(factory=dict)  # ordered set
    dropped: int = 0
    rung: int = 0
    closed: bool = False
    _wake: anyio.Event = attrs.field(factory=anyio.Event)

    def offer(self, doorbell: Doorbell) -> bool:
        """Buffer ``doorbell``; False when closed or full (the hub decides what a refusal counts as)."""
        if self.closed or len(self.doorbells) >= self.capacity:
            return False
        self.doorbells.append(doorbell)
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
    """Open streams."""
    sessions: int
    """Attached credentials (each gets a doorbell once, however many streams it has open)."""
    rung: int
    dropped: int


class Hub:
    def __init__(self, *, buffer: int = DEFAULT_BUFFER) -> None:
        if buffer < 1:
            raise ValueError(f"doorbell buffer must be >= 1, got {buffer}")
        self.buffer = buffer
        # credential name -> its open streams, oldest first
        self._sessions: dict[str, list[Subscriber]] = {}
        self._dropped_gone = 0  # drops of subscribers that have since left
        self._rung_gone = 0
        self._changed = anyio.Event()
        self._closed = False

    @contextmanager
    def subscribe(
        self, credential: Credential, uris: frozenset[str] = frozenset(), *, channel: bool = False
    ) -> Iterator[Subscriber]:
        sub = Subscriber(credential=credential, uris=uris, capacity=self.buffer, channel=channel)
        if self._closed:  # shutting down: the stream ends as soon as it starts
            sub.close()
        self._sessions.setdefault(credential.name, []).append(sub)
        self._signal()
        try:
            yield sub
        finally:
            sub.close()
            siblings = self._sessions.get(credential.name, [])
            if sub in siblings:
                siblings.remove(sub)
            if not siblings:
                self._sessions.pop(credential.name, None)
            self._dropped_gone += sub.dropped
            self._rung_gone += sub.rung
            # Doorbells this stream never sent (it was cut off) are still the session's: hand them on.
            for bell in sub.doorbells:
                if self._deliver(siblings, bell):
                    self._rung_gone -= 1  # counted once already, by the stream that took it first
            sub.doorbells.clear()
            self._signal()

    def _signal(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_changed(self) -> None:
        """Wait until a session attaches or detaches (tests and benches use it instead of polling)."""
        await self._changed.wait()

    @staticmethod
    def _preferred(subs: Iterable[Subscriber]) -> list[Subscriber]:
        """Open streams in delivery order: channel-capable first, then newest first."""
        newest_first = [s for s in reversed(list(subs)) if not s.closed]
        return [s for s in newest_first if s.channel] + [s for s in newest_first if not s.channel]

    def _deliver(self, subs: Iterable[Subscriber], doorbell: Doorbell) -> bool:
        """Give ``doorbell`` to one of a session's streams; count a drop if none has room."""
        candidates = self._preferred(subs)
        for sub in candidates:
            if sub.offer(doorbell):
                sub.rung += 1
                return True
        if candidates:
            candidates[0].dropped += 1
        return False

    def ring(self, doorbell: Doorbell, queue: str, assignee: str | None) -> int:
        """Offer ``doorbell`` once to every attached session in scope; return how many took it."""
        took = 0
        for name, subs in list(self._sessions.items()):
            if not subs[0].credential.can_see(queue):
                continue
            if assignee is not None and name != assignee:
                continue
            took += self._deliver(subs, doorbell)
        return took

    def updated(self, uri: str) -> None:
        for sub in self._all():
            sub.updated(uri)

    def close(self) -> None:
        self._closed = True
        for sub in self._all():
            sub.close()

    def _all(self) -> list[Subscriber]:
        return [sub for subs in self._sessions.values() for sub in subs]

    @property
    def subscribers(self) -> int:
        return sum(len(subs) for subs in self._sessions.values())

    @property
    def sessions(self) -> int:
        return len(self._sessions)

    def stats(self) -> HubStats:
        subs = self._all()
        return HubStats(
            subscribers=len(subs),
            sessions=len(self._sessions),
            rung=self._rung_gone + sum(s.rung for s in subs),
            dropped=self._dropped_gone + sum(s.dropped for s in subs),
        )
