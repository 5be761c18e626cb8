"""The resubscribe policy of one connection's subscriptions: retry after a delay, or give up.

Pure: ``now`` comes in, the random source is injected. A subscription counts as healthy once an
update arrived on it or it stayed up ``healthy_after`` seconds; a healthy one resets the failure
count. Each ending asks the :class:`~asyncai_watch.core.backoff.Backoff` for the next delay (1, 2,
4, 8, 16 s by default, then give up).

**The pending attempt.** Subscriptions lost while an attempt waits for its deadline
(:attr:`Resubscribe.due`) wait for the same one (:meth:`Resubscribe.lost`). Until the deadline
only a new watch makes the attempt early (it tries at once); a listen acknowledged or ended
meanwhile does not (:meth:`Resubscribe.purpose`).

**Jitter.** After a server restart every client of it loses its subscriptions at the same moment;
without jitter they all come back at the same moments too (1, 2, 4 s ...), in lockstep. With
``jitter`` ``j`` (a fraction in ``[0, 1]``) each delay ``d`` becomes ``d * (1 - j * u)`` for ``u``
drawn from ``random()`` in ``[0, 1)``: somewhere in ``(d * (1 - j), d]``, never longer than the
backoff's own delay, so the documented delays stay the upper bound.
"""

from __future__ import annotations

import math
import random as _random
from collections.abc import Callable
from typing import Literal

import attrs

from asyncai_watch.core.backoff import Backoff

__all__ = ["GiveUp", "Resubscribe", "Retry", "check_jitter"]


@attrs.frozen
class Retry:
    """Resubscribe after ``delay`` seconds; ``attempt`` counts from 1 since the last healthy one."""

    delay: float
    attempt: int


@attrs.frozen
class GiveUp:
    """The attempts are used up; ``attempts`` failed in a row."""

    attempts: int


def check_jitter(owner: str, value: float) -> float:
    """``value`` if it is a jitter fraction (a finite number in [0, 1]), else a ValueError naming ``owner``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 <= value <= 1
    ):
        raise ValueError(
            f"{owner}: jitter must be a number from 0 (none) to 1 (a delay may shrink to 0), got {value!r}"
        )
    return float(value)


def _jitter(inst: Resubscribe, _attr: object, value: float) -> None:
    check_jitter("Resubscribe", value)


@attrs.define(on_setattr=attrs.setters.NO_OP)  # validated when built; its fields change per ending
class Resubscribe:
    """The resubscribe policy (see the module docstring)."""

    backoff: Backoff = attrs.field(factory=Backoff)
    healthy_after: float = 16.0
    jitter: float = attrs.field(default=0.0, validator=_jitter)
    random: Callable[[], float] = attrs.field(default=_random.random, repr=False)
    """Draws ``u`` in ``[0, 1)`` for the jitter (inject a seeded one for a reproducible run)."""
    failures: int = 0
    _opened: float | None = None
    _healthy: bool = False
    _resubscribing: bool = False
    pending: Retry | None = attrs.field(default=None, init=False)
    """The attempt decided when subscriptions were last lost (their watchers heard it)."""
    due: float | None = attrs.field(default=None, init=False)
    """When the pending attempt is made; ``None`` when none waits."""

    def subscribed(self, now: float) -> int:
        """The subscription is up (acknowledged); returns its attempt number (0: the first)."""
        self._opened = now
        self._healthy = False
        return self.failures + 1 if self._resubscribing else 0

    def updated(self) -> None:
        """An update arrived: the subscription works."""
        self._healthy = True

    def ended(self, now: float) -> Retry | GiveUp:
        """The subscription ended (or an attempt failed before it was up): retry or give up."""
        opened, self._opened = self._opened, None
        if self._healthy or (opened is not None and now - opened >= self.healthy_after):
            self.failures = 0
        elif self._resubscribing:
            self.failures += 1
        self._healthy = False
        self._resubscribing = True
        delay = self.backoff.delay(self.failures)
        if delay is None:
            return GiveUp(self.failures)
        return Retry(self.spread(delay), self.failures + 1)

    def lost(self, now: float) -> Retry | GiveUp:
        """Subscriptions were lost: the attempt already waiting for its deadline, else a new
        decision (:meth:`ended`); giving up resets the history."""
        if self.due is None:
            decision = self.ended(now)
            if isinstance(decision, GiveUp):
                self.reset()
                return decision
            self.pending, self.due = decision, now + decision.delay
        assert self.pending is not None
        return self.pending

    def purpose(self, now: float, *, settle: bool) -> Literal["cover", "retry"] | None:
        """Why listens opened now for the URIs no listen holds are opened: ``"retry"`` is the
        pending attempt, made now (its deadline came, or a new watch starts); ``"cover"`` when no
        attempt waits; ``None``: not now (``settle``: a listen was just acknowledged or ended,
        before the deadline)."""
        if self.due is None:
            return "cover"
        if settle and now < self.due:
            return None
        self.due = None
        return "retry"

    def spread(self, delay: float) -> float:
        """``delay`` with the jitter applied: in ``(delay * (1 - jitter), delay]``."""
        if not self.jitter or not delay:
            return delay
        u = self.random()
        if not 0 <= u < 1:
            raise ValueError(f"Resubscribe.random must return a number in [0, 1), got {u!r}")
        return delay * (1 - self.jitter * u)

    def reset(self) -> None:
        """Forget the history (after giving up: a later watch starts afresh)."""
        self.failures = 0
        self._opened = None
        self._healthy = self._resubscribing = False
        self.pending = self.due = None
