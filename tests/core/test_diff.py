"""State diff: lists by item key, objects by top-level key, everything else as a whole."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from asyncai_watch.core.diff import _diff_mappings, diff_state, keyed
from asyncai_watch.core.events import ADDED, CHANGED, DELETED, MODIFIED, Event
from asyncai_watch.core.extract import Body
from asyncai_watch.core.identity import item_key
from asyncai_watch.core.jsontext import compact_json

json_scalars = (
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False) | st.text(max_size=4)
)
json_values = st.recursive(
    json_scalars,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=3), kids, max_size=4),
    max_leaves=12,
)


def summary(events: list[Event]) -> list[tuple[str, str | None]]:
    return [(e.type, e.key) for e in events]


# --- item keys ---------------------------------------------------------------------------------------


def test_item_key_order_of_precedence() -> None:
    full = {"metadata": {"uid": "u1", "name": "n", "namespace": "ns"}, "uid": "u2", "id": 3, "name": "x"}
    assert item_key(full) == "u1"
    assert item_key({"uid": "u2", "id": 3, "name": "x"}) == "u2"
    assert item_key({"id": 3, "name": "x"}) == "3"  # ids are stringified
    assert item_key({"metadata": {"name": "n", "namespace": "ns"}, "name": "x"}) == "ns/n"
    assert item_key({"metadata": {"name": "n"}, "name": "x"}) == "n"
    assert item_key({"name": "x"}) == "x"


def test_item_key_skips_values_that_are_not_ids() -> None:
    assert item_key({"id": None, "name": "x"}) == "x"
    assert item_key({"id": True, "name": "x"}) == "x"
    assert item_key({"id": "", "name": "x"}) == "x"
    assert item_key({"id": {"nested": 1}}) is None
    assert item_key({"metadata": "not an object", "id": 7}) == "7"
    assert item_key("a string") is None
    assert item_key([1, 2]) is None


def test_keyed_disambiguates_repeated_keys_in_list_order() -> None:
    items = [{"id": "a", "v": 1}, {"id": "a", "v": 2}, {"id": "a#2", "v": 3}, {"v": 4}, "s", "s"]
    got = keyed(items)
    assert list(got) == ["a", "a#2", "a#2#2", '{"v":4}', "s", "s#2"]
    assert [got[k] for k in got] == items  # nothing lost


# --- parse ------------------------------------------------------------------------------------------


def test_a_body_is_its_json_else_its_text() -> None:
    assert Body.parse('{"a": [1, 2]}').value == {"a": [1, 2]}
    assert Body.parse("3").value == 3
    assert Body.parse("123456789012345678901234567890").value == 123456789012345678901234567890
    assert Body.parse("hello, world").value == "hello, world"
    deep = Body.parse("[" * 100_000)  # too deep to parse: kept as text, with the reason, no crash
    assert deep.value == "[" * 100_000
    assert deep.error is not None
    assert "deeper than" in deep.error


# --- examples ---------------------------------------------------------------------------------------


def test_list_by_item_key() -> None:
    old = [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}, {"id": 3, "v": "c"}]
    new = [{"id": 3, "v": "c"}, {"id": 2, "v": "B"}, {"id": 4, "v": "d"}]
    events = diff_state(old, new)
    assert summary(events) == [(MODIFIED, "2"), (ADDED, "4"), (DELETED, "1")]
    mod = events[0]
    assert (mod.old, mod.new) == ({"id": 2, "v": "b"}, {"id": 2, "v": "B"})
    assert events[1].old is None
    assert events[1].new == events[1].item == {"id": 4, "v": "d"}
    # DELETED: the deleted value is the event's item; old is only for MODIFIED.
    assert events[2].item == {"id": 1, "v": "a"}
    assert events[2].old is None
    assert events[2].new is None
    assert events[2].to_filter_dict(watch="w", uri="u")["old"] is None
    assert events[2].to_filter_dict(watch="w", uri="u")["item"] == {"id": 1, "v": "a"}


def test_kubernetes_list_uses_uid() -> None:
    pod = {"metadata": {"uid": "u-1", "name": "web", "namespace": "default"}, "status": {"phase": "Pending"}}
    running = {**pod, "status": {"phase": "Running"}}
    assert summary(diff_state([pod], [running])) == [(MODIFIED, "u-1")]


def test_list_items_without_key_compare_whole() -> None:
    assert summary(diff_state(["a", "b"], ["b", "c"])) == [(ADDED, "c"), (DELETED, "a")]
    assert summary(diff_state([{"x": 1}], [{"x": 2}])) == [(ADDED, '{"x":2}'), (DELETED, '{"x":1}')]


def test_duplicate_keys_lose_no_change() -> None:
    old = [{"id": "a", "v": 1}, {"id": "a", "v": 2}]
    new = [{"id": "a", "v": 1}, {"id": "a", "v": 3}, {"id": "a", "v": 4}]
    events = diff_state(old, new)
    assert summary(events) == [(MODIFIED, "a#2"), (ADDED, "a#3")]
    assert events[0].new == {"id": "a", "v": 3}


def test_object_by_top_level_key() -> None:
    # The ADR's live memo example: two writes during one turn -> ADDED owner, MODIFIED todo.
    old = {"todo": "buy milk"}
    new = {"todo": "buy eggs", "owner": "alice"}
    events = diff_state(old, new)
    assert summary(events) == [(MODIFIED, "todo"), (ADDED, "owner")]
    assert (events[0].old, events[0].new) == ("buy milk", "buy eggs")
    assert summary(diff_state(new, {"owner": "alice"})) == [(DELETED, "todo")]


def test_text_changes_as_a_whole() -> None:
    events = diff_state("line one\n", "line one\nline two\n")
    assert summary(events) == [(CHANGED, None)]
    assert (events[0].old, events[0].new) == ("line one\n", "line one\nline two\n")
    assert diff_state("same", "same") == []


def test_shape_change_is_one_whole_value_change() -> None:
    for old, new in [([1], {"a": 1}), ({"a": 1}, "text"), ([1, 2], 3), (None, {"a": 1})]:
        events = diff_state(old, new)
        assert summary(events) == [(CHANGED, None)], (old, new)
        assert (events[0].old, events[0].new) == (old, new)


def test_no_change_no_events() -> None:
    assert diff_state([{"id": 1}], [{"id": 1}]) == []
    assert diff_state({"a": {"b": 1, "c": 2}}, {"a": {"c": 2, "b": 1}}) == []  # key order is not a change


# --- properties -------------------------------------------------------------------------------------


def apply(old: Any, events: list[Event]) -> Any:
    """Apply a diff's events to ``old`` the way a reader of the events would."""
    if events and events[0].type == CHANGED:
        assert len(events) == 1
        return events[0].new
    state = keyed(old) if isinstance(old, list) else dict(old) if isinstance(old, dict) else old
    for e in events:
        assert e.key is not None
        if e.type == DELETED:
            del state[e.key]
        else:
            assert (e.key in state) == (e.type == MODIFIED)
            state[e.key] = e.new
    return state


