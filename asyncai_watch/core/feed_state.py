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

__all__ = ["FeedStateError", "move"]

S = TypeVar("S", bound=enum.Enum)


class FeedStateError(RuntimeError):
    """An input that makes no sense in the feed's state: a bug in the code driving it."""


def move(table: Mapping[tuple[S, str], S], state: S, event: str, what: str, subject: object) -> S:
    """The state after ``event`` in ``state``; :class:`FeedStateError` (naming ``what`` of
    ``subject`` and the events that state accepts) when the table has no such move. (The message is
    built only then: this runs for every read and listen.)"""
    nxt = table.get((state, event))
    if nxt is None:
        legal = sorted(e for (s, e) in table if s is state)
        raise FeedStateError(
            f"{what}({subject!r}): {event!r} is not possible in state {state.name}"
            f" (it accepts {', '.join(map(repr, legal)) if legal else 'nothing'})"
        )
    return nxt
