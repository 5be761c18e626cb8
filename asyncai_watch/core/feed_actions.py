"""What a :class:`~asyncai_watch.core.feed.Feed` answers: the actions its runner carries out, in order.

A closed set: :data:`Action` is their union, and the runner (:mod:`asyncai_watch.runtime.runner`)
dispatches over it with ``match`` ending in :func:`typing.assert_never`, so a new action the runner
does not handle is a type error, not an action dropped in silence.
"""

from __future__ import annotations

from typing import Generic, TypeAlias, TypeVar

import attrs

from asyncai_watch.core.resubscribe import Retry

__all__ = [
    "Action",
    "Begin",
    "CloseListen",
    "Deliver",
    "Down",
    "Forget",
    "GaveUp",
    "OpenListen",
    "Read",
    "ReadFailed",
    "StartFailed",
    "Up",
]

W = TypeVar("W")
P = TypeVar("P")


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
class Deliver(Generic[W, P]):
    """The read of ``uri`` just done goes to ``watchers`` (each already began on the URI);
    ``payload`` is what the runner handed :meth:`Feed.read_done` with it (the read's events)."""

    uri: str
    watchers: tuple[W, ...]
    payload: P | None = None


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


ListenAction: TypeAlias = OpenListen | CloseListen
"""What the listen coverage machine (:mod:`asyncai_watch.core.coverage`) answers."""

Action: TypeAlias = (
    OpenListen
    | CloseListen
    | Read
    | Begin[W]
    | Deliver[W, P]
    | ReadFailed[W]
    | StartFailed[W]
    | Forget
    | Up[W]
    | Down[W]
    | GaveUp[W]
)
