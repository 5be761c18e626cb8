"""Reconnect backoff: one value for every place that retries a lost connection.

Pure. A :class:`Backoff` answers "after ``n`` failures in a row, how long to wait before the
next attempt, or give up": ``initial * factor**n`` capped at ``cap``, and ``None`` once
``attempts`` failures were reached (``attempts=None`` retries forever). Every retry loop in
the project uses it, each keeping its own failure count: the watch resubscribe policy and the
catalog's ``list_changed`` listen (1, 2, 4, 8, 16 s then give up), and, retrying forever, the
kcp watcher's kubectl restarts (0.8 s doubling to 30 s), the agent's channel puller (1 to
16 s), the PostgreSQL ledger's LISTEN reconnect (1 to 16 s) and the switchboard's lease-expiry
retry (1 to 30 s); and, giving up after 8 attempts, the PostgreSQL ledger's schema migration at
start (1 to 8 s).
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
    """Exponential backoff with a cap and an optional attempt limit.

    Each delay is the last one times ``factor``, never past ``cap``; an ``initial`` of 0 stays 0.
    (Exact while ``cap / initial`` is under ~1e308, i.e. for any real delay: past the float
    range the delay is taken as capped.)
    """

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
        except OverflowError:  # factor**failures is past ~1e308: capped, unless it multiplies 0
            return float(self.cap) if self.initial > 0 else 0.0
        return float(min(grown, self.cap))

    def delays(self) -> tuple[float, ...]:
        """Every delay before giving up (empty for ``attempts=0``); only for a limited backoff."""
        if self.attempts is None:
            raise ValueError("Backoff.delays: an unlimited backoff (attempts=None) has no last delay")
        return tuple(d for n in range(self.attempts) if (d := self.delay(n)) is not None)
