"""A burst's state events reduce to each object's net change; event logs are never reduced."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from asyncai_watch.core.changes import annotate
from asyncai_watch.core.diff import diff_state
from asyncai_watch.core.events import ADDED, CHANGED, DELETED, GAP, MODIFIED, Event
from asyncai_watch.core.lines import default_line
from asyncai_watch.core.netchange import net_changes, net_events


def _diff(old: Any, new: Any) -> list[Event]:
    """A read's events as the extraction gives them (annotated, no-ops dropped)."""
    return [ev for ev in map(annotate, diff_state(old, new)) if ev is not None]


def _burst(*states: Any) -> list[Event]:
    out: list[Event] = []
    for old, new in itertools.pairwise(states):
        out += _diff(old, new)
    return out


def _summary(events: list[Event]) -> dict[str | None, tuple[str, Any, Any, tuple[str, ...]]]:
    return {ev.key: (ev.type, ev.old, ev.new, ev.changed) for ev in events}


def test_added_then_deleted_is_nothing() -> None:
    assert net_events(_burst({}, {"a": 1}, {})) == []


def test_added_then_modified_is_added_with_the_last_value() -> None:
    [ev] = net_events(_burst({}, {"a": 1}, {"a": 2}))
    assert (ev.type, ev.key, ev.new, ev.old) == (ADDED, "a", 2, None)


def test_modified_twice_is_one_modified_from_the_first_to_the_last_value() -> None:
    [ev] = net_events(_burst({"a": 1}, {"a": 2}, {"a": 3}))
    assert (ev.type, ev.key, ev.old, ev.new) == (MODIFIED, "a", 1, 3)


def test_modified_and_back_is_nothing() -> None:
    assert net_events(_burst({"a": {"x": 1}}, {"a": {"x": 2}}, {"a": {"x": 1}})) == []


def test_deleted_then_added_is_modified_or_nothing() -> None:
    [ev] = net_events(_burst({"a": {"x": 1}}, {}, {"a": {"x": 2}}))
    assert (ev.type, ev.old, ev.new, ev.changed) == (MODIFIED, {"x": 1}, {"x": 2}, ("x",))
    assert net_events(_burst({"a": 1}, {}, {"a": 1})) == []


def test_a_torn_read_in_between_vanishes() -> None:
    # echo '{"port": 8081}' > config.json, read once while half written (issue 33).
    torn = {"error": "unexpected end of data"}
    events = _burst({"port": 8080}, torn, {"port": 8081})
    assert [(ev.type, ev.key) for ev in events] == [
        (ADDED, "error"),
        (DELETED, "port"),
        (ADDED, "port"),
        (DELETED, "error"),
    ]
    [ev] = net_events(events)
    assert (ev.type, ev.key, ev.old, ev.new) == (MODIFIED, "port", 8080, 8081)
    assert default_line(ev) == "MODIFIED port (8080→8081)"


def test_a_text_state_reduces_as_one_object() -> None:
    [ev] = net_events(_burst("a", "b", "c"))
    assert (ev.type, ev.old, ev.new) == (CHANGED, "a", "c")
    assert net_events(_burst("a", "b", "a")) == []


def test_event_log_events_are_never_reduced() -> None:
    log = [
        Event(type=ADDED, key="pod-1", item={"n": 1}, seq=1, fields={"type": ADDED, "seq": 1}),
        Event(type=DELETED, key="pod-1", item={"n": 1}, seq=2, fields={"type": DELETED, "seq": 2}),
        Event(type=GAP, seq=None, fields={"type": GAP, "missed": 3}),
    ]
    assert net_events(log) == log


def test_the_net_event_takes_the_first_place_and_the_last_index() -> None:
    a1, b, a2 = Event(type=ADDED, key="a", item=1), Event(type=ADDED, key="b", item=1), None
    a3 = Event(type=MODIFIED, key="a", item=2, old=1, changed=("a",))
    pairs = net_changes([a1, b, a2, a3])
    assert [(i, ev.type if ev else None, ev.key if ev else None) for i, ev in pairs] == [
        (3, ADDED, "a"),
        (1, ADDED, "b"),
        (2, None, None),
    ]


# The model: a window's net change is the diff of its first and last state.
_values = st.one_of(st.integers(0, 3), st.dictionaries(st.sampled_from("xy"), st.integers(0, 2), max_size=2))
_dict_states = st.dictionaries(st.sampled_from(["a", "b", "c", "error"]), _values, max_size=4)
_list_states = st.lists(
    st.fixed_dictionaries({"id": st.sampled_from(["p", "q", "r"]), "v": st.integers(0, 2)}),
    max_size=3,
    unique_by=lambda item: item["id"],
)
_text_states = st.sampled_from(["a", "b", "c"])


@given(
    st.one_of(st.lists(_dict_states, min_size=1, max_size=6), st.lists(_list_states, min_size=1, max_size=6))
)
def test_the_net_change_of_a_window_is_the_diff_of_its_first_and_last_state(states: list[Any]) -> None:
    assert _summary(net_events(_burst(*states))) == _summary(_diff(states[0], states[-1]))


@given(st.lists(_text_states, min_size=1, max_size=6))
def test_a_text_window_is_the_diff_of_its_first_and_last_text(states: list[str]) -> None:
    assert _summary(net_events(_burst(*states))) == _summary(_diff(states[0], states[-1]))


@given(st.lists(_dict_states, min_size=1, max_size=6))
def test_each_object_appears_at_most_once_after_reduction(states: list[Any]) -> None:
    keys = [ev.key for ev in net_events(_burst(*states))]
    assert len(keys) == len(set(keys))
