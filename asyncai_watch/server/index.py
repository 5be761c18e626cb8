"""Who listens to which URI: the pure core of a server's subscriptions.

:class:`SubscriptionIndex` maps each URI to the listeners subscribed to it and each
listener to its URIs. It does no I/O and keeps no clock: the shell
(:class:`asyncai_watch.server.SubscriptionRegistry`) calls it and acts on what it
returns. Finding the listeners of a change costs O(listeners of that URI), whatever
else is subscribed; subscribing or leaving costs O(URIs named).

A listener is any hashable object (an open listen stream, a 2025-era session). It may
hold any number of URIs, added all at once (a ``subscriptions/listen`` request) or one
by one (``resources/subscribe``), and it may also ask for the list-changed kinds.
:meth:`SubscriptionIndex.add` answers the URIs that gained their *first* listener and
:meth:`SubscriptionIndex.remove` / :meth:`SubscriptionIndex.discard` the ones that lost
their *last*, so a server starts and stops its change sources (an inotify watch, a
Kubernetes watch) exactly once per URI in use.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Final, Generic, Literal, TypeVar, get_args

__all__ = ["LIST_KINDS", "ListKind", "SubscriptionIndex"]

L = TypeVar("L")  # any hashable object

ListKind = Literal["tools", "prompts", "resources"]
"""A list-changed kind a listener may ask for (``toolsListChanged`` and so on)."""

LIST_KINDS: Final[tuple[ListKind, ...]] = get_args(ListKind)


class _Group(set[L]):
    """Two or more listeners of one URI (one listener is stored bare: the common case costs no set)."""

    __slots__ = ()


class SubscriptionIndex(Generic[L]):
    """URI -> listeners and listener -> URIs, kept in step. Not thread-safe; no I/O.

    Each call is order-checked: adding a URI a listener already holds, or removing one
    it does not, changes nothing and reports nothing, so a caller may repeat itself.
    """

    def __init__(self) -> None:
        # uri -> its one listener, or a _Group of them. A bare listener saves a set per URI:
        # with 100,000 URIs in one listen that is most of the memory (bench/subscriptions.py).
        self._by_uri: dict[str, L | _Group[L]] = {}
        self._uris: dict[L, set[str]] = {}
        self._kinds: dict[ListKind, set[L]] = {kind: set() for kind in LIST_KINDS}

    # -- changes -------------------------------------------------------------------------------

    def add(self, listener: L, uris: Iterable[str], kinds: Iterable[ListKind] = ()) -> list[str]:
        """Subscribe ``listener`` to ``uris`` (and the list-changed ``kinds``).

        Returns the URIs that had no listener before, in the order given, each once.
        """
        held = self._uris.setdefault(listener, set())
        for kind in kinds:
            self._kinds[kind].add(listener)
        firsts: list[str] = []
        by_uri = self._by_uri
        for uri in uris:
            if uri in held:
                continue
            held.add(uri)
            current = by_uri.get(uri)
            if current is None:
                by_uri[uri] = listener
                firsts.append(uri)
            elif isinstance(current, _Group):
                current.add(listener)
            else:
                by_uri[uri] = _Group((current, listener))
        return firsts

    def discard(self, listener: L, uris: Iterable[str]) -> list[str]:
        """Unsubscribe ``listener`` from ``uris``; returns those that lost their last listener."""
        held = self._uris.get(listener)
        if held is None:
            return []
        lasts: list[str] = []
        for uri in uris:
            if uri not in held:
                continue
            held.discard(uri)
            if self._drop(uri, listener):
                lasts.append(uri)
        return lasts

    def remove(self, listener: L) -> list[str]:
        """Forget ``listener`` entirely; returns the URIs that lost their last listener."""
        held = self._uris.pop(listener, None)
        for members in self._kinds.values():
            members.discard(listener)
        if held is None:
            return []
        return [uri for uri in held if self._drop(uri, listener)]

    def _drop(self, uri: str, listener: L) -> bool:
        current = self._by_uri.get(uri)
        if isinstance(current, _Group):
            current.discard(listener)
            if len(current) == 1:
                (self._by_uri[uri],) = current
            return False
        if current == listener:
            del self._by_uri[uri]
            return True
        return False

    # -- questions -----------------------------------------------------------------------------

    def listeners(self, uri: str) -> list[L]:
        """The listeners of ``uri`` (a snapshot: safe to change the index while using it)."""
        current = self._by_uri.get(uri)
        if current is None:
            return []
        if isinstance(current, _Group):
            return list(current)
        return [current]

    def listeners_of_kind(self, kind: ListKind) -> list[L]:
        """The listeners that asked for ``kind`` list changes (a snapshot)."""
        return list(self._kinds[kind])

    def uris(self, listener: L) -> Collection[str]:
        """The URIs ``listener`` holds (empty for a listener the index does not know)."""
        return frozenset(self._uris.get(listener, ()))

    def holds(self, listener: L, uri: str) -> bool:
        """Whether ``listener`` holds ``uri``."""
        return uri in self._uris.get(listener, ())

    def count(self, listener: L) -> int:
        """How many URIs ``listener`` holds."""
        return len(self._uris.get(listener, ()))

    def listened(self, uri: str) -> bool:
        """Whether ``uri`` has at least one listener."""
        return uri in self._by_uri

    def __contains__(self, listener: object) -> bool:
        return listener in self._uris

    @property
    def uri_count(self) -> int:
        """Distinct URIs with at least one listener."""
        return len(self._by_uri)

    @property
    def listener_count(self) -> int:
        return len(self._uris)

    @property
    def subscription_count(self) -> int:
        """(listener, URI) pairs: what the memory grows with."""
        return sum(len(uris) for uris in self._uris.values())
