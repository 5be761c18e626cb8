"""The bounded event ring an event-log server keeps (docs/design.md, "Event logs and GAP").

Reads are stateless: any number of readers share one ring and each keeps its
own last-seen ``seq``. The body also carries ``last_seq``, the newest seq ever
appended, so a reader whose baseline found the ring empty knows where it stands,
and ``log_id``, new for every ring, so a reader notices a restarted log even when
its seqs have already run past the reader's last one. A reader that fell more
than the events a read returns behind sees the oldest ``seq`` jump past its last
seen + 1 and reports a GAP.

Each event is serialized once, when it is appended (msgspec), and a read joins
those texts: a read costs a copy of the bytes it returns, not a re-encode of
every event, however often it is read. The ring holds up to ``capacity`` events
and, optionally, ``max_chars`` characters of that text (bytes for ASCII; the
oldest events go first, the newest is always kept), so a ring sized for many
small events cannot hold hundreds of megabytes when the objects are large.

A reader may name its position in the read (``_meta`` key :data:`AFTER_META_KEY`,
``{"log_id": ..., "seq": last seen}``): the body then holds every event after it
that the ring still has, so a read costs what is new to that reader, and a reader
that fell behind can catch up from the whole ``capacity``. A read without a
position (or naming another ``log_id``: the log restarted) gets the newest
``window`` events (default: all): what a reader that re-reads on every
notification needs, at a bounded cost per read however deep the ring is.
"""

from __future__ import annotations

import itertools
import json
import secrets
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any, Final

from asyncai_watch.core.jsontext import compact_json

__all__ = ["AFTER_META_KEY", "DEFAULT_RING_CAPACITY", "EventRing", "dumps", "read_after"]

DEFAULT_RING_CAPACITY = 256

AFTER_META_KEY: Final = "asyncai-watch/events-after"
"""``resources/read`` ``_meta`` key of a reader's position: ``{"log_id": str, "seq": int}``."""


def read_after(meta: Mapping[str, Any] | None) -> tuple[str, int] | None:
    """The ``(log_id, seq)`` a read's ``_meta`` names under :data:`AFTER_META_KEY`, else None.

    Anything malformed is ignored (the read then returns the whole ring, which is always correct).
    """
    if not meta:
        return None
    after = meta.get(AFTER_META_KEY)
    if not isinstance(after, Mapping):
        return None
    log_id, seq = after.get("log_id"), after.get("seq")
    if type(log_id) is not str or type(seq) is not int:
        return None
    return log_id, seq


def dumps(value: Any) -> str:
    """Compact JSON text with non-ASCII kept as is: the library's one encoder (msgspec, about ten
    times faster than :mod:`json`; keys that are not strings are stringified)."""
    return compact_json(value)


class EventRing:
    """The last ``capacity`` events of one log, each with its ``seq``, read by any number of
    readers (this module's docstring tells the body a read returns)."""

    def __init__(
        self,
        capacity: int = DEFAULT_RING_CAPACITY,
        *,
        start_seq: int = 0,
        max_chars: int | None = None,
        window: int | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"EventRing capacity must be >= 1, got {capacity}")
        if max_chars is not None and max_chars < 1:
            raise ValueError(f"EventRing max_chars must be >= 1 or None, got {max_chars}")
        if window is not None and window < 1:
            raise ValueError(f"EventRing window must be >= 1 or None, got {window}")
        self.capacity = capacity
        self.max_chars = max_chars
        self.window = window
        # Each event as its JSON text (what a read sends), and the running total of their lengths.
        self._texts: deque[str] = deque()
        self._size = 0
        # start_seq lets a restarted source keep seq monotonic for readers that remember the last one.
        self._seq = start_seq
        # A new ring is a new log: readers that see another log_id behind the same URI know the
        # log started over (a restart) and report a GAP instead of trusting the seqs.
        self.log_id = secrets.token_hex(8)

    @property
    def last_seq(self) -> int:
        """The seq of the newest event, 0 when none was appended."""
        return self._seq

    def __len__(self) -> int:
        return len(self._texts)

    def append(self, event: Mapping[str, Any]) -> int:
        """Store ``event`` with the next seq (monotonic, never reused) and return that seq."""
        self._seq += 1
        if "seq" in event or not event:
            text = dumps({"seq": self._seq, **{k: v for k, v in event.items() if k != "seq"}})
        else:  # seq first, as above, without copying the event: '{"seq":N,' + '"type":...}'
            text = f'{{"seq":{self._seq},{dumps(event)[1:]}'
        texts = self._texts
        texts.append(text)
        self._size += len(text)
        while len(texts) > self.capacity or (
            self.max_chars is not None and self._size > self.max_chars and len(texts) > 1
        ):
            self._size -= len(texts.popleft())
        return self._seq

    def error(self, message: str) -> int:
        """Record an in-band source failure: ``{"seq": n, "type": "ERROR", "message": ...}``."""
        return self.append({"type": "ERROR", "message": message})

    def body(self) -> dict[str, Any]:
        """Every event the ring holds, as ``{"log_id": id, "last_seq": n, "events": [...]}``."""
        body: dict[str, Any] = json.loads(self._join(self._texts))
        return body

    def text(self, after: tuple[str, int] | None = None) -> str:
        """A read body as JSON text (stored texts joined, nothing re-encoded); see the module docstring.

        ``after`` is the reader's position ``(log_id, seq)``. For this ring's ``log_id`` the body
        holds the events after ``seq`` (all the ring has, when the reader fell behind it: the
        reader sees the GAP); otherwise the newest ``window`` events.
        """
        texts = self._texts
        n = len(texts)
        if after is not None and after[0] == self.log_id:
            # The ring's seqs are contiguous and end at self._seq.
            wanted = max(0, self._seq - after[1])
        else:
            wanted = n if self.window is None else self.window
        if wanted >= n:
            return self._join(texts)
        return self._join(itertools.islice(texts, n - wanted, None))

    def _join(self, texts: Iterable[str]) -> str:
        return f'{{"log_id":"{self.log_id}","last_seq":{self._seq},"events":[{",".join(texts)}]}}'
