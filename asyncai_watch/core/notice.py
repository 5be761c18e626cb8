"""What a background source hands the agent: a Notice."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Final, overload

import attrs

__all__ = [
    "FAILED",
    "NOTE",
    "SOURCE_CHANNEL",
    "SOURCE_RESTORE",
    "SOURCE_WATCH",
    "Notice",
    "NoticeEvent",
    "NoticeEvents",
]

SOURCE_WATCH: Final = "watch"
"""A watch's batched lines; ``meta`` has ``name`` and ``uri``."""
SOURCE_RESTORE: Final = "watch.restore"
"""The one notice listing watches restored from ``--watch-state``."""
SOURCE_CHANNEL: Final = "channel"
"""A ``notifications/claude/channel`` doorbell; ``meta`` has ``server`` plus the doorbell's meta."""

FAILED: Final = "FAILED"
"""The type of a failure notice's event: the watch gave up and delivers nothing more."""
NOTE: Final = "NOTE"
"""The type of an event that is only a line (``+N more changes not shown``, a slow filter's count)."""


@attrs.frozen(kw_only=True)
class NoticeEvent:
    """One event of a notice, typed, for programs (docs/core.md, "The events of a notice").

    ``type`` is ``ADDED``, ``DELETED``, ``MODIFIED``, ``CHANGED`` (a text state replaced whole),
    ``GAP`` (an event log skipped seqs), ``ERROR`` (a bad read, a filter's error), ``FAILED`` (the
    watch gave up) or ``NOTE`` (a line only). ``old`` and ``new`` are the values before and after
    (``None`` where a side does not exist); ``paths`` the changed paths of a ``MODIFIED``
    (dotted, as in its line); ``seq`` an event log's; ``time`` the server's timestamp where the
    event carries one (``time``, ``timestamp``, ``at`` or ``received``), as given; ``message``
    the text of a ``GAP`` / ``ERROR`` / ``FAILED`` / ``NOTE``; ``fields`` an event-log event's
    other fields verbatim (a ``GAP``'s ``missed``, ``from_seq``, ``to_seq``, ``reason``; a
    ``FAILED``'s ``attempts``); ``line`` the line of the notice's text it stands for (the text
    may show it as ``line ×N``, or count it in ``+N more`` past the line cap).
    """

    type: str
    watch: str
    uri: str
    key: str | None = None
    paths: tuple[str, ...] = ()
    old: Any = None
    new: Any = None
    seq: int | None = None
    time: str | int | float | None = None
    message: str | None = None
    fields: Mapping[str, Any] = attrs.field(factory=dict, hash=False)
    line: str | None = None


class NoticeEvents(Sequence[NoticeEvent]):
    """A notice's events, made on first use: most readers (a model's turn) take only the text,
    and a burst's hot path should not pay for values nobody reads. Equal to the tuple of them;
    pickles as that tuple."""

    __slots__ = ("_made", "_make")

    def __init__(self, make: Callable[[], tuple[NoticeEvent, ...]]) -> None:
        self._make: Callable[[], tuple[NoticeEvent, ...]] | None = make
        self._made: tuple[NoticeEvent, ...] = ()

    def _all(self) -> tuple[NoticeEvent, ...]:
        make = self._make
        if make is not None:
            self._made, self._make = make(), None
        return self._made

    @overload
    def __getitem__(self, index: int) -> NoticeEvent: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[NoticeEvent]: ...
    def __getitem__(self, index: int | slice) -> NoticeEvent | Sequence[NoticeEvent]:
        return self._all()[index]

    def __len__(self) -> int:
        return len(self._all())

    def __iter__(self) -> Iterator[NoticeEvent]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, NoticeEvents):
            other = other._all()
        return self._all() == other

    def __hash__(self) -> int:
        return hash(self._all())

    def __repr__(self) -> str:
        return repr(self._all())

    def __reduce__(self) -> tuple[type[tuple[NoticeEvent, ...]], tuple[tuple[NoticeEvent, ...]]]:
        return (tuple, (self._all(),))


@attrs.frozen
class Notice:
    """A message for the agent from outside the conversation.

    The manager only produces these; it never calls the model. The agent's
    orchestrator renders them (e.g. as ``<watch-event>``) and runs a turn.
    """

    WATCH: ClassVar[str] = SOURCE_WATCH
    RESTORE: ClassVar[str] = SOURCE_RESTORE
    CHANNEL: ClassVar[str] = SOURCE_CHANNEL

    source: str
    """Who sent it: :attr:`WATCH`, :attr:`RESTORE` or :attr:`CHANNEL` (a doorbell), which decides
    how :func:`~asyncai_watch.render_notice` frames it."""
    text: str
    meta: Mapping[str, str] = attrs.field(factory=dict, hash=False, kw_only=True)
    events: Sequence[NoticeEvent] = attrs.field(default=(), hash=False, kw_only=True)
    """Its events, typed (a watch's notice; ``()`` for the others): what :attr:`text` says, for
    a program. After a debounce window each object's events are its net change
    (:mod:`asyncai_watch.core.netchange`)."""
