"""Changed paths of MODIFIED events and dropping no-op MODIFIED."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncai_watch.core.changes import ROOT, annotate, changed_paths
from asyncai_watch.core.events import ADDED, MODIFIED, Event

BID = {
    "apiVersion": "market/v1",
    "kind": "Bid",
    "metadata": {
        "name": "bid-1",
        "namespace": "default",
        "uid": "u-1",
        "resourceVersion": "41",
        "generation": 2,
    },
    "spec": {"price": 10, "vm": {"cpu": 2, "memory": "4Gi", "disk": {"size": "20Gi", "class": "ssd"}}},
    "status": {"phase": "Deciding", "conditions": [{"type": "Ready", "status": "False"}]},
}


def modified(old: dict[str, Any], **changes: Any) -> dict[str, Any]:
    new = copy.deepcopy(old)
    for path, value in changes.items():
        *parents, last = path.split("__")
        node = new
        for p in parents:
            node = node.setdefault(p, {})
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return new


def test_one_field() -> None:
    assert changed_paths(BID, modified(BID, status__phase="Published")) == ("status.phase",)


def test_sorted_and_added_or_removed_fields() -> None:
    new = modified(BID, status__phase="Won", spec__price=None, metadata__labels={"a": "b"})
    assert changed_paths(BID, new) == ("metadata.labels", "spec.price", "status.phase")


def test_depth_three_prefix_for_deeper_changes() -> None:
    new = modified(BID, spec__vm__disk__size="40Gi")
    assert changed_paths(BID, new) == ("spec.vm.disk",)
    assert changed_paths(BID, new, max_depth=2) == ("spec.vm",)
    assert changed_paths(BID, new, max_depth=4) == ("spec.vm.disk.size",)


def test_lists_compare_as_a_whole() -> None:
    new = modified(BID, status__conditions=[{"type": "Ready", "status": "True"}])
    assert changed_paths(BID, new) == ("status.conditions",)


def test_bookkeeping_metadata_is_ignored() -> None:
    managed = [{"manager": "kubectl", "operation": "Update"}]
    new = modified(
        BID, metadata__resourceVersion="42", metadata__generation=3, metadata__managedFields=managed
    )
    assert changed_paths(BID, new) == ()
    assert changed_paths(BID, new, max_depth=1) == ()
    # Only the top-level metadata's: the same names elsewhere are ordinary fields.
    assert changed_paths(BID, modified(BID, spec__resourceVersion="9")) == ("spec.resourceVersion",)


def test_not_objects_change_as_a_whole() -> None:
    assert changed_paths("a", "b") == (ROOT,)
    assert changed_paths([1], [1, 2]) == (ROOT,)
    assert changed_paths({"a": 1}, None) == (ROOT,)
    assert changed_paths(3, 3) == ()


def test_max_depth_is_validated() -> None:
    with pytest.raises(ValueError, match="max_depth must be an int >= 1"):
        changed_paths({}, {}, max_depth=0)


def test_annotate_fills_changed_and_drops_no_ops() -> None:
    ev = Event(
        type=MODIFIED,
        key="u-1",
        old=BID,
        item=modified(BID, status__phase="Published"),
        seq=5,
        fields={"old": BID},
    )
    out = annotate(ev)
    assert out is not None
    assert out.changed == ("status.phase",)
    assert (out.key, out.seq, out.old, out.new, out.fields) == (ev.key, ev.seq, ev.old, ev.new, ev.fields)
    noop = Event(
        type=MODIFIED,
        key="u-1",
        old=BID,
        item=modified(BID, metadata__resourceVersion="99"),
        fields={"old": BID},
    )
    assert annotate(noop) is None


def test_annotate_leaves_other_events_alone() -> None:
    added = Event(type=ADDED, key="u-1", item=BID)
    assert annotate(added) is added
    no_old = Event(
        type=MODIFIED, key="u-1", item=BID, seq=3, fields={"seq": 3, "type": MODIFIED, "object": BID}
    )
    assert annotate(no_old) is no_old  # the server sent no old: nothing to compare, keep it


def test_annotate_state_diff_with_null_old() -> None:
    ev = Event(type=MODIFIED, key="x", old=None, item=1)  # state diff: {"x": null} -> {"x": 1}
    out = annotate(ev)
    assert out is not None
    assert out.changed == (ROOT,)


# --- properties -------------------------------------------------------------------------------------

keys = st.sampled_from(["a", "b", "c", "metadata", "resourceVersion"])
values = st.recursive(
    st.none() | st.integers(-3, 3) | st.text("xy", max_size=2),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(keys, kids, max_size=4),
    max_leaves=15,
)
objects = st.dictionaries(keys, values, max_size=5)


def get_path(obj: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return "<missing>"
        obj = obj[part]
    return obj


def strip_ignored(obj: dict[str, Any]) -> dict[str, Any]:
    out = dict(obj)
    if isinstance(out.get("metadata"), dict):
        out["metadata"] = {
            k: v
            for k, v in out["metadata"].items()
            if k not in ("resourceVersion", "generation", "managedFields")
        }
    return out


@given(old=objects, new=objects)
def test_paths_are_exactly_where_values_differ(old: dict[str, Any], new: dict[str, Any]) -> None:
    paths = changed_paths(old, new)
    assert list(paths) == sorted(set(paths))
    assert all(1 <= len(p.split(".")) <= 3 for p in paths)
    for p in paths:
        assert get_path(strip_ignored(old), p) != get_path(strip_ignored(new), p)
    # Empty exactly when nothing but ignored bookkeeping differs.
    assert (paths == ()) == (strip_ignored(old) == strip_ignored(new))


@given(old=objects, new=objects)
def test_copying_the_changed_paths_over_makes_them_equal(old: dict[str, Any], new: dict[str, Any]) -> None:
    patched = copy.deepcopy(strip_ignored(old))
    for p in changed_paths(old, new):
        *parents, last = p.split(".")
        node: Any = patched
        for part in parents:
            node = node[part]
        src = get_path(strip_ignored(new), p)
        if src == "<missing>":
            del node[last]
        else:
            node[last] = copy.deepcopy(src)
    assert patched == strip_ignored(new)
