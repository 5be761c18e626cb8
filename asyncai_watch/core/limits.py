"""The watch limits as one value, validated where it is built (and trusted everywhere after)."""

from __future__ import annotations

import math
from typing import Any

import attrs

from asyncai_watch.core.backoff import Backoff
from asyncai_watch.errors import LimitError

__all__ = ["Limits"]


def _count(minimum: int) -> Any:
    def check(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
        if type(value) is not int or value < minimum:
            raise LimitError(f"Limits.{attr.name} must be an int >= {minimum}, got {value!r}")

    return check


def _seconds(*, positive: bool) -> Any:
    def check(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
        ok = (
            not isinstance(value, bool)
            and isinstance(value, int | float)
            and math.isfinite(value)
            and (value > 0 if positive else value >= 0)
        )
        if not ok:
            bound = "> 0" if positive else ">= 0"
            raise LimitError(f"Limits.{attr.name} must be a finite number of seconds {bound}, got {value!r}")

    return check


def _fraction(_inst: object, attr: attrs.Attribute[Any], value: object) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 <= value <= 1
    ):
        raise LimitError(
            f"Limits.{attr.name} must be a number from 0 to 1 (a fraction of each delay), got {value!r}"
        )


@attrs.frozen(kw_only=True)
class Limits:
    """Per-manager limits; the defaults are the design's table (docs/design.md, "Limits").

    Every field is checked when the value is built: counts are ints, times are finite
    seconds (NaN, infinities and negatives are refused with :class:`LimitError`), and
    ``debounce_max_wait >= debounce_quiet``.
    """

    max_watches: int = attrs.field(default=5, validator=_count(1))
    filter_timeout: float = attrs.field(default=2.0, validator=_seconds(positive=True))
    filter_tool_calls: int = attrs.field(default=10, validator=_count(0))
    events_per_update: int = attrs.field(default=100, validator=_count(1))
    lines_per_notice: int = attrs.field(default=20, validator=_count(1))
    debounce_quiet: float = attrs.field(default=3.0, validator=_seconds(positive=False))
    debounce_max_wait: float = attrs.field(default=15.0, validator=_seconds(positive=False))
    resubscribe_attempts: int = attrs.field(default=5, validator=_count(0))
    resubscribe_initial: float = attrs.field(default=1.0, validator=_seconds(positive=False))
    resubscribe_max: float = attrs.field(default=16.0, validator=_seconds(positive=False))
    resubscribe_jitter: float = attrs.field(default=0.2, validator=_fraction)
    """Each resubscribe delay ``d`` becomes a random one in ``(d * (1 - jitter), d]``, so the clients
    of a restarted server do not all come back at the same moments (0: the exact delays; the
    default 0.2 spreads the first retry over 0.8-1 s and never lengthens a delay)."""

    def __attrs_post_init__(self) -> None:
        if self.debounce_max_wait < self.debounce_quiet:
            raise LimitError(
                f"Limits.debounce_max_wait ({self.debounce_max_wait}) must be >= "
                f"debounce_quiet ({self.debounce_quiet})"
            )

    @property
    def backoff(self) -> Backoff:
        """The resubscribe policy: 1, 2, 4, 8, 16 s by default, then give up."""
        return Backoff(
            initial=self.resubscribe_initial, cap=self.resubscribe_max, attempts=self.resubscribe_attempts
        )