def comparable(value: Any) -> Any:
    return keyed(value) if isinstance(value, list) else value


item = st.fixed_dictionaries(
    {}, optional={"id": st.integers(0, 5) | st.text("ab", max_size=2), "name": st.sampled_from(["x", "y"])}
).flatmap(lambda d: st.fixed_dictionaries({k: st.just(v) for k, v in d.items()}, optional={"v": json_values}))
list_items = st.lists(item | json_scalars, max_size=8)


@given(old=list_items, new=list_items)
def test_applying_a_list_diff_gives_the_new_list_as_a_mapping(old: list[Any], new: list[Any]) -> None:
    assert apply(old, diff_state(old, new)) == keyed(new)


@given(old=json_values, new=json_values)
def test_applying_any_diff_gives_the_new_value(old: Any, new: Any) -> None:
    assert comparable(apply(old, diff_state(old, new))) == comparable(new)


@given(
    items=st.lists(st.integers(0, 1000).map(lambda i: {"id": i, "v": i % 7}), unique_by=lambda d: d["id"]),
    data=st.data(),
)
def test_order_is_the_only_thing_a_list_diff_ignores(
    items: list[dict[str, int]], data: st.DataObject
) -> None:
    shuffled = data.draw(st.permutations(items))
    assert diff_state(items, shuffled) == []
    # ...and any other change to the multiset of items is reported.
    if items:
        changed = [dict(d) for d in shuffled]
        changed[0]["v"] += 1
        assert summary(diff_state(items, changed)) == [(MODIFIED, str(changed[0]["id"]))]


