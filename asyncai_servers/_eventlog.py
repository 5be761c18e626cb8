"""The bounded event ring every event-log server keeps (docs/design.md, "Event logs and GAP").

Reads are stateless: any number of readers share one ring and each keeps its
own last-seen ``seq``. The body also carries ``last_seq``, the newest seq ever
appended, so a reader whose baseline found the ring empty knows where it stands,
and ``log_id``, new for every ring, so a reader notices a restarted log even when
its seqs have already run past the reader's last one. A reader that fell more than ``capacity`` events behind
sees the oldest ``seq`` jump past its last seen + 1 and reports a GAP.
"""

from __future__ import annotations

import json
import secrets
from collections import deque
from collections.abc import Mapping
from typing import Any

__all__ = ["DEFAULT_RING_CAPACITY", "EventRing"]

DEFAULT_RING_CAPACITY = 256


class EventRing:
    def __init__(self, capacity: int = DEFAULT_RING_CAPACITY, *, start_seq: int = 0) -> None:
        if capacity < 1:
            raise ValueError(f"EventRing capacity must be >= 1, got {capacity}")
        self._events: deque[dict[str, Any]] = deque(maxlen=capacity)
        # start_seq lets a restarted source keep seq monotonic for readers that remember the last one.
        self._seq = start_seq
        # A new ring is a new log: readers that see another log_id behind the same URI know the
        # log started over (a restart) and report a GAP instead of trusting the seqs.
        self.log_id = secrets.token_hex(8)

    @property
    def last_seq(self) -> int:
        """The seq of the newest event, 0 when none was appended."""
        return self._seq

    def append(self, event: Mapping[str, Any]) -> int:
        """Store ``event`` with the next seq (monotonic, never reused) and return that seq."""
        self._seq += 1
        self._events.append({"seq": self._seq, **{k: v for k, v in event.items() if k != "seq"}})
        return self._seq

    def error(self, message: str) -> int:
        """Record an in-band source failure: ``{"seq": n, "type": "ERROR", "message": ...}``."""
        return self.append({"type": "ERROR", "message": message})

    def body(self) -> dict[str, Any]:
        """``{"log_id": id, "last_seq": n, "events": [...]}``: ``last_seq`` lets a baseline of an
        empty ring still measure a later GAP; ``log_id`` tells a reader the log started over."""
        return {"log_id": self.log_id, "last_seq": self._seq, "events": list(self._events)}

    def text(self) -> str:
        """The read body as JSON text."""
        return json.dumps(self.body(), separators=(",", ":"), ensure_ascii=False)
