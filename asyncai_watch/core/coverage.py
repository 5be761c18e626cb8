"""Listen coverage for one connection: a pure sub-machine of :class:`~asyncai_watch.core.feed.Feed`.

Which listens are open, which URIs each holds, and which watched URIs no listen holds. Each
listen is in one of three named states, moved only by :data:`MOVES`::

    OPENING ──send──► SENT ──ack──► ACKED        (end, or close once ACKED: it is gone)

An OPENING listen is not sent yet: URIs that need covering join it, so a burst of starts shares
one listen. A URI is *covered* once an ACKED listen holds it, *held* while any listen does.

**Grouping** (mode ``"listen"``, MCP 2026-07-28, where one ``subscriptions/listen`` carries any
number of URIs). URIs that need covering go into one new listen, joins that come before the
runner sends it go into it too, and joins that come while it is being acknowledged wait and go
into the next one together, so a burst of ``watch_start`` costs a couple of listens.
Acknowledged listens are then merged like a counter in base :data:`MERGE_WIDTH` (4): four
listens of the same size class (``floor(log4(size))``) are replaced by one holding them all,
opened and acknowledged *before* the four are closed, so no change falls between. Each URI is
re-sent about ``log4(N)`` times over N sequential starts (one listen re-sent whole per start
would cost N²), and a connection holds at most 3 listens per size class (measurements:
docs/benchmarks.md). A listen left holding mostly URIs nobody watches any more is replaced by
one of the rest (or closed when empty). A server that refuses a merged listen caps the listen
size for this connection; a refused listen of joiners is split in halves until the refused URI
is alone. Mode ``"subscribe"`` (the legacy era, ``resources/subscribe``) keeps one "listen" per
URI, opened when the URI is first watched and closed when its last watcher leaves.

An impossible input (an ack for a listen never sent, sending one twice, watching a URI twice)
raises :class:`~asyncai_watch.core.feed_state.FeedStateError`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Final, Literal

import attrs

from asyncai_watch.core.feed_actions import CloseListen, ListenAction, OpenListen
from asyncai_watch.core.feed_state import FeedStateError, by_event

__all__ = [
    "DEFAULT_MAX_LISTEN",
    "MERGE_WIDTH",
    "MOVES",
    "Coverage",
    "Ended",
    "ListenState",
    "Mode",
    "Purpose",
]

Mode = Literal["listen", "subscribe"]
"""``"listen"``: many URIs per ``subscriptions/listen`` (MCP 2026-07-28); ``"subscribe"``: one
``resources/subscribe`` per URI (the legacy era)."""

Purpose = Literal["cover", "retry", "replace"]
"""Why a listen was opened: new URIs, a resubscribe attempt, or merging/shrinking acknowledged ones."""

DEFAULT_MAX_LISTEN: Final = 100_000
"""The most URIs the feed puts into one listen (a server that refuses fewer lowers it)."""

MERGE_WIDTH: Final = 4
"""How many acknowledged listens of one size class are merged into one (see the module doc)."""
_WIDTH_BITS: Final = MERGE_WIDTH.bit_length() - 1  # MERGE_WIDTH is a power of two: 2**_WIDTH_BITS
assert 1 << _WIDTH_BITS == MERGE_WIDTH


class ListenState(enum.Enum):
    __hash__ = object.__hash__  # members are singletons; the table lookups skip Enum.__hash__ (Python code)
    OPENING = "opening"  # opened, not sent: URIs may still join it
    SENT = "sent"  # sent, its URIs fixed; waiting for the ack
    ACKED = "acked"


# Module constants: an enum member looked up on its class costs ~10x a global on Python 3.11.
_OPENING: Final = ListenState.OPENING
_SENT: Final = ListenState.SENT
_ACKED: Final = ListenState.ACKED


MOVES: Final[dict[tuple[ListenState, str], ListenState]] = {
    (_OPENING, "send"): _SENT,
    (_SENT, "ack"): _ACKED,
}
"""The legal moves of a listen: ``(state, event) -> state``; ending (any state) and closing
(ACKED) remove it."""
_ON: Final = by_event(MOVES)


@attrs.define(eq=False, slots=True)
class _Listen:
    id: int
    uris: frozenset[str] | set[str]  # a set while OPENING (watches join it), then frozen
    purpose: Purpose
    order: list[str] = attrs.field(factory=list)  # the URIs in the order they came (reads go in that order)
    replaces: tuple[int, ...] = ()  # listens closed once this one is acknowledged
    state: ListenState = _OPENING
    wanted: int = 0  # how many of its URIs are watched
    replaced_by: int | None = None  # an opening listen that will take this one's place


@attrs.frozen
class Acked:
    """What an ack changed: ``newly`` covered watched URIs (in order), ``refused`` URIs the server
    did not take, the listens it replaces (closed now) and why it was opened."""

    newly: list[str]
    refused: frozenset[str]
    closes: list[ListenAction]
    purpose: Purpose


@attrs.frozen
class Ended:
    """What a listen's end means. ``kind``: ``"split"`` (a refused listen of several URIs was
    reopened as two halves: ``opens``), ``"refused"`` (the server refused ``uris`` before the ack),
    or ``"lost"`` (``uris`` lost their listen; ``before_ack``: it was never acknowledged)."""

    kind: Literal["split", "refused", "lost"]
    uris: frozenset[str]
    before_ack: bool = False
    opens: list[ListenAction] = attrs.field(factory=list)


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


class Coverage:
    """Listens, the URIs they hold, and the watched URIs none holds (see the module doc)."""

    def __init__(self, *, mode: Mode, max_listen: int) -> None:
        if mode not in ("listen", "subscribe"):
            raise ValueError(f"Feed: mode must be 'listen' or 'subscribe', got {mode!r}")
        if type(max_listen) is not int or max_listen < 1:
            raise ValueError(f"Feed: max_listen must be an int >= 1, got {max_listen!r}")
        self.mode: Mode = mode
        self.max_listen = max_listen
        self._listens: dict[int, _Listen] = {}
        self._watched: set[str] = set()
        # Indexes, so that nothing per URI costs more than the listens holding it:
        self._holders: dict[str, list[int]] = {}  # URI -> listens open or opening that hold it
        self._uncovered: dict[str, None] = {}  # watched URIs no listen holds (an ordered set)
        self._unacked = {True: 0, False: 0}  # listens not acknowledged yet, by "purpose is replace"
        self._ids = 0

    # -- questions ----------------------------------------------------------------------------------

    @property
    def count(self) -> int:
        """Listens open or opening."""
        return len(self._listens)

    def covered(self, uri: str) -> bool:
        """Whether an acknowledged listen holds ``uri``."""
        listens = self._listens
        for i in self._holders.get(uri, ()):  # noqa: SIM110 (a loop, not any(): this runs for every read)
            if listens[i].state is _ACKED:
                return True
        return False

    def held(self, uri: str) -> bool:
        """Whether any listen (opening, sent or acknowledged) holds ``uri``."""
        return uri in self._holders

    def uris(self, listen: int) -> frozenset[str]:
        return frozenset(self._listen(listen).uris)

    # -- inputs -------------------------------------------------------------------------------------

    def speaks(self, mode: Mode) -> None:
        """The connection now takes URIs this way (a reconnect may come back speaking another
        version): listens opened from here on are grouped accordingly."""
        if mode not in ("listen", "subscribe"):
            raise ValueError(f"Feed: mode must be 'listen' or 'subscribe', got {mode!r}")
        self.mode = mode

    def watch(self, uri: str) -> None:
        """``uri`` is watched: counted in the listens that hold it (or waiting for one)."""
        if uri in self._watched:
            raise FeedStateError(f"Coverage.watch: {uri!r} is already watched")
        self._watched.add(uri)
        holders = self._holders.get(uri)
        if holders is None:
            self._uncovered[uri] = None
        else:
            for i in holders:
                self._listens[i].wanted += 1

    def unwatch(self, uri: str) -> None:
        if uri not in self._watched:
            raise FeedStateError(f"Coverage.unwatch: {uri!r} is not watched")
        self._watched.discard(uri)
        self._uncovered.pop(uri, None)
        for i in self._holders.get(uri, ()):
            self._listens[i].wanted -= 1

    def cover(self, purpose: Purpose) -> list[ListenAction]:
        """Open listens for the watched URIs no listen holds. In mode ``"listen"`` they join a
        listen not sent yet, or (``purpose="cover"``) wait while another is being acknowledged."""
        if not self._uncovered:
            return []
        uncovered = list(self._uncovered)
        if self.mode == "listen":
            unsent = next(
                (lst for lst in self._listens.values() if lst.purpose != "replace" and lst.state is _OPENING),
                None,
            )
            if unsent is not None:
                self._hold(unsent, uncovered)  # not sent yet: these go into it
                return []
            if purpose == "cover" and self._opening("cover"):
                return []  # they go into the next one, once this one is acknowledged
        out: list[ListenAction] = []
        size = 1 if self.mode == "subscribe" else self.max_listen
        for start in range(0, len(uncovered), size):
            out.append(self._open(uncovered[start : start + size], purpose))
        return out

    def send(self, listen: int) -> frozenset[str]:
        """The runner sends ``listen`` now: its URIs, fixed from here on."""
        lst = self._listen(listen)
        if lst.state is not _OPENING:
            raise FeedStateError(f"Feed.send: listen {listen} was already sent")
        lst.state = _ON["send"][lst.state]  # OPENING, checked above
        lst.uris = frozenset(lst.uris)
        return lst.uris

    def ack(self, listen: int, honored: Iterable[str] | None) -> Acked:
        """``listen`` was acknowledged; ``honored`` is what the server took (``None``: all)."""
        lst = self._listen(listen)
        if lst.state is _OPENING:
            raise FeedStateError(f"Feed.acked: listen {listen} was never sent")
        if lst.state is _ACKED:
            raise FeedStateError(f"Feed.acked: listen {listen} was already acknowledged")
        refused = lst.uris - frozenset(honored) if honored is not None else frozenset()
        self._unhold(lst, refused)
        newly = [
            uri for uri in lst.order if uri in lst.uris and uri in self._watched and not self.covered(uri)
        ]
        lst.state = _ON["ack"][lst.state]  # SENT, checked above
        self._unacked[lst.purpose == "replace"] -= 1
        closes: list[ListenAction] = []
        for old in lst.replaces:
            if old in self._listens:  # not ended meanwhile
                closes.append(CloseListen(old))
                self._drop(old)
        return Acked(newly, frozenset(refused), closes, lst.purpose)

    def end(self, listen: int, *, refused: bool) -> Ended:
        """``listen`` ended: closed by the server, lost, or failed before its ack (``refused``: the
        server answered it with an error)."""
        lst = self._drop(listen)
        for other in self._listens.values():
            if other.replaced_by == listen:
                other.replaced_by = None
        uris = frozenset(lst.uris)
        acked = lst.state is _ACKED
        if lst.purpose == "replace" and not acked:
            # The listens it was to replace cover its URIs, unless they ended meanwhile.
            if refused and len(uris) > 1:
                self.max_listen = min(self.max_listen, len(uris) - 1)
            return Ended("lost", uris, before_ack=False)
        if not acked and refused and len(uris) > 1:
            # Which URI the server refused is unknown: halves, until it is alone.
            order = [uri for uri in lst.order if uri in uris]
            half = len(order) // 2
            return Ended(
                "split", uris, opens=[self._open(part, lst.purpose) for part in (order[:half], order[half:])]
            )
        if not acked and refused:
            return Ended("refused", uris)
        return Ended("lost", uris, before_ack=not acked)

    def compact(self) -> list[ListenAction]:
        """Merge MERGE_WIDTH same-size listens into one, shrink or close mostly unwatched ones."""
        out: list[ListenAction] = []
        if self.mode == "subscribe":
            for lst in list(self._listens.values()):
                if lst.state is _ACKED and not lst.wanted:
                    out.append(CloseListen(lst.id))
                    self._drop(lst.id)
            return out
        if self._opening("replace"):
            return out  # one replacement at a time: the next is decided once it is acknowledged
        # This runs after every leave and ack, hence the locals.
        classes: dict[int, list[_Listen]] = {}
        acked = _ACKED
        for lst in list(self._listens.values()):
            if lst.state is not acked or lst.replaced_by is not None:
                continue
            wanted = lst.wanted
            if not wanted:
                out.append(CloseListen(lst.id))
                self._drop(lst.id)
                continue
            if wanted * 2 < len(lst.uris):
                out.append(self._open(self._wanted(lst), "replace", (lst.id,)))
                return out
            size = (wanted.bit_length() - 1) // _WIDTH_BITS  # floor(log4(wanted)), exact (no float)
            same = classes.get(size)
            if same is None:
                classes[size] = [lst]  # one alone: MERGE_WIDTH > 1
                continue
            same.append(lst)
            if len(same) == MERGE_WIDTH and sum(x.wanted for x in same) <= self.max_listen:
                uris = [uri for x in same for uri in self._wanted(x)]
                out.append(self._open(uris, "replace", tuple(x.id for x in same)))
                return out
        return out

    # -- helpers ------------------------------------------------------------------------------------

    def _listen(self, listen: int) -> _Listen:
        lst = self._listens.get(listen)
        if lst is None:
            raise FeedStateError(f"Feed: no listen {listen} is open")
        return lst

    def _open(self, uris: list[str], purpose: Purpose, replaces: tuple[int, ...] = ()) -> OpenListen:
        self._ids += 1
        listen = _Listen(self._ids, set(), purpose, replaces=replaces)
        self._listens[self._ids] = listen
        self._unacked[purpose == "replace"] += 1
        self._hold(listen, uris)
        for old in replaces:
            self._listens[old].replaced_by = self._ids
        return OpenListen(self._ids, frozenset(listen.uris))

    def _hold(self, listen: _Listen, uris: list[str]) -> None:
        """``listen`` (OPENING) holds ``uris`` too."""
        held = listen.uris
        assert isinstance(held, set)  # only a listen not sent yet grows
        new = [uri for uri in uris if uri not in held]
        held.update(new)
        listen.order.extend(new)
        for uri in new:
            self._holders.setdefault(uri, []).append(listen.id)
            if uri in self._watched:
                listen.wanted += 1
                self._uncovered.pop(uri, None)

    def _drop(self, listen: int) -> _Listen:
        """Forget ``listen`` (closed, or ended); its URIs no other listen holds are uncovered."""
        lst = self._listen(listen)
        del self._listens[listen]
        if lst.state is not _ACKED:
            self._unacked[lst.purpose == "replace"] -= 1
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
                if uri in self._watched:
                    self._uncovered[uri] = None
            if uri in self._watched:
                lst.wanted -= 1
        if gone is not lst.uris:
            lst.uris = lst.uris - gone

    def _opening(self, purpose: Purpose) -> bool:
        """A listen for ``purpose`` (``"replace"``, or else cover/retry) is not acknowledged yet."""
        return self._unacked[purpose == "replace"] > 0

    def _wanted(self, lst: _Listen) -> list[str]:
        return [uri for uri in lst.order if uri in lst.uris and uri in self._watched]

    def __repr__(self) -> str:
        return f"<Coverage {self.mode} listens={len(self._listens)} watched={len(self._watched)}>"
