"""The pull side of ``serve``: every notice kept in a bounded ring with increasing ids.

Pure. A host may drop a channel push without a word, so each notice is also put here, and
``watch_notices(after_id)`` returns what a caller has not seen. Ids start at 1 and never
repeat within one server process. When the ring overflows, the oldest notices go, and a
caller whose ``after_id`` is older than what is left gets a :class:`Gap` saying how many
it lost and which ids: nothing produced is lost without being reported.
"""

from __future__ import annotations

from collections import deque

import attrs

from asyncai_watch.core.notice import Notice

__all__ = ["Catchup", "Entry", "Gap", "NoticeRing"]


@attrs.frozen(kw_only=True)
class Entry:
    """One notice with its id and when it was made (ISO 8601, UTC)."""

    id: int
    notice: Notice
    time: str


@attrs.frozen(kw_only=True)
class Gap:
    """Notices ``first_id..last_id`` (``lost`` of them) left the ring before the caller read them."""

    lost: int
    first_id: int
    last_id: int


@attrs.frozen(kw_only=True)
class Catchup:
    """The answer to ``since(after_id)``."""

    entries: tuple[Entry, ...]
    gap: Gap | None
    last_id: int
    """The newest id made so far (0 before the first notice)."""
    more: bool
    """``limit`` cut the answer: ask again with ``after_id=next_after``."""
    restarted: bool
    """``after_id`` was newer than anything made here: the server restarted (ids begin at 1
    again), so the answer starts from the oldest notice kept."""

    @property
    def next_after(self) -> int:
        """What to pass as ``after_id`` next time."""
        return self.entries[-1].id if self.entries else self.last_id


class NoticeRing:
    """At most ``size`` notices, oldest dropped first; see the module docstring."""

    def __init__(self, size: int) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"the notice ring size must be an int >= 1, got {size!r}")
        self.size = size
        self._entries: deque[Entry] = deque(maxlen=size)
        self._last_id = 0

    @property
    def last_id(self) -> int:
        return self._last_id

    def add(self, notice: Notice, time: str) -> Entry:
        self._last_id += 1
        entry = Entry(id=self._last_id, notice=notice, time=time)
        self._entries.append(entry)  # the deque's maxlen drops the oldest
        return entry

    def since(self, after_id: int, limit: int) -> Catchup:
        """Entries with ``id > after_id``, at most ``limit``, and the gap before them if any."""
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        restarted = after_id > self._last_id
        if after_id < 0 or restarted:
            after_id = 0
        oldest = self._entries[0].id if self._entries else self._last_id + 1
        gap = None
        if oldest > after_id + 1:
            gap = Gap(lost=oldest - after_id - 1, first_id=after_id + 1, last_id=oldest - 1)
        # Ids are consecutive in the ring, so the first wanted one is found by arithmetic.
        start = max(after_id + 1 - oldest, 0)
        stop = min(start + limit, len(self._entries))
        entries = tuple(self._entries[i] for i in range(start, stop))
        return Catchup(
            entries=entries,
            gap=gap,
            last_id=self._last_id,
            more=stop < len(self._entries),
            restarted=restarted,
        )
