"""The watch limits as one value, validated where it is built (docs/design.md, "Limits")."""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["Limits"]


def _positive(_inst: object, attr: attrs.Attribute[Any], value: float) -> None:
    if value <= 0:
        raise ValueError(f"Limits.{attr.name} must be > 0, got {value!r}")


def _non_negative(_inst: object, attr: attrs.Attribute[Any], value: float) -> None:
    if value < 0:
        raise ValueError(f"Limits.{attr.name} must be >= 0, got {value!r}")


@attrs.frozen(kw_only=True)
class Limits:
    """Per-agent limits; the defaults are the table in docs/design.md."""

    max_watches: int = attrs.field(default=5, validator=_positive)
    filter_timeout: float = attrs.field(default=2.0, validator=_positive)
    filter_tool_calls: int = attrs.field(default=10, validator=_non_negative)
    events_per_update: int = attrs.field(default=100, validator=_positive)
    lines_per_notice: int = attrs.field(default=20, validator=_positive)
    debounce_quiet: float = attrs.field(default=3.0, validator=_non_negative)
    debounce_max_wait: float = attrs.field(default=15.0, validator=_non_negative)
    resubscribe_attempts: int = attrs.field(default=5, validator=_non_negative)
    resubscribe_initial: float = attrs.field(default=1.0, validator=_non_negative)
    resubscribe_max: float = attrs.field(default=16.0, validator=_non_negative)

    def __attrs_post_init__(self) -> None:
        if self.debounce_max_wait < self.debounce_quiet:
            raise ValueError(
                f"Limits.debounce_max_wait ({self.debounce_max_wait}) must be >= "
                f"debounce_quiet ({self.debounce_quiet})"
            )

    def backoff_delays(self) -> tuple[float, ...]:
        """Delays before each resubscribe attempt: 1, 2, 4, 8, 16 s by default."""
        start, cap = self.resubscribe_initial, self.resubscribe_max
        return tuple(min(start * 2**i, cap) for i in range(self.resubscribe_attempts))
