"""One connection's subscriptions as a pure state machine: which URIs are watched, how they are
grouped into listens, when each is read, who gets each read, and when to resubscribe.

Sans-IO, in the shape of h11's ``Connection``. A :class:`Feed` never awaits, reads a clock or
touches a server: every input is a plain call (``now`` passed in where time matters) and every
answer is a list of actions for the runner (:mod:`asyncai_watch.runtime.runner`) to execute, in
order. An input that makes no sense in the current state (an ack for a listen that was never
opened, a read finishing that was never started, a watcher leaving a URI it never joined)
raises :class:`FeedStateError`: a bug in the shell, never a server's fault.

Inputs::

    watch(uri, w, now)            a watcher joins uri
    unwatch(uri, w, now)          a watcher leaves it (also a start that was cancelled)
    send(listen) -> uris          the runner sends a listen it was told to open: its URIs, fixed
    acked(listen, honored, now)   the server acknowledged a listen (honored: the URIs it took)
    ended(listen, reason, now, refused=...)   a listen ended, was lost, or failed before its ack
    updated(uri, now)             notifications/resources/updated for uri (or a sub-resource)
    read_done(uri, now) / read_failed(uri, error, now, again=...)   a Read finished
    tick(now)                     time passed (the resubscribe deadline, :attr:`deadline`)

Outputs: :class:`OpenListen`, :class:`CloseListen`, :class:`Read`, :class:`Begin`,
:class:`Deliver`, :class:`ReadFailed`, :class:`StartFailed`, :class:`Forget`, :class:`Up`,
:class:`Down`, :class:`GaveUp`.

**Grouping** (mode ``"listen"``, MCP 2026-07-28, where one ``subscriptions/listen`` carries any
number of URIs). URIs that need covering go into one new listen, joins that come before the
runner sends it (:meth:`Feed.send`) go into it too, and joins that come while it is being
acknowledged wait and go into the next one together, so a burst of ``watch_start`` costs a
couple of listens. Acknowledged listens are then merged like a counter in base :data:`MERGE_WIDTH`
(4): four listens of the same size class (``floor(log4(size))``) are replaced by one holding
them all, opened and acknowledged *before* the four are closed, so no change falls between.
Each URI is re-sent about ``log4(N)`` times over N sequential starts (one listen re-sent whole
per start would cost N²), and a connection holds at most 3 listens per size class. (Merging
pairs re-sends each URI ``log2(N)`` times: a burst of 10,000 starts then opened 1,218 listens
instead of 813, and started 8% fewer watches a second.) A listen left holding
mostly URIs nobody watches any more is replaced by one of the rest (or closed when empty). A
server that refuses a merged listen caps the listen size for this connection; a refused listen
of joiners is split in halves until the refused URI is alone (its watch_start fails, the others
start). Mode ``"subscribe"`` (the legacy era, ``resources/subscribe``) keeps one "listen" per
URI, opened when the URI is first watched and closed (unsubscribed) when its last watcher leaves.

**Reads.** At most one read per URI is in flight; an update during a read makes exactly one
more read after it; at most ``max_reads`` reads run at once (the rest wait their turn, e.g. the
re-reads after a reconnect). A URI is first read once an acknowledged listen covers it, so no
change falls between the subscription and the baseline.

**Joiners.** A watcher whose URI is covered, read and not being read begins at once on the
current state (:class:`Begin` with ``fresh=False``); otherwise it begins on the next read of the
URI (``fresh=True`` when that read is the URI's first: its baseline is made from it).

**Resubscribing.** When a listen ends, its URIs that no other acknowledged listen covers are
down: their watchers hear :class:`Down`, and after :class:`Resubscribe`'s delay (1, 2, 4, 8,
16 s by default) one listen is opened for every uncovered URI; once acknowledged, they hear
:class:`Up` and are read again (changes made while nobody was subscribed). After the last
attempt they hear :class:`GaveUp` and are forgotten. A watch that starts meanwhile tries at once.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Hashable, Iterable
from typing import Final, Generic, Literal, TypeAlias, TypeVar

import attrs

from asyncai_watch.core.backoff import Backoff

__all__ = [
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
    "Up",
    "covering_uris",
]

W = TypeVar("W", bound=Hashable)

Mode = Literal["listen", "subscribe"]
"""``"listen"``: many URIs per ``subscriptions/listen`` (MCP 2026-07-28); ``"subscribe"``: one
``resources/subscribe`` per URI (the legacy era)."""

DEFAULT_MAX_READS: Final = 16
"""Reads one connection runs at once."""

DEFAULT_MAX_LISTEN: Final = 100_000
"""The most URIs the feed puts into one listen (a server that refuses fewer lowers it)."""

MERGE_WIDTH: Final = 4
"""How many acknowledged listens of one size class are merged into one (see the module doc)."""


class FeedStateError(RuntimeError):
    """An input that makes no sense in the feed's state: a bug in the code driving it."""


