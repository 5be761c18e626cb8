"""Reconnect backoff: one value for every place that retries a lost connection.

Pure. A :class:`Backoff` answers "after ``n`` failures in a row, how long to wait before the
next attempt, or give up": ``initial * factor**n`` capped at ``cap``, and ``None`` once
``attempts`` failures were reached (``attempts=None`` retries forever). The watch
resubscribe policy (1, 2, 4, 8, 16 s then give up), the kcp watcher's kubectl restarts, the
agent's channel puller and the PostgreSQL ledger's LISTEN reconnect all use it; each keeps
its own failure count.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

__all__ = ["Backoff"]


def _finite_non_negative(_inst: object, attr: attrs.Attribute[Any], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"Backoff.{attr.name} must be a finite number >= 0 (seconds), got {value!r}")


def _factor(_inst: object, _attr: attrs.Attribute[Any], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 1:
        raise ValueError(f"Backoff.factor must be a finite number >= 1, got {value!r}")


def _attempts(_inst: object, _attr: attrs.Attribute[Any], value: int | None) -> None:
    if value is not None and (type(value) is not int or value < 0):
        raise ValueError(f"Backoff.attempts must be an int >= 0 or None (retry forever), got {value!r}")


@attrs.frozen(kw_only=True)
class Backoff:
    """Exponential backoff with a cap and an optional attempt limit."""

    initial: float = attrs.field(default=1.0, validator=_finite_non_negative)
    cap: float = attrs.field(default=16.0, validator=_finite_non_negative)
    factor: float = attrs.field(default=2.0, validator=_factor)
    attempts: int | None = attrs.field(default=5, validator=_attempts)

    def delay(self, failures: int) -> float | None:
        """Seconds to wait before the next attempt after ``failures`` failures in a row
        (0: the first retry), or ``None`` when the attempts are used up."""
        if failures < 0:
            raise ValueError(f"Backoff.delay: failures must be >= 0, got {failures!r}")
        if self.attempts is not None and failures >= self.attempts:
            return None
        try:
            grown = self.initial * self.factor**failures
        except OverflowError:  # a float power past ~1e308: long since capped
            return float(self.cap)
        return float(min(grown, self.cap))

    def delays(self) -> tuple[float, ...]:
        """Every delay before giving up (empty for ``attempts=0``); only for a limited backoff."""
        if self.attempts is None:
            raise ValueError("Backoff.delays: an unlimited backoff (attempts=None) has no last delay")
        return tuple(d for n in range(self.attempts) if (d := self.delay(n)) is not None)