# Without bools and floats: Python's True == 1 == 1.0 carries over to the diff (see the diff
# module docstring), while a keyless scalar item's key is its JSON text ("true" vs "1").
plain_scalars = st.none() | st.integers(-5, 5) | st.text(max_size=4)
plain_items = st.lists(
    st.builds(lambda i, v: {"id": i, "v": v}, st.integers(0, 3), plain_scalars) | plain_scalars, max_size=8
)


@given(old=plain_items, new=plain_items)
def test_empty_diff_exactly_when_keyed_items_are_equal(old: list[Any], new: list[Any]) -> None:
    assert (diff_state(old, new) == []) == (keyed(old) == keyed(new))


# The usual list shapes are keyed in passes at C speed (dicts keyed by a string ``id``, Kubernetes
# objects by ``metadata.uid``), and a re-read with the same keys in the same order is diffed by
# position: both must give exactly what the item-by-item rules give, for any list.


def keyed_by_the_rules(items: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for x in items:
        k = item_key(x)
        if k is None:
            k = x if type(x) is str else compact_json(x, sort_keys=True)
        if k in out:
            n = 2
            while f"{k}#{n}" in out:
                n += 1
            k = f"{k}#{n}"
        out[k] = x
    return out


short_ids = st.sampled_from(["a", "b", "c", "a#2", ""]) | st.integers(0, 2) | st.none() | st.booleans()
usual_item = st.one_of(
    st.fixed_dictionaries({"id": short_ids}, optional={"v": st.integers(0, 2), "uid": short_ids}),
    st.fixed_dictionaries(
        {
            "metadata": st.fixed_dictionaries({}, optional={"uid": short_ids, "name": short_ids})
            | json_scalars
        },
        optional={"v": st.integers(0, 2)},
    ),
)
text_ids = st.sampled_from(["a", "b", "c", "a#2", "d", "e"])
by_id = st.fixed_dictionaries({"id": text_ids}, optional={"v": st.integers(0, 2)})
by_uid = st.fixed_dictionaries(
    {"metadata": st.fixed_dictionaries({"uid": text_ids})}, optional={"v": st.integers(0, 2)}
)
usual_lists = (
    st.lists(by_id, max_size=6)
    | st.lists(by_uid, max_size=6)
    | st.lists(usual_item, max_size=6)
    | st.lists(usual_item | json_scalars, max_size=6)
)


@given(items=usual_lists)
def test_keyed_is_the_item_by_item_rules(items: list[Any]) -> None:
    assert list(keyed(items).items()) == list(keyed_by_the_rules(items).items())


@given(old=usual_lists, data=st.data())
def test_a_list_diff_is_the_diff_of_the_keyed_items(old: list[Any], data: st.DataObject) -> None:
    # Half the time a re-read of the same items, some of them changed in place (the positional path).
    if data.draw(st.booleans()):
        new = [
            {**x, "v": data.draw(st.integers(0, 2))} if type(x) is dict and data.draw(st.booleans()) else x
            for x in old
        ]
    else:
        new = data.draw(usual_lists)
    expected = _diff_mappings(keyed_by_the_rules(old), keyed_by_the_rules(new))
    assert diff_state(old, new) == expected