# -- the resubscribe policy ------------------------------------------------------------------------


@attrs.frozen
class Retry:
    """Resubscribe after ``delay`` seconds; ``attempt`` counts from 1 since the last healthy one."""

    delay: float
    attempt: int


@attrs.frozen
class GiveUp:
    """The attempts are used up; ``attempts`` failed in a row."""

    attempts: int


@attrs.define
class Resubscribe:
    """The resubscribe policy of one connection's subscriptions.

    A subscription counts as healthy once an update arrived on it or it stayed up
    ``healthy_after`` seconds; a healthy one resets the failure count. Each ending asks
    :attr:`backoff` for the next delay: 1, 2, 4, 8, 16 s by default, then give up.
    """

    backoff: Backoff = attrs.field(factory=Backoff)
    healthy_after: float = 16.0
    failures: int = 0
    _opened: float | None = None
    _healthy: bool = False
    _resubscribing: bool = False

    def subscribed(self, now: float) -> int:
        """The subscription is up (acknowledged); returns its attempt number (0: the first)."""
        self._opened = now
        self._healthy = False
        return self.failures + 1 if self._resubscribing else 0

    def updated(self) -> None:
        """An update arrived: the subscription works."""
        self._healthy = True

    def ended(self, now: float) -> Retry | GiveUp:
        """The subscription ended (or an attempt failed before it was up): retry or give up."""
        opened, self._opened = self._opened, None
        if self._healthy or (opened is not None and now - opened >= self.healthy_after):
            self.failures = 0
        elif self._resubscribing:
            self.failures += 1
        self._healthy = False
        self._resubscribing = True
        delay = self.backoff.delay(self.failures)
        if delay is None:
            return GiveUp(self.failures)
        return Retry(delay, self.failures + 1)

    def reset(self) -> None:
        """Forget the history (after giving up: a later watch starts afresh)."""
        self.failures = 0
        self._opened = None
        self._healthy = self._resubscribing = False


# -- actions ---------------------------------------------------------------------------------------


@attrs.frozen
class OpenListen:
    """Open listen ``id`` (mode ``"subscribe"``: one ``resources/subscribe``): take its URIs with
    :meth:`Feed.send` right before sending it (``uris`` are those it held when opened; watches that
    start meanwhile join it), report its ack with :meth:`Feed.acked` and its end with
    :meth:`Feed.ended`."""

    id: int
    uris: frozenset[str]


@attrs.frozen
class CloseListen:
    """Close listen ``id`` (mode ``"subscribe"``: ``resources/unsubscribe``); report nothing back."""

    id: int


@attrs.frozen
class Read:
    """Read ``uri``; report :meth:`Feed.read_done` or :meth:`Feed.read_failed`."""

    uri: str


@attrs.frozen
class Begin(Generic[W]):
    """``watchers`` begin on ``uri``: on the read just done when ``fresh`` (the URI's first read:
    make its baseline from it), else on the URI's current state."""

    uri: str
    watchers: tuple[W, ...]
    fresh: bool


@attrs.frozen
class Deliver(Generic[W]):
    """The read of ``uri`` just done goes to ``watchers`` (each already began on the URI)."""

    uri: str
    watchers: tuple[W, ...]


