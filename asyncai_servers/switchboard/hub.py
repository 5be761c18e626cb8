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

Publishing (:meth:`Hub.ring`, :meth:`Hub.updated`) is a plain synchronous call
that only appends to an outbox: O(1) whatever the number of sessions, and it
never waits. The hub's own task (:meth:`Hub.run`, owned by the switchboard)
empties the outbox, offering each doorbell to the sessions in scope. A stream
whose writer is idle can take a doorbell *directly* (its transport accepts it
without waiting, see :attr:`Subscriber.direct`), which spares waking the
stream's task; otherwise the doorbell waits in the stream's buffer. When no
stream of a session has room the doorbell is dropped and counted (the ledger
still has the todo; the agent's pull recovers it), so a stalled session cannot
slow ``todo_create`` or anyone else's doorbells. Resource updates go to every
stream whose filter names the URI, and to every 2025-era session that subscribed
to it (``resources/subscribe``), through one
:class:`~asyncai_watch.server.SubscriptionRegistry` (:attr:`Hub.subscriptions`):
a URI's update costs O(its listeners). They are level-triggered (a set of URIs),
so they cannot overflow.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Final

import anyio
import anyio.lowlevel
import attrs
from mcp.shared.subscriptions import ResourceUpdated, ServerEvent

from asyncai_watch.server.subscriptions import SubscriptionRegistry

from .config import Credential
from .doorbell import Doorbell

__all__ = ["DEFAULT_BUFFER", "OUTBOX_MAX", "Hub", "HubStats", "Subscriber"]

DEFAULT_BUFFER = 64
OUTBOX_MAX: Final = 4096
"""Doorbells and updates waiting for the hub's task; beyond this they are dropped (counted)."""
FAN_OUT_SLICE: Final = 32


@attrs.define(eq=False)
class Subscriber:
    credential: Credential
    uris: frozenset[str]
    capacity: int
    channel: bool = False
    """The client declared ``claude/channel``: its SDK delivers doorbells instead of dropping them."""
    direct: Callable[[Doorbell], bool] | None = None
    """Set by the stream's writer once it may send: hands a doorbell to the transport without
    waiting, or returns False (the transport is busy or gone). Used only while the writer is idle
    and nothing is buffered, so doorbells keep their order."""
    doorbells: deque[Doorbell] = attrs.field(factory=deque)
    pending_uris: dict[str, None] = attrs.field(factory=dict)  # ordered set
    dropped: int = 0
    rung: int = 0
    closed: bool = False
    _writing: bool = True  # the writer holds a batch (or has not started): no direct sends
    _wake: anyio.Event = attrs.field(factory=anyio.Event)

    def offer(self, doorbell: Doorbell) -> bool:
        """Send or buffer ``doorbell``; False when closed or full (the hub decides what a refusal counts as)."""
        if self.closed:
            return False
        if not self.doorbells and not self._writing and self.direct is not None and self.direct(doorbell):
            return True
        if len(self.doorbells) >= self.capacity:
            return False
        self.doorbells.append(doorbell)
        self._wake.set()
        return True

    def deliver(self, event: ServerEvent) -> None:
        """A :class:`~asyncai_watch.server.Listener`: the registry hands it its URIs' updates."""
        if isinstance(event, ResourceUpdated):
            self.updated(event.uri)

    def updated(self, uri: str) -> None:
        if not self.closed and uri in self.uris:
            self.pending_uris[uri] = None
            self._wake.set()

    def close(self) -> None:
        self.closed = True
        self._wake.set()

    async def next_batch(self) -> tuple[list[Doorbell], list[str]] | None:
        """Wait for something to send; None once closed and drained.

        Calling it again means the previous batch has been sent: until then, new doorbells are
        buffered behind it rather than sent directly.
        """
        self._writing = False
        while not (self.doorbells or self.pending_uris):
            if self.closed:
                return None
            await self._wake.wait()
            self._wake = anyio.Event()
        self._writing = True
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
    buffered: int = 0
    """Doorbells waiting in stream buffers (bounded by the buffer size per stream)."""


_Item = tuple[Doorbell, str, str | None] | str  # a doorbell with its queue and assignee, or a URI


class Hub:
    def __init__(self, *, buffer: int = DEFAULT_BUFFER) -> None:
        if buffer < 1:
            raise ValueError(f"doorbell buffer must be >= 1, got {buffer}")
        self.buffer = buffer
        # credential name -> its open streams, oldest first
        self._sessions: dict[str, list[Subscriber]] = {}
        self.subscriptions = SubscriptionRegistry("switchboard")
        """Who listens to which queue URI: these streams, and 2025-era sessions (``resources/subscribe``)."""
        # Attached sessions per queue they can see ("*" for every queue): answers "is anyone here
        # interested in this queue" in O(1), so a replica fetches a todo only when someone is.
        self._scopes: dict[str, int] = {}
        self._dropped_gone = 0  # drops of subscribers that have since left
        self._rung_gone = 0
        self._outbox: deque[_Item] = deque()
        self._outbox_dropped = 0
        self._work = anyio.Event()
        self._changed = anyio.Event()
        self._closed = False

    @contextmanager
    def subscribe(
        self, credential: Credential, uris: frozenset[str] = frozenset(), *, channel: bool = False
    ) -> Iterator[Subscriber]:
        sub = Subscriber(credential=credential, uris=uris, capacity=self.buffer, channel=channel)
        if self._closed:  # shutting down: the stream ends as soon as it starts
            sub.close()
        siblings = self._sessions.setdefault(credential.name, [])
        if not siblings:
            self._scope(credential, +1)
        siblings.append(sub)
        self._signal()
        try:
            with self.subscriptions.attach(sub, uris):
                yield sub
        finally:
            sub.close()
            siblings = self._sessions.get(credential.name, [])
            if sub in siblings:
                siblings.remove(sub)
            if not siblings and self._sessions.pop(credential.name, None) is not None:
                self._scope(credential, -1)
            self._dropped_gone += sub.dropped
            self._rung_gone += sub.rung
            # Doorbells this stream never sent (it was cut off) are still the session's: hand them on.
            for bell in sub.doorbells:
                if self._deliver(siblings, bell):
                    self._rung_gone -= 1  # counted once already, by the stream that took it first
            sub.doorbells.clear()
            self._signal()

    def _scope(self, credential: Credential, delta: int) -> None:
        for queue in credential.queues:
            self._scopes[queue] = self._scopes.get(queue, 0) + delta
            if not self._scopes[queue]:
                del self._scopes[queue]

    def in_scope(self, queue: str) -> bool:
        """Whether an attached session here can see ``queue`` (O(1))."""
        return bool(self._scopes.get(queue) or self._scopes.get("*"))

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

    def _deliver(self, subs: list[Subscriber], doorbell: Doorbell) -> bool:
        """Give ``doorbell`` to one of a session's streams; count a drop if none has room."""
        if len(subs) == 1:  # the common case, without building the preference list
            sub = subs[0]
            if sub.closed:
                return False
            if sub.offer(doorbell):
                sub.rung += 1
                return True
            sub.dropped += 1
            return False
        candidates = self._preferred(subs)
        for sub in candidates:
            if sub.offer(doorbell):
                sub.rung += 1
                return True
        if candidates:
            candidates[0].dropped += 1
        return False

    def _publish(self, item: _Item) -> None:
        if len(self._outbox) >= OUTBOX_MAX:
            self._outbox_dropped += 1
            return
        self._outbox.append(item)
        self._work.set()

    def ring(self, doorbell: Doorbell, queue: str, assignee: str | None) -> None:
        """Publish ``doorbell`` for every attached session in scope (an assignee's alone, if set).

        O(1): :meth:`run` does the fan-out. Never waits.
        """
        self._publish((doorbell, queue, assignee))

    def updated(self, uri: str) -> None:
        """Publish ``resources/updated`` for the streams and 2025-era sessions subscribed to ``uri``."""
        self._publish(uri)

    def fan_out(self, doorbell: Doorbell, queue: str, assignee: str | None) -> int:
        """Offer ``doorbell`` once to every attached session in scope now; return how many took it."""
        if assignee is not None:
            subs = self._sessions.get(assignee)
            if not subs or not subs[0].credential.can_see(queue):
                return 0
            return int(self._deliver(subs, doorbell))
        took = 0
        for subs in list(self._sessions.values()):
            if subs[0].credential.can_see(queue):
                took += self._deliver(subs, doorbell)
        return took

    def _update(self, uri: str) -> None:
        self.subscriptions.publish_nowait(uri)

    async def run(self) -> None:
        """Hand out what :meth:`ring` and :meth:`updated` published, in order, until cancelled."""
        while True:
            await self._work.wait()
            self._work = anyio.Event()
            while self._outbox:
                item = self._outbox.popleft()
                if isinstance(item, str):
                    self._update(item)
                else:
                    await self._fan_out_in_slices(*item)

    async def _fan_out_in_slices(self, doorbell: Doorbell, queue: str, assignee: str | None) -> None:
        """:meth:`fan_out`, yielding every :data:`FAN_OUT_SLICE` sessions.

        The streams just handed a doorbell write it meanwhile, and so does everything else ready
        to run (the creator's own answer among them): with 1,000 sessions the fan-out never holds
        the event loop for more than a slice.
        """
        if assignee is not None:
            self.fan_out(doorbell, queue, assignee)
        else:
            sessions = list(self._sessions.values())
            for start in range(0, len(sessions), FAN_OUT_SLICE):
                for subs in sessions[start : start + FAN_OUT_SLICE]:
                    if subs[0].credential.can_see(queue):
                        self._deliver(subs, doorbell)
                await anyio.lowlevel.checkpoint()

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
            dropped=self._dropped_gone + self._outbox_dropped + sum(s.dropped for s in subs),
            buffered=sum(len(s.doorbells) for s in subs),
        )
