"""Trailing debounce with max wait, line cap and ×N collapsing; driven with explicit times."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from asyncai_watch.core.debounce import Debouncer


def test_trailing_quiet_period() -> None:
    d = Debouncer(quiet=3.0, max_wait=15.0)
    assert d.deadline is None
    assert d.add("ADDED a", 100.0) == 103.0
    assert d.flush_due(102.9) is None
    assert d.add("MODIFIED a", 102.0) == 105.0  # each line moves the flush
    assert d.flush_due(104.0) is None
    assert d.flush_due(105.0) == "ADDED a\nMODIFIED a"
    assert d.deadline is None
    assert d.flush_due(200.0) is None


def test_max_wait_caps_a_steady_stream() -> None:
    d = Debouncer(quiet=3.0, max_wait=15.0)
    t = 0.0
    while t < 14.0:
        deadline = d.add(f"line {t}", t)
        assert deadline <= 15.0
        t += 2.0
    assert d.deadline == 15.0
    notice = d.flush_due(15.0)
    assert notice is not None
    assert notice.count("\n") == 6
    assert d.add("next burst", 16.0) == 19.0  # a new burst starts its own max wait


def test_identical_lines_collapse_in_first_arrival_order() -> None:
    d = Debouncer()
    for line in ["b", "a", "b", "c", "b", "a"]:
        d.add(line, 0.0)
    assert d.flush() == "b ×3\na ×2\nc"


def test_at_most_max_lines_then_more() -> None:
    d = Debouncer(max_lines=20)
    for i in range(25):
        d.add(f"ADDED cm-{i}", 0.0)
    d.add("ADDED cm-24", 0.0)  # a repeat of a line not shown counts too
    notice = d.flush()
    assert notice is not None
    lines = notice.split("\n")
    assert lines[:20] == [f"ADDED cm-{i}" for i in range(20)]
    assert lines[20:] == ["+6 more"]


def test_quiet_zero_flushes_on_the_next_check() -> None:
    d = Debouncer(quiet=0.0, max_wait=0.0)
    assert d.add("x", 5.0) == 5.0
    assert d.flush_due(5.0) == "x"


def test_flush_forces_and_empty_is_none() -> None:
    d = Debouncer()
    assert d.flush() is None
    d.add("x", 1.0)
    assert d.pending == 1
    assert d.flush() == "x"
    assert d.pending == 0


# --- properties: a driver that checks at arbitrary times ---------------------------------------------

steps = st.lists(
    st.tuples(st.floats(0, 6, allow_nan=False), st.sampled_from(["a", "b", "c", "d"]), st.booleans()),
    max_size=40,
)


def count(notice: str) -> dict[str, int]:
    """Lines in a notice with their counts (``line ×N``), plus the ``+N more`` count under ""."""
    out: dict[str, int] = {}
    for line in notice.split("\n"):
        if m := re.fullmatch(r"\+(\d+) more", line):
            out[""] = int(m.group(1))
        elif m := re.fullmatch(r"(.*) ×(\d+)", line):
            out[m.group(1)] = int(m.group(2))
        else:
            out[line] = 1
    return out


@given(
    quiet=st.floats(0, 5, allow_nan=False),
    extra=st.floats(0, 10, allow_nan=False),
    max_lines=st.integers(1, 4),
    steps=steps,
)
def test_timing_and_conservation(
    quiet: float, extra: float, max_lines: int, steps: list[tuple[float, str, bool]]
) -> None:
    max_wait = quiet + extra
    d = Debouncer(quiet=quiet, max_wait=max_wait, max_lines=max_lines)
    now = 0.0
    added = 0
    flushed = 0
    first: float | None = None  # the pending burst's first and last line times
    last = 0.0

    def check(at: float) -> None:
        nonlocal flushed, first
        notice = d.flush_due(at)
        if notice is None:
            # Not due: a pending burst is within both its quiet period and its max wait.
            if first is not None:
                assert at < last + quiet
                assert at < first + max_wait
            return
        assert first is not None
        # Never before quiet has passed since the last line, unless max wait forced it.
        assert at >= last + quiet or at >= first + max_wait
        flushed += sum(count(notice).values())
        first = None

    for gap, line, check_now in steps:
        # The owner wakes at the deadline (never later) whenever one passes before the next line.
        if d.deadline is not None and d.deadline <= now + gap:
            deadline = d.deadline
            assert first is not None
            assert deadline <= first + max_wait
            check(deadline)
            assert d.deadline is None
        now += gap
        if check_now:
            check(now)
        if first is None:
            first = now
        last = now
        deadline_after = d.add(line, now)
        added += 1
        assert deadline_after == d.deadline
        assert deadline_after <= first + max_wait
        assert deadline_after >= now + min(quiet, max_wait - (now - first)) - 1e-9
    if d.deadline is not None:
        check(d.deadline)
    assert d.deadline is None
    assert flushed == added  # every line shown or counted in exactly one notice


@given(lines=st.lists(st.sampled_from(["a", "b", "c", "d", "e"]), max_size=30), max_lines=st.integers(1, 6))
def test_notice_lists_distinct_lines_in_first_arrival_order(lines: list[str], max_lines: int) -> None:
    d = Debouncer(max_lines=max_lines)
    for line in lines:
        d.add(line, 0.0)
    notice = d.flush()
    if not lines:
        assert notice is None
        return
    assert notice is not None
    order = list(dict.fromkeys(lines))
    shown = [line.split(" ×")[0] for line in notice.split("\n") if not line.startswith("+")]
    assert shown == order[:max_lines]
    counts = count(notice)
    assert counts.get("", 0) == sum(lines.count(x) for x in order[max_lines:])


@given(
    batches=st.lists(
        st.tuples(st.lists(st.sampled_from(["a", "b", "c"]), max_size=5), st.floats(0, 30, allow_nan=False)),
        max_size=8,
    ),
    max_lines=st.integers(1, 4),
)
def test_add_all_is_add_in_turn(batches: list[tuple[list[str], float]], max_lines: int) -> None:
    """The batch path (a watch's whole read at once) moves the deadline and counts as add does,
    a clock that steps back included."""
    one, batch = (Debouncer(quiet=3.0, max_wait=10.0, max_lines=max_lines) for _ in range(2))
    for lines, now in batches:
        for line in lines:
            one.add(line, now)
        assert batch.add_all(lines, now) == one.deadline
        assert (batch.pending, batch.flush_due(now + 5.0)) == (one.pending, one.flush_due(now + 5.0))
    assert batch.flush() == one.flush()