@attrs.frozen
class ReadFailed(Generic[W]):
    """A read of ``uri`` after an update failed; ``watchers`` keep their state."""

    uri: str
    error: str
    watchers: tuple[W, ...]


@attrs.frozen
class StartFailed(Generic[W]):
    """``watchers`` never began on ``uri`` (its listen or first read failed); they are gone."""

    uri: str
    error: str
    watchers: tuple[W, ...]


@attrs.frozen
class Forget:
    """Nobody watches ``uri`` any more: drop what was kept for it (its baseline)."""

    uri: str


@attrs.frozen
class Up(Generic[W]):
    """``watchers`` are subscribed again (``attempt`` resubscribes since the last healthy one)."""

    watchers: tuple[W, ...]
    attempt: int


@attrs.frozen
class Down(Generic[W]):
    """``watchers``' subscription ended; it is tried again after ``retry.delay`` seconds."""

    watchers: tuple[W, ...]
    retry: Retry
    reason: str


@attrs.frozen
class GaveUp(Generic[W]):
    """``watchers``' subscription ended for good after ``attempts`` failed resubscribes; they are gone."""

    watchers: tuple[W, ...]
    attempts: int
    reason: str


Action: TypeAlias = (
    "OpenListen | CloseListen | Read | Begin[W] | Deliver[W] | ReadFailed[W] | StartFailed[W] | Forget "
    "| Up[W] | Down[W] | GaveUp[W]"
)


def covering_uris(updated: str, watched: Iterable[str] | frozenset[str] | set[str]) -> list[str]:
    """The watched URIs an update of ``updated`` changes: itself, and each watched URI it is a
    sub-resource of (the spec lets a server stamp a sub-resource's URI, which changes its parent)."""
    pool = watched if isinstance(watched, set | frozenset | dict) else set(watched)
    out = [updated] if updated in pool else []
    cut = len(updated)
    while (cut := updated.rfind("/", 0, cut)) > 0:
        parent = updated[:cut]
        if parent in pool:
            out.append(parent)
        if parent + "/" in pool:
            out.append(parent + "/")
    return out


# -- state -----------------------------------------------------------------------------------------

_Purpose = Literal["cover", "retry", "replace"]


@attrs.define(eq=False, slots=True)
class _Listen:
    id: int
    uris: frozenset[str] | set[str]  # a set while it is not sent (watches join it), then frozen
    purpose: _Purpose
    order: list[str] = attrs.field(factory=list)  # the URIs in the order they came (reads go in that order)
    replaces: tuple[int, ...] = ()  # listens closed once this one is acknowledged
    sent: bool = False  # the runner sent it: its URIs are fixed
    acked: bool = False
    wanted: int = 0  # how many of its URIs are watched (kept up to date by the feed)
    replaced_by: int | None = None  # an opening listen that will take this one's place


@attrs.define(eq=False, slots=True)
class _Uri(Generic[W]):
    watchers: set[W] = attrs.field(factory=set)  # began: they get every read
    joiners: list[W] = attrs.field(factory=list)  # wait for the next read (or for a listen)
    baseline: bool = False  # read at least once since it was first watched
    reading: bool = False
    queued: bool = False  # waiting for a read slot
    dirty: bool = False  # an update came during the read: read once more
    failures: int = 0  # reads that failed in a row
    retry_at: float | None = None  # a failed read is tried again then
    stale: bool = False  # lost its listen: read again once a listen holds it again
    down: bool = False  # and no listen held it: its watchers heard Down, and hear Up once covered


