"""One connection's subscriptions as a pure state machine: which URIs are watched, how they are
grouped into listens, when each is read, who gets each read, and when to resubscribe.

Sans-IO, like h11's ``Connection``: no awaits, no clock (``now`` comes in), no server. Every
input is a plain call and every answer a list of actions (:mod:`~asyncai_watch.core.feed_actions`)
for the runner (:mod:`asyncai_watch.runtime.runner`) to execute in order. An input that makes no
sense in the state raises :class:`FeedStateError`: a bug in the shell, never a server's fault.

A coordinator over named-state sub-machines (tables of legal moves) and a policy:
:mod:`~asyncai_watch.core.reads` (a URI's read IDLE / QUEUED / READING plus a dirty mark, the
``max_reads`` cap, the retry heap), :mod:`~asyncai_watch.core.coverage` (a listen OPENING / SENT
/ ACKED; grouping, merging, splitting), :mod:`~asyncai_watch.core.watched` (a URI's watchers,
joiners and :class:`Sync` UNREAD / CURRENT / STALE; who takes a read) and
:mod:`~asyncai_watch.core.resubscribe` (backoff with jitter, the pending attempt, or give up).
The feed itself keeps which URIs are *down* (no listen holds them: their watchers heard
:class:`Down`, and hear :class:`Up` once covered).

Inputs::

    watch(uri, w, now)            a watcher joins uri
    unwatch(uri, w, now)          a watcher leaves it (also a start that was cancelled)
    send(listen) -> uris          the runner sends a listen it was told to open: its URIs, fixed
    acked(listen, honored, now)   the server acknowledged a listen (honored: the URIs it took)
    ended(listen, reason, now, refused=...)   a listen ended, was lost, or failed before its ack
    updated(uri, now)             notifications/resources/updated for uri (or a sub-resource)
    read_done(uri, now, payload) / read_failed(uri, error, now, again=...)   a Read finished
    tick(now)                     time passed (the resubscribe deadline, :attr:`deadline`)
    speaks(mode)                  the connection now takes URIs per listen or per subscribe

**Reads.** At most one read per URI is in flight, an update during a read makes exactly one
more read after it, at most ``max_reads`` run at once; a URI is first read once an acknowledged
listen covers it, so no change falls between the subscription and the baseline. **Joiners.** A
watcher whose URI is CURRENT, covered and IDLE begins at once on the current state
(:class:`Begin`, ``fresh=False``); otherwise on the URI's next read (``fresh=True`` when that
read makes the baseline). **Resubscribing.** The watchers of URIs no listen holds any more hear
:class:`Down`; after :class:`Resubscribe`'s delay one listen is opened for every uncovered URI,
and once acknowledged they hear :class:`Up` and are read again; after the last attempt they hear
:class:`GaveUp` and are forgotten. A watch that starts meanwhile tries at once. The full account
is docs/core.md.
"""

from __future__ import annotations

import random as _random
from collections.abc import Callable, Hashable, Iterable
from typing import Final, Generic, TypeVar

from asyncai_watch.core.backoff import Backoff
from asyncai_watch.core.coverage import DEFAULT_MAX_LISTEN, MERGE_WIDTH, Coverage, Mode, covering_uris
from asyncai_watch.core.feed_actions import (
    Action,
    Begin,
    CloseListen,
    Deliver,
    Down,
    Forget,
    GaveUp,
    OpenListen,
    Read,
    ReadFailed,
    StartFailed,
    Up,
)
from asyncai_watch.core.feed_state import FeedStateError
from asyncai_watch.core.reads import Reads
from asyncai_watch.core.resubscribe import GiveUp, Resubscribe, Retry
from asyncai_watch.core.watched import CURRENT, STALE, UNREAD, Sync, Watched

__all__ = [
    "DEFAULT_MAX_LISTEN",
    "MERGE_WIDTH",
    "Action",
    "Begin",
    "CloseListen",
    "Deliver",
    "Down",
    "Feed",
    "FeedStateError",
    "Forget",
    "GaveUp",
    "GiveUp",
    "Mode",
    "OpenListen",
    "Read",
    "ReadFailed",
    "Resubscribe",
    "Retry",
    "StartFailed",
    "Sync",
    "Up",
    "covering_uris",
]

