"""Named states moved by a table of legal moves, h11-style, for the feed's sub-machines.

Each party keeps one state from a small enum; :func:`move` looks up ``(state, event)`` in the
party's table and answers the next state. A pair the table lacks is an input that makes no sense
in that state: :class:`FeedStateError` at once, a bug in the code driving the machine, never a
server's fault.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TypeVar

__all__ = ["FeedStateError", "by_event", "illegal", "move"]

S = TypeVar("S", bound=enum.Enum)


class FeedStateError(RuntimeError):
    """An input that makes no sense in the feed's state: a bug in the code driving it."""


def move(table: Mapping[tuple[S, str], S], state: S, event: str, what: str, subject: object) -> S:
    """The state after ``event`` in ``state``; :class:`FeedStateError` (naming ``what`` of
    ``subject`` and the events that state accepts) when the table has no such move. (The message is
    built only then: this runs for every read and listen.)"""
    nxt = table.get((state, event))
    if nxt is None:
        raise illegal(table, state, event, what, subject)
    return nxt


def illegal(
    table: Mapping[tuple[S, str], S], state: S, event: str, what: str, subject: object
) -> FeedStateError:
    """The error for ``event`` in ``state``, which ``table`` lacks: it names the events the state accepts."""
    legal = sorted(e for (s, e) in table if s is state)
    return FeedStateError(
        f"{what}({subject!r}): {event!r} is not possible in state {state.name}"
        f" (it accepts {', '.join(map(repr, legal)) if legal else 'nothing'})"
    )


def by_event(table: Mapping[tuple[S, str], S]) -> dict[str, dict[S, S]]:
    """``table`` indexed by event, for the hot paths: ``by_event(t)[event].get(state)`` is the
    move (``None``: :func:`illegal`), one dict lookup with no call."""
    out: dict[str, dict[S, S]] = {}
    for (state, event), nxt in table.items():
        out.setdefault(event, {})[state] = nxt
    return out
