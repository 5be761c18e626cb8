"""Per-object dedupe: a line equal to the last line for the same item key is dropped.

Pure. Lines without a key (GAP, ERROR, text CHANGED) always pass. The last line is
remembered per key for the most recently seen ``max_keys`` keys, so a long-lived watch
over a large, churning collection keeps bounded memory; a key that was forgotten just
lets its next line through.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["Deduper"]


class Deduper:
    __slots__ = ("_last", "max_keys")

    def __init__(self, max_keys: int = 10_000) -> None:
        if type(max_keys) is not int or max_keys < 1:
            raise ValueError(f"Deduper: max_keys must be an int >= 1, got {max_keys!r}")
        self.max_keys = max_keys
        self._last: dict[str, str] = {}

    def admit(self, key: str | None, line: str) -> bool:
        """True when ``line`` should be shown: no key, or not the key's last line."""
        if key is None:
            return True
        last = self._last
        prev = last.pop(key, None)
        # Re-inserting moves the key to the end: the dict's order is least recently seen first.
        last[key] = line
        if prev == line:
            return False
        if prev is None and len(last) > self.max_keys:
            del last[next(iter(last))]
        return True

    def admit_all(self, keys: Iterable[str | None], lines: Iterable[str]) -> list[bool]:
        """:meth:`admit` for each ``(key, line)`` pair in turn, in one call (a watch's whole read)."""
        # admit's body inline: a method call per line costs as much as the work.
        last = self._last
        pop = last.pop
        max_keys = self.max_keys
        out: list[bool] = []
        append = out.append
        for key, line in zip(keys, lines, strict=True):
            if key is None:
                append(True)
                continue
            prev = pop(key, None)
            last[key] = line
            if prev == line:
                append(False)
                continue
            if prev is None and len(last) > max_keys:
                del last[next(iter(last))]
            append(True)
        return out

    def __len__(self) -> int:
        return len(self._last)
