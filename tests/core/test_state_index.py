"""The indexed state diff gives exactly the whole-body diff, parsing only what changed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import asyncai_watch.core.state_index as state_index
from asyncai_watch.core.diff import diff_state
from asyncai_watch.core.events import ADDED, DELETED, MODIFIED, Event
from asyncai_watch.core.jsontext import parse_json
from asyncai_watch.core.state_index import StateIndex, diff_reads

ids = (
    st.sampled_from(["a", "b", "c", "a#2", ""]) | st.integers(0, 3) | st.none() | st.booleans() | st.just(1.5)
)
small = (
    st.none() | st.booleans() | st.integers(-2, 2) | st.sampled_from([1.0, 0.5]) | st.text("xy", max_size=2)
)
values = st.recursive(
    small,
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.sampled_from(["p", "q", "r"]), kids, max_size=3)
    ),
    max_leaves=6,
)


@st.composite
def items(draw: st.DrawFn) -> Any:
    """Items in every shape the key rules care about, mostly the common ones."""
    shape = draw(st.sampled_from(["uid", "id", "name", "mixed", "string", "any"]))
    if shape == "string":
        return draw(st.text("ab", max_size=2))
    if shape == "any":
        return draw(values)
    item: dict[str, Any] = {"v": draw(values)}
    if shape == "uid":
        item["metadata"] = draw(
            st.fixed_dictionaries({"uid": ids}, optional={"name": ids, "namespace": st.just("ns")})
        )
    elif shape == "mixed":
        for field in draw(st.sets(st.sampled_from(["uid", "id", "name", "metadata"]))):
            item[field] = draw(ids) if field != "metadata" else draw(st.none() | st.just("m") | st.just({}))
    else:
        item[shape] = draw(ids)
    return item


@st.composite
def uniform_lists(draw: st.DrawFn) -> list[Any]:
    """Lists whose items share one key field (the shapes keyed at C speed)."""
    field = draw(st.sampled_from(["uid", "id", "name"]))
    keys = draw(st.lists(st.sampled_from(["a", "b", "c", "a#2"]) | st.integers(0, 2) | st.none(), max_size=6))
    out = []
    for k in keys:
        item: dict[str, Any] = {"v": draw(values)}
        if field == "uid":
            item["metadata"] = {"uid": str(k)}
        else:
            item[field] = k
            if draw(st.booleans()):
                item["name"] = draw(st.sampled_from(["a", "n"]))  # the fallback for a null id
        out.append(item)
    return out


def changed(draw: st.DrawFn, old: Any) -> Any:
    """A later read of ``old``: some values changed, items added, dropped or moved."""
    if isinstance(old, list) and old and draw(st.booleans()):
        new = [json.loads(json.dumps(x)) for x in old]
        for i in draw(st.lists(st.integers(0, len(new) - 1), max_size=3)):
            if isinstance(new[i], dict) and draw(st.booleans()):
                new[i]["v"] = draw(values)
            else:
                new[i] = draw(items())
        if draw(st.booleans()):
            new.insert(draw(st.integers(0, len(new))), draw(items()))
        if new and draw(st.booleans()):
            new.pop(draw(st.integers(0, len(new) - 1)))
        if draw(st.booleans()):
            new = draw(st.permutations(new))
        return new
    if isinstance(old, dict) and draw(st.booleans()):
        new = dict(old)
        for k in draw(st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=3)):
            new[k] = draw(values)
        if new and draw(st.booleans()):
            new.pop(draw(st.sampled_from(sorted(new))))
        return new
    return draw(reads)


reads = (
    uniform_lists()
    | st.lists(items(), max_size=6)
    | st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), values, max_size=4)
    | values
)


@st.composite
def texts(draw: st.DrawFn, value: Any) -> str:
    """``value`` as JSON text, in one of several spellings of the same value."""
    return json.dumps(
        value,
        indent=draw(st.sampled_from([None, 1])),
        sort_keys=draw(st.booleans()),
        separators=draw(st.sampled_from([(",", ":"), (", ", ": ")])),
    )


def index(text: str) -> Any:
    """What a watch keeps of a read: its index, or its parsed value when it has none."""
    found = StateIndex.of(text)
    return found if found is not None else parse_json(text)


@given(st.data())
def test_a_chain_of_reads_diffs_exactly_as_the_parsed_values_do(data: st.DataObject) -> None:
    value = data.draw(reads)
    text = data.draw(texts(value))
    kept = index(text)
    for _ in range(3):
        value = changed(data.draw, value)
        new_text = data.draw(texts(value))
        new = index(new_text)
        assert diff_reads(kept, new) == diff_state(parse_json(text), parse_json(new_text))
        kept, text = new, new_text


def indexed(text: str) -> StateIndex:
    found = StateIndex.of(text)
    assert found is not None, text
    return found


def kube(i: int, phase: str) -> dict[str, Any]:
    return {"metadata": {"uid": f"u{i}", "name": f"p{i}", "namespace": "ns"}, "status": {"phase": phase}}


def test_only_the_items_whose_text_changed_are_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    old = [kube(i, "Pending") for i in range(1000)]
    new = [kube(i, "Running" if i in (3, 500) else "Pending") for i in range(1000)]
    parsed: list[bytes] = []
    real = state_index._parse

    def counted(raw: Any) -> Any:
        parsed.append(bytes(raw))
        return real(raw)

    monkeypatch.setattr(state_index, "_parse", counted)
    a, b = indexed(json.dumps(old)), indexed(json.dumps(new))
    events = diff_reads(a, b)
    assert [(e.type, e.key, e.item["status"]["phase"]) for e in events] == [
        (MODIFIED, "u3", "Running"),
        (MODIFIED, "u500", "Running"),
    ]
    assert len(parsed) == 4  # the two items, old and new, and nothing else
    assert (a._value, b._value) == (state_index._UNPARSED, state_index._UNPARSED)  # neither parsed whole


def test_a_respelled_item_is_not_a_change() -> None:
    a = indexed('[{"id": "x", "v": [1, 2], "w": 1}]')
    b = indexed('[{"w":1.0,"v":[1,2],"id":"x"}]')
    assert diff_reads(a, b) == []


def test_added_and_deleted_items_are_found_by_key() -> None:
    a = indexed(json.dumps([{"id": "a", "v": 1}, {"id": "b", "v": 2}]))
    b = indexed(json.dumps([{"id": "c", "v": 3}, {"id": "a", "v": 1}]))
    assert diff_reads(a, b) == [
        Event(type=ADDED, key="c", item={"id": "c", "v": 3}),
        Event(type=DELETED, key="b", item={"id": "b", "v": 2}),
    ]


def test_repeated_keys_are_numbered_as_the_whole_body_diff_numbers_them() -> None:
    old = [{"id": "a", "v": 1}, {"id": "a", "v": 2}, {"id": "a#2", "v": 3}]
    new = [{"id": "a", "v": 1}, {"id": "a", "v": 9}, {"id": "a#2", "v": 3}]
    a, b = indexed(json.dumps(old)), indexed(json.dumps(new))
    assert [(e.type, e.key) for e in diff_reads(a, b)] == [(MODIFIED, "a#2")]
    assert diff_reads(a, b) == diff_state(old, new)


@pytest.mark.parametrize("text", ["3", '"a list of one"', "null", "[NaN]", "not json", "[1, 2"])
def test_a_body_that_is_not_a_json_list_or_object_has_no_index(text: str) -> None:
    assert StateIndex.of(text) is None


def test_a_list_that_becomes_an_object_is_one_changed_event() -> None:
    a, b = indexed("[1]"), indexed('{"a": 1}')
    assert diff_reads(a, b) == diff_state([1], {"a": 1})


def test_a_null_id_falls_back_to_the_name_as_in_the_whole_body_diff() -> None:
    old = [{"id": None, "name": "a", "v": 1}, {"id": "a", "name": "n", "v": 1}]
    new = [{"id": None, "name": "a", "v": 1}, {"id": "a", "name": "n", "v": 2}]
    a, b = indexed(json.dumps(old)), indexed(json.dumps(new))
    assert [(e.type, e.key) for e in diff_reads(a, b)] == [(MODIFIED, "a#2")]
    assert diff_reads(a, b) == diff_state(old, new)
