"""Limits and Backoff: validated once where they are built, with messages that say what is accepted."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncai_watch import LimitError, Limits, WatchError
from asyncai_watch.core.backoff import Backoff


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("debounce_quiet", -1, "debounce_quiet must be a finite number of seconds >= 0"),
        ("debounce_quiet", float("nan"), "debounce_quiet must be a finite number of seconds >= 0, got nan"),
        ("debounce_max_wait", float("inf"), "debounce_max_wait must be a finite number of seconds >= 0"),
        ("filter_timeout", 0, "filter_timeout must be a finite number of seconds > 0"),
        ("filter_timeout", float("-inf"), "filter_timeout must be a finite number of seconds > 0"),
        ("resubscribe_initial", float("nan"), "resubscribe_initial must be a finite number"),
        ("resubscribe_max", -0.5, "resubscribe_max must be a finite number"),
        ("max_watches", 0, "max_watches must be an int >= 1"),
        ("max_watches", 2.0, "max_watches must be an int >= 1, got 2.0"),
        ("lines_per_notice", True, "lines_per_notice must be an int >= 1, got True"),
        ("events_per_update", "100", "events_per_update must be an int >= 1"),
        ("filter_tool_calls", -1, "filter_tool_calls must be an int >= 0"),
        ("resubscribe_attempts", -1, "resubscribe_attempts must be an int >= 0"),
        ("debounce_quiet", "3", "debounce_quiet must be a finite number of seconds >= 0"),
    ],
)
def test_bad_limits_are_refused_with_a_typed_error(field: str, value: Any, says: str) -> None:
    with pytest.raises(LimitError, match=f"Limits.{says}") as info:
        Limits(**{field: value})
    # Typed: a WatchError (so `except WatchError` catches it), and a ValueError for bad input.
    assert isinstance(info.value, WatchError)
    assert isinstance(info.value, ValueError)


def test_max_wait_below_quiet_is_refused() -> None:
    with pytest.raises(LimitError, match=r"debounce_max_wait \(1\.0\) must be >= debounce_quiet \(2\.0\)"):
        Limits(debounce_quiet=2.0, debounce_max_wait=1.0)


def test_default_backoff_is_the_design_table() -> None:
    backoff = Limits().backoff
    assert backoff.delays() == (1.0, 2.0, 4.0, 8.0, 16.0)
    assert backoff.delay(5) is None  # then give up


@given(
    initial=st.floats(0, 100),
    cap=st.floats(0, 1000),
    factor=st.floats(1, 10),
    failures=st.integers(0, 10_000),
)
def test_an_unlimited_backoff_grows_to_its_cap_and_never_overflows(
    initial: float, cap: float, factor: float, failures: int
) -> None:
    backoff = Backoff(initial=initial, cap=cap, factor=factor, attempts=None)
    delay = backoff.delay(failures)
    assert delay is not None
    assert math.isfinite(delay)
    assert 0 <= delay <= cap
    assert backoff.delay(0) == min(initial, cap)
    if failures:
        before = backoff.delay(failures - 1)
        assert before is not None
        assert before <= delay


@given(
    initial=st.just(0.0) | st.floats(1e-6, 100),  # 0 (retry at once) to any real delay
    cap=st.floats(0, 1000),
    failures=st.integers(0, 2000),
)
def test_each_delay_doubles_the_last_up_to_the_cap(initial: float, cap: float, failures: int) -> None:
    # The loop every retrying site runs: first wait ``initial``, then double, never past ``cap``.
    expected = min(initial, cap)
    for _ in range(failures):
        expected = min(expected * 2, cap)
    assert Backoff(initial=initial, cap=cap, attempts=None).delay(failures) == expected
    limited = Backoff(initial=initial, cap=cap, attempts=failures)
    assert limited.delay(failures) is None  # a limited one gives up once its attempts failed
    assert len(limited.delays()) == failures


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"initial": float("nan")}, "Backoff.initial must be a finite number >= 0"),
        ({"cap": -1}, "Backoff.cap must be a finite number >= 0"),
        ({"factor": 0.5}, "Backoff.factor must be a finite number >= 1"),
        ({"attempts": -1}, "Backoff.attempts must be an int >= 0 or None"),
    ],
)
def test_bad_backoff_is_refused(kwargs: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        Backoff(**kwargs)