W = TypeVar("W", bound=Hashable)
P = TypeVar("P")

DEFAULT_MAX_READS: Final = 16
"""Reads one connection runs at once."""


class Feed(Generic[W, P]):
    """The subscriptions of one connection (see the module docstring). ``W`` is a watcher, ``P``
    the payload of a read (what :meth:`read_done` is given and :class:`Deliver` carries)."""

    def __init__(
        self,
        *,
        mode: Mode = "listen",
        backoff: Backoff | None = None,
        healthy_after: float = 16.0,
        max_reads: int = DEFAULT_MAX_READS,
        max_listen: int = DEFAULT_MAX_LISTEN,
        jitter: float = 0.0,
        random: Callable[[], float] = _random.random,
    ) -> None:
        self._coverage = Coverage(mode=mode, max_listen=max_listen)
        self._reads = Reads(max_reads)
        self.policy = Resubscribe(
            backoff=backoff if backoff is not None else Backoff(),
            healthy_after=healthy_after,
            jitter=jitter,
            random=random,
        )
        self._uris: dict[str, Watched[W]] = {}
        self._down: set[str] = set()  # watched URIs no listen held when they lost theirs

    # -- what the runner asks ---------------------------------------------------------------------

    @property
    def mode(self) -> Mode:
        """How the connection takes URIs (fixed at construction; :meth:`speaks` changes it)."""
        return self._coverage.mode

    @property
    def max_reads(self) -> int:
        return self._reads.max_reads

    @property
    def max_listen(self) -> int:
        """The most URIs in one listen (lowered when a server refuses a merged listen)."""
        return self._coverage.max_listen

    @property
    def deadline(self) -> float | None:
        """When :meth:`tick` has something to do (a resubscribe, a failed read tried again), or ``None``."""
        nxt = self._next_read_retry()
        read_at = nxt[0] if nxt is not None else None
        retry_at = self.policy.due
        if read_at is None or (retry_at is not None and retry_at < read_at):
            return retry_at
        return read_at

    @property
    def listens(self) -> int:
        """Listens open or opening."""
        return self._coverage.count

    def uris(self) -> list[str]:
        """Every URI that has watchers or joiners."""
        return list(self._uris)

    def watchers(self, uri: str) -> tuple[W, ...]:
        entry = self._uris.get(uri)
        return () if entry is None else (*entry.watchers, *entry.joiners)

    def covered(self, uri: str) -> bool:
        """Whether an acknowledged listen holds ``uri``."""
        return self._coverage.covered(uri)

    def listen_uris(self, listen: int) -> frozenset[str]:
        return self._coverage.uris(listen)

    # -- inputs -----------------------------------------------------------------------------------

    def speaks(self, mode: Mode) -> None:
        """The connection takes URIs this way from now on (known once it is up; a reconnect may
        come back speaking another version)."""
        self._coverage.speaks(mode)

    def watch(self, uri: str, watcher: W, now: float) -> list[Action[W, P]]:
        """``watcher`` joins ``uri``."""
        entry = self._uris.get(uri)
        if entry is None:
            entry = self._track(uri)
        idle = not self._reads.busy(uri)
        covered = self._coverage.covered(uri)
        if entry.join(watcher, uri, at_once=entry.sync is CURRENT and idle and covered):
            return [Begin(uri, (watcher,), fresh=False)]
        out: list[Action[W, P]] = []
        if covered and entry.sync is UNREAD and idle:
            self._read(uri, out)  # covered by a listen kept for an earlier watcher
        elif not self._coverage.held(uri):
            self._cover(now, out)
        return out

    def unwatch(self, uri: str, watcher: W, now: float) -> list[Action[W, P]]:
        """``watcher`` leaves ``uri`` (it began there, or was still waiting to)."""
        entry = self._uris.get(uri)
        if entry is None:
            raise FeedStateError(f"Feed.unwatch: nobody watches {uri!r}")
        entry.leave(watcher, uri)
        out: list[Action[W, P]] = []
        self._release(uri, entry, out)
        out.extend(self._coverage.compact())
        return out

    def send(self, listen: int) -> frozenset[str]:
        """The runner sends listen ``listen`` now: the URIs it holds, fixed from here on (watches
        that started since it was opened are in it, so a burst of starts shares one listen)."""
        return self._coverage.send(listen)

    def acked(self, listen: int, honored: Iterable[str] | None, now: float) -> list[Action[W, P]]:
        """Listen ``listen`` was acknowledged; ``honored`` is what the server took (``None``: all)."""
        ack = self._coverage.ack(listen, honored)
        out: list[Action[W, P]] = [*ack.closes]
        if ack.refused:
            self._refused(ack.refused, "the server did not honor the subscription", now, out)
        newly = [uri for uri in ack.newly if uri in self._uris]
        back = [uri for uri in newly if uri in self._down]
        if ack.purpose == "retry":
            attempt = self.policy.subscribed(now)
            watchers = tuple(w for uri in back for w in self._uris[uri].watchers)
            if watchers:
                out.append(Up(watchers, attempt))
        for uri in newly:
            # A first read, or a re-read: whatever changed while no listen held it is read now.
            self._uris[uri].moved("covered")
            self._down.discard(uri)
            self._request(uri, out)
        self._cover(now, out, settle=True)
        out.extend(self._coverage.compact())
        return out

    def ended(self, listen: int, reason: str, now: float, *, refused: bool = False) -> list[Action[W, P]]:
        """Listen ``listen`` ended: closed by the server, lost, or failed before its ack.

        ``refused``: the server answered the listen request with an error (as opposed to the
        connection failing or the ack not coming in time)."""
        end = self._coverage.end(listen, refused=refused)
        out: list[Action[W, P]] = []
        if end.kind == "split":
            out.extend(end.opens)
            return out
        if end.kind == "refused":
            self._refused(end.uris, reason, now, out)
        else:
            self._lost(end.uris, reason, now, out, before_ack=end.before_ack)
        self._cover(now, out, settle=True)
        out.extend(self._coverage.compact())
        return out

    def updated(self, uri: str, now: float) -> list[Action[W, P]]:
        """``notifications/resources/updated`` for ``uri``."""
        self.policy.updated()
        out: list[Action[W, P]] = []
        for watched in covering_uris(uri, self._uris):
            if self._reads.busy(watched):
                self._reads.mark(watched)
            elif self._uris[watched].sync is CURRENT:
                self._reads.clear_retry(watched)
                self._read(watched, out)
        return out

    def read_done(self, uri: str, now: float, payload: P | None = None) -> list[Action[W, P]]:
        """The read of ``uri`` finished (``payload``: what it brought, carried by :class:`Deliver`);
        the actions say who takes it."""
        dirty = self._reads.finish(uri, ok=True)  # raises unless a read of uri is in flight
        entry = self._uris[uri]
        out: list[Action[W, P]] = []
        entry.read(uri, payload, covered=self._coverage.covered(uri), out=out)
        self._after_read(uri, entry, dirty, out)
        return out

    def read_failed(self, uri: str, error: str, now: float, *, again: bool = True) -> list[Action[W, P]]:
        """The read of ``uri`` failed with ``error``. ``again``: read it again after the backoff's
        delay (``False`` when the connection itself failed: its listens end, and resubscribing
        reads everything again anyway)."""
        dirty = self._reads.finish(uri, ok=False)
        entry = self._uris[uri]
        out: list[Action[W, P]] = []
        if entry.read_failed(uri, error, out):
            # What the failed read was to show is read again after the backoff's delay (a server
            # that keeps failing is left alone once the attempts are used up, until its next update).
            delay = self.policy.backoff.delay(self._reads.failed(uri))
            if again and delay is not None and not dirty:
                self._reads.retry_at(uri, now + delay)
        else:
            dirty = False  # nobody is left to read it for
        self._after_read(uri, entry, dirty, out)
        out.extend(self._coverage.compact())
        return out

    def tick(self, now: float) -> list[Action[W, P]]:
        """Time passed: resubscribe, or read again what failed, once :attr:`deadline` is reached."""
        out: list[Action[W, P]] = []
        if self.policy.due is not None and now >= self.policy.due:
            self._cover(now, out)
        while (nxt := self._next_read_retry()) is not None and nxt[0] <= now:
            self._reads.drop_next_retry()
            self._reads.clear_retry(nxt[1])
            self._read(nxt[1], out)
        return out

    # -- helpers ----------------------------------------------------------------------------------

    def _cover(self, now: float, out: list[Action[W, P]], *, settle: bool = False) -> None:
        """Open listens for the watched URIs no listen holds: the resubscribe attempt while one
        is pending (not before its deadline when ``settle``: a listen was just acknowledged or
        ended); else, in mode ``"listen"``, they wait while another listen is being acknowledged."""
        purpose = self.policy.purpose(now, settle=settle)
        if purpose is not None:
            out.extend(self._coverage.cover(purpose))

    def _next_read_retry(self) -> tuple[float, str] | None:
        """The next failed read to try again; one of a STALE URI is dropped (the read once it is
        covered again shows what it was to show)."""
        while (nxt := self._reads.next_retry()) is not None and self._uris[nxt[1]].sync is STALE:
            self._reads.drop_next_retry()
        return nxt

    def _track(self, uri: str) -> Watched[W]:
        """A newly watched URI: counted in the listens that hold it (or waiting for one)."""
        entry = self._uris[uri] = Watched()
        self._reads.track(uri)
        self._coverage.watch(uri)
        return entry

    def _read(self, uri: str, out: list[Action[W, P]]) -> None:
        if self._reads.start(uri):
            out.append(Read(uri))

    def _request(self, uri: str, out: list[Action[W, P]]) -> None:
        if self._reads.request(uri):
            out.append(Read(uri))

    def _after_read(self, uri: str, entry: Watched[W], dirty: bool, out: list[Action[W, P]]) -> None:
        if dirty and (entry.watchers or entry.joiners):
            self._read(uri, out)
        self._release(uri, entry, out)
        if started := self._reads.pump():
            out.extend(map(Read, started))

    def _release(self, uri: str, entry: Watched[W], out: list[Action[W, P]]) -> None:
        """Drop ``uri`` once nobody watches it and no read of it is in flight (a queued read of it
        is skipped)."""
        if entry.watchers or entry.joiners or self._reads.reading(uri):
            return
        del self._uris[uri]
        self._down.discard(uri)
        self._reads.untrack(uri)
        self._coverage.unwatch(uri)
        if entry.baseline:
            out.append(Forget(uri))

    def _refused(self, uris: Iterable[str], reason: str, now: float, out: list[Action[W, P]]) -> None:
        """The server refused ``uris``: joiners fail; watchers that had begun resubscribe."""
        began: list[str] = []
        for uri in uris:
            entry = self._uris.get(uri)
            if entry is None:
                continue
            entry.fail_start(uri, reason, out)
            if entry.watchers:
                began.append(uri)
            else:
                self._release(uri, entry, out)
        if began:
            self._lost(began, reason, now, out, before_ack=True)

    def _lost(
        self, uris: Iterable[str], reason: str, now: float, out: list[Action[W, P]], *, before_ack: bool
    ) -> None:
        """``uris`` lost their listen. Those still watched and covered by no other listen are
        stale (re-read once covered again); those no opening listen holds either go down."""
        down: list[str] = []
        for uri in uris:
            entry = self._uris.get(uri)
            if entry is None or self._coverage.covered(uri):
                continue
            if before_ack:
                # A watch whose first subscription failed says so at once (its watch_start raises).
                entry.fail_start(uri, reason, out)
            if not (entry.watchers or entry.joiners):
                self._release(uri, entry, out)
                continue
            entry.moved("lost")
            if not self._coverage.held(uri):
                self._down.add(uri)
                down.append(uri)
        if not down:
            return
        decision = self.policy.lost(now)
        if isinstance(decision, GiveUp):
            self._give_up(decision.attempts, reason, out)
            return
        watchers = tuple(w for uri in down for w in self._uris[uri].watchers)
        if watchers:
            out.append(Down(watchers, decision, reason))

    def _give_up(self, attempts: int, reason: str, out: list[Action[W, P]]) -> None:
        down = [(uri, entry) for uri, entry in self._uris.items() if uri in self._down]
        gone = tuple(w for _, entry in down for w in entry.watchers)
        if gone:
            out.append(GaveUp(gone, attempts, reason))
        for uri, entry in down:
            entry.give_up(uri, reason, out)
            self._release(uri, entry, out)

    def __repr__(self) -> str:
        return (
            f"<Feed {self.mode} uris={len(self._uris)} listens={self._coverage.count}"
            f" reads={self._reads.in_flight}>"
        )