class Feed(Generic[W]):
    """The subscriptions of one connection (see the module docstring)."""

    def __init__(
        self,
        *,
        mode: Mode = "listen",
        backoff: Backoff | None = None,
        healthy_after: float = 16.0,
        max_reads: int = DEFAULT_MAX_READS,
        max_listen: int = DEFAULT_MAX_LISTEN,
    ) -> None:
        if mode not in ("listen", "subscribe"):
            raise ValueError(f"Feed: mode must be 'listen' or 'subscribe', got {mode!r}")
        if type(max_reads) is not int or max_reads < 1:
            raise ValueError(f"Feed: max_reads must be an int >= 1, got {max_reads!r}")
        if type(max_listen) is not int or max_listen < 1:
            raise ValueError(f"Feed: max_listen must be an int >= 1, got {max_listen!r}")
        self.mode: Mode = mode
        self.max_reads = max_reads
        self.max_listen = max_listen
        self.policy = Resubscribe(
            backoff=backoff if backoff is not None else Backoff(), healthy_after=healthy_after
        )
        self._uris: dict[str, _Uri[W]] = {}
        self._listens: dict[int, _Listen] = {}
        # Indexes, so that nothing per URI costs more than the listens holding it:
        self._holders: dict[str, list[int]] = {}  # URI -> listens open or opening that hold it
        self._uncovered: dict[str, None] = {}  # watched URIs no listen holds (an ordered set)
        self._ids = 0
        self._reads = 0  # reads in flight
        self._waiting: deque[str] = deque()  # URIs waiting for a read slot
        self._retry: Retry | None = None  # the pending resubscribe, until its deadline
        self._retry_at: float | None = None
        self._read_retries: list[tuple[float, str]] = []  # (when, uri), a heap; stale entries skipped

    # -- what the runner asks ---------------------------------------------------------------------

    @property
    def deadline(self) -> float | None:
        """When :meth:`tick` has something to do (a resubscribe, a failed read tried again), or ``None``."""
        retries = self._read_retries
        while retries and self._stale_retry(*retries[0]):
            heapq.heappop(retries)
        read_at = retries[0][0] if retries else None
        if read_at is None or (self._retry_at is not None and self._retry_at < read_at):
            return self._retry_at
        return read_at

    @property
    def listens(self) -> int:
        """Listens open or opening."""
        return len(self._listens)

    def uris(self) -> list[str]:
        """Every URI that has watchers or joiners."""
        return list(self._uris)

    def watchers(self, uri: str) -> tuple[W, ...]:
        entry = self._uris.get(uri)
        return () if entry is None else (*entry.watchers, *entry.joiners)

    def covered(self, uri: str) -> bool:
        """Whether an acknowledged listen holds ``uri``."""
        listens = self._listens
        return any(listens[i].acked for i in self._holders.get(uri, ()))

    def listen_uris(self, listen: int) -> frozenset[str]:
        return frozenset(self._listen(listen).uris)

    # -- inputs -----------------------------------------------------------------------------------

    def watch(self, uri: str, watcher: W, now: float) -> list[Action[W]]:
        """``watcher`` joins ``uri``."""
        entry = self._uris.get(uri)
        if entry is None:
            entry = self._track(uri)
        elif watcher in entry.watchers or watcher in entry.joiners:
            raise FeedStateError(f"Feed.watch: {watcher!r} already watches {uri!r}")
        if entry.baseline and not (entry.reading or entry.queued or entry.stale) and self.covered(uri):
            entry.watchers.add(watcher)
            return [Begin(uri, (watcher,), fresh=False)]
        entry.joiners.append(watcher)
        out: list[Action[W]] = []
        if self.covered(uri) and not entry.baseline and not entry.reading and not entry.queued:
            self._read(uri, entry, out)  # covered by a listen kept for an earlier watcher
        elif not self._in_listen(uri):
            self._cover(now, out, "join")
        return out

    def unwatch(self, uri: str, watcher: W, now: float) -> list[Action[W]]:
        """``watcher`` leaves ``uri`` (it began there, or was still waiting to)."""
        entry = self._uris.get(uri)
        if entry is None:
            raise FeedStateError(f"Feed.unwatch: nobody watches {uri!r}")
        if watcher in entry.watchers:
            entry.watchers.discard(watcher)
        elif watcher in entry.joiners:
            entry.joiners.remove(watcher)
        else:
            raise FeedStateError(f"Feed.unwatch: {watcher!r} does not watch {uri!r}")
        out: list[Action[W]] = []
        self._release(uri, entry, out)
        self._compact(out)
        return out

    def send(self, listen: int) -> frozenset[str]:
        """The runner sends listen ``listen`` now: the URIs it holds, fixed from here on (watches
        that started since it was opened are in it, so a burst of starts shares one listen)."""
        lst = self._listen(listen)
        if lst.sent:
            raise FeedStateError(f"Feed.send: listen {listen} was already sent")
        lst.sent = True
        lst.uris = frozenset(lst.uris)
        return lst.uris

    def acked(self, listen: int, honored: Iterable[str] | None, now: float) -> list[Action[W]]:
        """Listen ``listen`` was acknowledged; ``honored`` is what the server took (``None``: all)."""
        lst = self._listen(listen)
        if not lst.sent:
            raise FeedStateError(f"Feed.acked: listen {listen} was never sent")
        if lst.acked:
            raise FeedStateError(f"Feed.acked: listen {listen} was already acknowledged")
        out: list[Action[W]] = []
        refused = lst.uris - frozenset(honored) if honored is not None else frozenset()
        self._unhold(lst, refused)
        newly = [uri for uri in lst.order if uri in lst.uris and uri in self._uris and not self.covered(uri)]
        lst.acked = True
        for old in lst.replaces:
            if old in self._listens:  # not ended meanwhile
                out.append(CloseListen(old))
                self._drop(old)
        if refused:
            self._refused(refused, "the server did not honor the subscription", now, out)
        back = [uri for uri in newly if self._uris[uri].down]
        if lst.purpose == "retry":
            attempt = self.policy.subscribed(now)
            watchers = tuple(w for uri in back for w in self._uris[uri].watchers)
            if watchers:
                out.append(Up(watchers, attempt))
        for uri in newly:
            # A first read, or a re-read: whatever changed while no listen held it is read now.
            entry = self._uris[uri]
            entry.down = entry.stale = False
            if entry.reading or entry.queued:
                entry.dirty = True
            else:
                self._read(uri, entry, out)
        self._cover(now, out, "settle")
        self._compact(out)
        return out

    def ended(self, listen: int, reason: str, now: float, *, refused: bool = False) -> list[Action[W]]:
        """Listen ``listen`` ended: closed by the server, lost, or failed before its ack.

        ``refused``: the server answered the listen request with an error (as opposed to the
        connection failing or the ack not coming in time)."""
        lst = self._drop(listen)
        out: list[Action[W]] = []
        for other in self._listens.values():
            if other.replaced_by == listen:
                other.replaced_by = None
        if lst.purpose == "replace" and not lst.acked:
            # The listens it was to replace cover its URIs, unless they ended meanwhile.
            if refused and len(lst.uris) > 1:
                self.max_listen = min(self.max_listen, len(lst.uris) - 1)
            self._lost(lst.uris, reason, now, out, before_ack=False)
        elif not lst.acked and refused and len(lst.uris) > 1:
            # Which URI the server refused is unknown: halves, until it is alone.
            uris = [uri for uri in lst.order if uri in lst.uris]
            half = len(uris) // 2
            for part in (uris[:half], uris[half:]):
                self._open(part, lst.purpose, out)
            return out
        elif not lst.acked and refused:
            self._refused(lst.uris, reason, now, out)
        else:
            self._lost(lst.uris, reason, now, out, before_ack=not lst.acked)
        self._cover(now, out, "settle")
        self._compact(out)
        return out

    def updated(self, uri: str, now: float) -> list[Action[W]]:
        """``notifications/resources/updated`` for ``uri``."""
        self.policy.updated()
        out: list[Action[W]] = []
        for watched in covering_uris(uri, self._uris):
            entry = self._uris[watched]
            if entry.reading or entry.queued:
                entry.dirty = True
            elif entry.baseline and not entry.stale:
                entry.retry_at = None
                self._read(watched, entry, out)
        return out

    def read_done(self, uri: str, now: float) -> list[Action[W]]:
        """The read of ``uri`` finished; the actions say who takes it."""
        entry = self._reading(uri)
        out: list[Action[W]] = []
        fresh = not entry.baseline
        entry.baseline = True
        entry.failures = 0
        if not self.covered(uri):
            entry.stale = True  # its listen went while it was read: read again once covered
        if entry.watchers and not fresh:
            out.append(Deliver(uri, tuple(entry.watchers)))
        if entry.joiners:
            joiners = tuple(entry.joiners)
            entry.joiners.clear()
            entry.watchers.update(joiners)
            out.append(Begin(uri, joiners, fresh=fresh))
        self._after_read(uri, entry, out)
        return out

    def read_failed(self, uri: str, error: str, now: float, *, again: bool = True) -> list[Action[W]]:
        """The read of ``uri`` failed with ``error``. ``again``: read it again after the backoff's
        delay (``False`` when the connection itself failed: its listens end, and resubscribing
        reads everything again anyway)."""
        entry = self._reading(uri)
        out: list[Action[W]] = []
        if not entry.baseline:
            if entry.joiners:
                out.append(StartFailed(uri, error, tuple(entry.joiners)))
                entry.joiners.clear()
            entry.dirty = False  # nobody is left to read it for
        else:
            if entry.watchers:
                out.append(ReadFailed(uri, error, tuple(entry.watchers)))
            # What the failed read was to show is read again after the backoff's delay (a server
            # that keeps failing is left alone once the attempts are used up, until its next update).
            delay = self.policy.backoff.delay(entry.failures)
            entry.failures += 1
            if again and delay is not None and not entry.dirty:
                entry.retry_at = now + delay
                heapq.heappush(self._read_retries, (entry.retry_at, uri))
            if entry.joiners:
                joiners = tuple(entry.joiners)
                entry.joiners.clear()
                entry.watchers.update(joiners)
                out.append(Begin(uri, joiners, fresh=False))
        self._after_read(uri, entry, out)
        self._compact(out)
        return out

    def tick(self, now: float) -> list[Action[W]]:
        """Time passed: resubscribe, or read again what failed, once :attr:`deadline` is reached."""
        out: list[Action[W]] = []
        if self._retry_at is not None and now >= self._retry_at:
            self._cover(now, out, "tick")
        retries = self._read_retries
        while retries and retries[0][0] <= now:
            when, uri = heapq.heappop(retries)
            if not self._stale_retry(when, uri):
                entry = self._uris[uri]
                entry.retry_at = None
                self._read(uri, entry, out)
        return out

    # -- covering ---------------------------------------------------------------------------------

    def _cover(self, now: float, out: list[Action[W]], trigger: Literal["join", "tick", "settle"]) -> None:
        """Open listens for the watched URIs no listen holds.

        During a backoff only a new watch or the deadline does it (a watch that starts while the
        others wait out a backoff tries at once), and that is the resubscribe attempt. Otherwise,
        in mode ``"listen"``, URIs wait while another listen is being acknowledged and go into the
        next one together (``trigger="settle"``: a listen was just acknowledged or ended)."""
        if self._retry_at is not None:
            if trigger == "settle" and now < self._retry_at:
                return
            self._retry_at = None
            purpose: _Purpose = "retry"
        else:
            purpose = "cover"
        uncovered = list(self._uncovered)
        if not uncovered:
            return
        if self.mode == "listen":
            unsent = next(
                (lst for lst in self._listens.values() if lst.purpose != "replace" and not lst.sent), None
            )
            if unsent is not None:
                self._hold(unsent, uncovered)  # not sent yet: these go into it
                return
            if purpose == "cover" and self._listens_opening("cover"):
                return  # they go into the next one, once this one is acknowledged
        size = 1 if self.mode == "subscribe" else self.max_listen
        for start in range(0, len(uncovered), size):
            self._open(uncovered[start : start + size], purpose, out)

    def _open(
        self, uris: list[str], purpose: _Purpose, out: list[Action[W]], replaces: tuple[int, ...] = ()
    ) -> None:
        self._ids += 1
        listen = _Listen(self._ids, set(), purpose, replaces=replaces)
        self._listens[self._ids] = listen
        self._hold(listen, uris)
        for old in replaces:
            self._listens[old].replaced_by = self._ids
        out.append(OpenListen(self._ids, frozenset(listen.uris)))

    def _hold(self, listen: _Listen, uris: list[str]) -> None:
        """``listen`` (not sent yet) holds ``uris`` too."""
        held = listen.uris
        assert isinstance(held, set)  # only a listen not sent yet grows
        new = [uri for uri in uris if uri not in held]
        held.update(new)
        listen.order.extend(new)
        for uri in new:
            self._holders.setdefault(uri, []).append(listen.id)
            if uri in self._uris:
                listen.wanted += 1
                self._uncovered.pop(uri, None)

    def _compact(self, out: list[Action[W]]) -> None:
        """Merge MERGE_WIDTH same-size listens into one, shrink or close mostly unwatched ones."""
        if self.mode == "subscribe":
            for lst in list(self._listens.values()):
                if lst.acked and not lst.wanted:
                    out.append(CloseListen(lst.id))
                    self._drop(lst.id)
            return
        if self._listens_opening("replace"):
            return  # one replacement at a time: the next is decided once it is acknowledged
        classes: dict[int, list[_Listen]] = {}
        for lst in list(self._listens.values()):
            if not lst.acked or lst.replaced_by is not None:
                continue
            if not lst.wanted:
                out.append(CloseListen(lst.id))
                self._drop(lst.id)
                continue
            if lst.wanted * 2 < len(lst.uris):
                self._open(self._wanted(lst), "replace", out, (lst.id,))
                return
            same = classes.setdefault(_size_class(lst.wanted), [])
            same.append(lst)
            if len(same) == MERGE_WIDTH and sum(x.wanted for x in same) <= self.max_listen:
                uris = [uri for x in same for uri in self._wanted(x)]
                self._open(uris, "replace", out, tuple(x.id for x in same))
                return

    # -- helpers ----------------------------------------------------------------------------------

    def _stale_retry(self, when: float, uri: str) -> bool:
        entry = self._uris.get(uri)
        return entry is None or entry.retry_at != when or entry.reading or entry.queued or entry.stale

    def _listen(self, listen: int) -> _Listen:
        lst = self._listens.get(listen)
        if lst is None:
            raise FeedStateError(f"Feed: no listen {listen} is open")
        return lst

    def _reading(self, uri: str) -> _Uri[W]:
        entry = self._uris.get(uri)
        if entry is None or not entry.reading:
            raise FeedStateError(f"Feed: no read of {uri!r} is in flight")
        entry.reading = False
        self._reads -= 1
        return entry

    def _in_listen(self, uri: str) -> bool:
        return uri in self._holders

    def _wanted(self, lst: _Listen) -> list[str]:
        return [uri for uri in lst.order if uri in lst.uris and uri in self._uris]

    def _track(self, uri: str) -> _Uri[W]:
        """A newly watched URI: counted in the listens that hold it (or waiting for one)."""
        entry = self._uris[uri] = _Uri()
        holders = self._holders.get(uri)
        if holders is None:
            self._uncovered[uri] = None
        else:
            for i in holders:
                self._listens[i].wanted += 1
        return entry

    def _drop(self, listen: int) -> _Listen:
        """Forget listen ``listen`` (closed, or ended); its URIs no other listen holds are uncovered."""
        lst = self._listen(listen)
        del self._listens[listen]
        lst.uris = frozenset(lst.uris)  # what it held, as it was
        self._unhold(lst, lst.uris)
        return lst

    def _unhold(self, lst: _Listen, uris: Iterable[str]) -> None:
        """``lst`` no longer holds ``uris``."""
        gone = frozenset(uris)
        if not gone:
            return
        for uri in gone:
            holders = self._holders[uri]
            holders.remove(lst.id)
            if not holders:
                del self._holders[uri]
                if uri in self._uris:
                    self._uncovered[uri] = None
            if uri in self._uris:
                lst.wanted -= 1
        if gone is not lst.uris:
            lst.uris = lst.uris - gone

    def _listens_opening(self, purpose: _Purpose) -> bool:
        if purpose == "replace":
            return any(not lst.acked and lst.purpose == "replace" for lst in self._listens.values())
        return any(not lst.acked and lst.purpose != "replace" for lst in self._listens.values())

    def _read(self, uri: str, entry: _Uri[W], out: list[Action[W]]) -> None:
        if self._reads < self.max_reads:
            self._reads += 1
            entry.reading = True
            out.append(Read(uri))
        else:
            entry.queued = True
            self._waiting.append(uri)

    def _after_read(self, uri: str, entry: _Uri[W], out: list[Action[W]]) -> None:
        if entry.dirty and (entry.watchers or entry.joiners):
            entry.dirty = False
            self._read(uri, entry, out)
        self._release(uri, entry, out)
        while self._waiting and self._reads < self.max_reads:
            queued = self._waiting.popleft()
            waiting = self._uris.get(queued)
            if waiting is not None and waiting.queued:
                waiting.queued = False
                self._read(queued, waiting, out)

    def _release(self, uri: str, entry: _Uri[W], out: list[Action[W]]) -> None:
        """Drop ``uri`` once nobody watches it and no read of it is in flight."""
        if entry.watchers or entry.joiners or entry.reading:
            return
        if entry.queued:
            entry.queued = False  # its place in the read queue is skipped
        del self._uris[uri]
        self._uncovered.pop(uri, None)
        for i in self._holders.get(uri, ()):
            self._listens[i].wanted -= 1
        if entry.baseline:
            out.append(Forget(uri))

    def _refused(self, uris: Iterable[str], reason: str, now: float, out: list[Action[W]]) -> None:
        """The server refused ``uris``: joiners fail; watchers that had begun resubscribe."""
        began: list[str] = []
        for uri in uris:
            entry = self._uris.get(uri)
            if entry is None:
                continue
            if entry.joiners and not entry.baseline:
                out.append(StartFailed(uri, reason, tuple(entry.joiners)))
                entry.joiners.clear()
            if entry.watchers:
                began.append(uri)
            else:
                self._release(uri, entry, out)
        if began:
            self._lost(began, reason, now, out, before_ack=True)

    def _lost(
        self, uris: Iterable[str], reason: str, now: float, out: list[Action[W]], *, before_ack: bool
    ) -> None:
        """``uris`` lost their listen. Those still watched and covered by no other listen are
        stale (re-read once covered again); those no opening listen holds either go down."""
        down: list[str] = []
        for uri in uris:
            entry = self._uris.get(uri)
            if entry is None or self.covered(uri):
                continue
            if entry.joiners and not entry.baseline and before_ack:
                # A watch whose first subscription failed says so at once (its watch_start raises).
                out.append(StartFailed(uri, reason, tuple(entry.joiners)))
                entry.joiners.clear()
            if not (entry.watchers or entry.joiners):
                self._release(uri, entry, out)
                continue
            entry.stale = True
            if not self._in_listen(uri):
                entry.down = True
                down.append(uri)
        if not down:
            return
        if self._retry is None or self._retry_at is None:
            decision = self.policy.ended(now)
            if isinstance(decision, GiveUp):
                self._give_up(decision.attempts, reason, out)
                return
            self._retry, self._retry_at = decision, now + decision.delay
        watchers = tuple(w for uri in down for w in self._uris[uri].watchers)
        if watchers:
            out.append(Down(watchers, self._retry, reason))

    def _give_up(self, attempts: int, reason: str, out: list[Action[W]]) -> None:
        down = [(uri, entry) for uri, entry in self._uris.items() if entry.down]
        gone = tuple(w for _, entry in down for w in entry.watchers)
        if gone:
            out.append(GaveUp(gone, attempts, reason))
        for uri, entry in down:
            if entry.joiners:
                out.append(StartFailed(uri, reason, tuple(entry.joiners)))
            entry.watchers.clear()
            entry.joiners.clear()
            self._release(uri, entry, out)
        self.policy.reset()
        self._retry = self._retry_at = None

    def __repr__(self) -> str:
        return f"<Feed {self.mode} uris={len(self._uris)} listens={len(self._listens)} reads={self._reads}>"


def _size_class(size: int) -> int:
    """floor(log_MERGE_WIDTH(size)), exactly (no float rounding at powers of the width)."""
    n = 0
    while size >= MERGE_WIDTH:
        size //= MERGE_WIDTH
        n += 1
    return n
