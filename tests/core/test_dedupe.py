"""Per-object dedupe: a line equal to the last line for the same item key is dropped."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncai_watch.core.dedupe import Deduper


def test_repeat_for_the_same_key_is_dropped() -> None:
    d = Deduper()
    assert d.admit("u1", "MODIFIED default/web (status.phase: Pending→Running)")
    assert not d.admit("u1", "MODIFIED default/web (status.phase: Pending→Running)")
    assert d.admit("u2", "MODIFIED default/web (status.phase: Pending→Running)")  # another object
    assert d.admit("u1", "DELETED default/web")
    assert d.admit("u1", "MODIFIED default/web (status.phase: Pending→Running)")  # not the last line any more


def test_lines_without_a_key_always_pass() -> None:
    d = Deduper()
    assert d.admit(None, "GAP: missed 3 events (seq 4-6)")
    assert d.admit(None, "GAP: missed 3 events (seq 4-6)")


def test_memory_is_bounded_and_forgetting_only_lets_a_line_through() -> None:
    d = Deduper(max_keys=2)
    assert d.admit("a", "x")
    assert d.admit("b", "x")
    assert not d.admit("a", "x")  # "a" is now the most recently seen
    assert d.admit("c", "x")  # evicts "b", the least recently seen
    assert len(d) == 2
    assert not d.admit("a", "x")
    assert d.admit("b", "x")  # forgotten: shown again, never lost


def test_max_keys_is_validated() -> None:
    with pytest.raises(ValueError, match="max_keys must be an int >= 1"):
        Deduper(max_keys=0)


@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c", None]), st.sampled_from(["x", "y"]))))
def test_admits_exactly_when_the_line_differs_from_the_keys_last(pairs: list[tuple[str | None, str]]) -> None:
    d = Deduper()
    last: dict[str, str] = {}
    for key, line in pairs:
        expected = key is None or last.get(key) != line
        assert d.admit(key, line) == expected
        if key is not None:
            last[key] = line


@given(
    pairs=st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d", None]), st.sampled_from(["x", "y"]))),
    max_keys=st.integers(1, 4),
    split=st.integers(0, 30),
)
def test_admit_all_is_admit_in_turn(pairs: list[tuple[str | None, str]], max_keys: int, split: int) -> None:
    """The batch path (a watch's whole read at once) answers and remembers as admit does."""
    one, batch = Deduper(max_keys), Deduper(max_keys)
    expected = [one.admit(key, line) for key, line in pairs]
    head, tail = pairs[:split], pairs[split:]
    got = batch.admit_all([k for k, _ in head], [t for _, t in head])
    got += batch.admit_all([k for k, _ in tail], [t for _, t in tail])
    assert got == expected
    assert batch._last == one._last
    assert list(batch._last) == list(one._last)  # the same least-recently-seen order
