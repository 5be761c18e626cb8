"""Trailing debounce with a cap: lines in, one notice text out per burst.

Pure: ``now`` is always passed in, nothing reads a clock (docs/design.md, "From events to a notice"). Each line moves
the flush to ``quiet`` seconds after it, but never later than ``max_wait`` after the
burst's first line. A notice lists the burst's distinct lines in first-arrival order,
a line that came N times as ``line ×N``, at most ``max_lines`` of them, then ``+N more``
counting every line not shown.

The owner's loop is: ``deadline = d.add(line, now)``; sleep until the earliest of the
next line and ``d.deadline``; ``d.flush_due(now)`` gives the notice text once due.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

__all__ = ["Debouncer", "notice_text"]


def notice_text(lines: Iterable[str], max_lines: int, *, more: int = 0) -> str | None:
    """A burst's text from its lines as :meth:`Debouncer.flush` makes it, ``more`` lines not
    given counted in its ``+N more`` (``None``: no lines)."""
    counts = Counter(lines)
    total = counts.total()
    return _render(counts, total + more, max_lines) if total else None


def _render(counts: Counter[str], total: int, max_lines: int) -> str | None:
    if not total:
        return None
    out: list[str] = []
    shown = 0
    for line, n in counts.items():
        if len(out) == max_lines:
            break
        out.append(line if n == 1 else f"{line} ×{n}")
        shown += n
    if shown < total:
        out.append(f"+{total - shown} more")
    return "\n".join(out)


class Debouncer:
    __slots__ = ("_counts", "_first", "_last", "_total", "max_lines", "max_wait", "quiet")

    def __init__(self, quiet: float = 3.0, max_wait: float = 15.0, max_lines: int = 20) -> None:
        # Trusted: the values come from a validated Limits (validation happens once, at the edge).
        self.quiet = float(quiet)
        self.max_wait = float(max_wait)
        self.max_lines = max_lines
        self._counts: Counter[str] = Counter()
        self._total = 0
        self._first = 0.0
        self._last = 0.0

    @property
    def pending(self) -> int:
        """Lines added since the last flush (repeats included)."""
        return self._total

    @property
    def deadline(self) -> float | None:
        """When the pending lines are due, ``None`` when nothing is pending."""
        if not self._total:
            return None
        return min(self._last + self.quiet, self._first + self.max_wait)

    def add(self, line: str, now: float) -> float:
        """Add a line that arrived at ``now``; returns the (new) deadline."""
        total = self._total
        if not total:
            self._first = self._last = now
        elif now > self._last:
            # A clock that steps back must not push the deadline out: keep the latest time.
            self._last = now
        counts = self._counts
        counts[line] = counts.get(line, 0) + 1
        self._total = total + 1
        # min() of the two, without the builtin call (this runs once per line).
        quiet_end = self._last + self.quiet
        cap = self._first + self.max_wait
        return cap if cap < quiet_end else quiet_end

    def add_all(self, lines: Sequence[str], now: float) -> float | None:
        """:meth:`add` for each of ``lines`` (all arrived at ``now``), in one call; returns the
        deadline (``None`` when nothing is pending)."""
        if lines:
            if not self._total:
                self._first = self._last = now
            elif now > self._last:
                self._last = now
            # Counter.update counts in C, in first-arrival order, as add's loop would.
            self._counts.update(lines)
            self._total += len(lines)
        return self.deadline

    def flush_due(self, now: float) -> str | None:
        """The notice text when the deadline has passed at ``now``, else ``None``."""
        deadline = self.deadline
        if deadline is None or now < deadline:
            return None
        return self.flush()

    def flush(self) -> str | None:
        """The notice text of everything pending, now; ``None`` when nothing is pending."""
        if not self._total:
            return None
        counts, total = self._counts, self._total
        self._counts = Counter()
        self._total = 0
        return _render(counts, total, self.max_lines)
