"""Default notice lines, with the ADR's own examples."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from asyncai_watch.core import lines as lines_module
from asyncai_watch.core.changes import annotate
from asyncai_watch.core.diff import diff_state
from asyncai_watch.core.eventlog import Sequencer
from asyncai_watch.core.events import ADDED, DELETED, MODIFIED, Event
from asyncai_watch.core.lines import _narrow, default_line, short_value


def k8s(name: str, namespace: str | None = "default", **status: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{name}", "resourceVersion": "1"}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"kind": "ConfigMap", "metadata": meta, "status": status}


def log_event(type_: str, obj: Any, old: Any = None, seq: int = 1) -> Event:
    raw: dict[str, Any] = {"seq": seq, "type": type_, "object": obj}
    if old is not None:
        raw["old"] = old
    (ev,) = Sequencer(last_seq=seq - 1).feed({"events": [raw]}).events
    annotated = annotate(ev)
    assert annotated is not None
    return annotated


# --- the ADR's examples -----------------------------------------------------------------------------


def test_adr_modified_bid_phase() -> None:
    old = k8s("bid-1", namespace=None, phase="Deciding")
    new = k8s("bid-1", namespace=None, phase="Published")
    new["metadata"]["resourceVersion"] = "2"
    assert default_line(log_event(MODIFIED, new, old)) == "MODIFIED bid-1 (status.phase: Deciding→Published)"


def test_adr_deleted_configmap() -> None:
    assert default_line(log_event(DELETED, k8s("watch-probe"))) == "DELETED default/watch-probe"


def test_adr_added_configmap_namespaced() -> None:
    assert default_line(log_event(ADDED, k8s("final-check"))) == "ADDED default/final-check"


def test_adr_memo_state_diff() -> None:
    # "two writes during one turn | one notice `ADDED owner`, `MODIFIED todo`"
    events = [annotate(e) for e in diff_state({"todo": "buy milk"}, {"todo": "buy eggs", "owner": "alice"})]
    lines = [default_line(e) for e in events if e is not None]
    assert lines == ["MODIFIED todo (buy milk→buy eggs)", "ADDED owner"]


def test_adr_gap_and_error() -> None:
    s = Sequencer(last_seq=4)
    gap = s.feed({"events": [{"seq": 17, "type": "ERROR", "message": "kubectl watch ended: EOF"}]}).events
    assert [default_line(e) for e in gap] == [
        "GAP: missed 12 events (seq 5-16)",
        "ERROR: kubectl watch ended: EOF",
    ]


# --- the rest of the forms --------------------------------------------------------------------------


def test_more_than_three_changes() -> None:
    old = {"metadata": {"name": "vm-1"}, "status": {"a": 1, "b": 2, "c": 3, "d": 4, "e": 5}}
    new = {"metadata": {"name": "vm-1"}, "status": {"a": 10, "b": 20, "c": 30, "d": 40, "e": 50}}
    line = default_line(log_event(MODIFIED, new, old))
    assert line == "MODIFIED vm-1 (status.a: 1→10, status.b: 2→20, status.c: 3→30, +2 more)"


def test_added_and_removed_fields_and_values() -> None:
    old = {"metadata": {"name": "vm"}, "status": {"ip": None, "gone": True}}
    new = {"metadata": {"name": "vm"}, "status": {"ip": "10.0.0.7", "ready": False}}
    line = default_line(log_event(MODIFIED, new, old))
    assert (
        line
        == "MODIFIED vm (status.gone: true→(unset), status.ip: null→10.0.0.7, status.ready: (unset)→false)"
    )


def test_long_values_are_cut_and_same_looking_sides_show_the_path() -> None:
    old = {"metadata": {"name": "x"}, "spec": {"note": "a" * 100, "items": list(range(50))}}
    new = {"metadata": {"name": "x"}, "spec": {"note": "b" * 100, "items": [*range(50), 50]}}
    line = default_line(log_event(MODIFIED, new, old))
    assert line == f"MODIFIED x (spec.items, spec.note: {'a' * 39}…→{'b' * 39}…)"


def test_container_change_is_followed_to_the_one_difference() -> None:
    def pod(ready: str, phase: str) -> dict[str, Any]:
        conditions = [{"type": "Ready", "status": ready}, {"type": "PodScheduled", "status": "True"}]
        return {
            "metadata": {"name": "web", "namespace": "prod"},
            "status": {"phase": phase, "conditions": conditions},
        }

    line = default_line(log_event(MODIFIED, pod("True", "Running"), pod("False", "Pending")))
    assert (
        line == "MODIFIED prod/web (status.conditions[0].status: False→True, status.phase: Pending→Running)"
    )
    # Two differing elements: no single place to point at, so the lists are shown (cut).
    old = {"metadata": {"name": "x"}, "spec": {"ports": [1, 2]}}
    new = {"metadata": {"name": "x"}, "spec": {"ports": [3, 4]}}
    assert default_line(log_event(MODIFIED, new, old)) == "MODIFIED x (spec.ports: [1,2]→[3,4])"
    # A key added inside: followed to it, the old side unset.
    old = {"metadata": {"name": "x"}, "spec": {"a": {"b": {"c": 1}}}}
    new = {"metadata": {"name": "x"}, "spec": {"a": {"b": {"c": 1, "d": 2}}}}
    assert default_line(log_event(MODIFIED, new, old)) == "MODIFIED x (spec.a.b.d: (unset)→2)"


def test_keys_with_dots_resolve() -> None:
    old = {"metadata": {"name": "x", "labels": {"app.kubernetes.io/name": "web"}}}
    new = {"metadata": {"name": "x", "labels": {"app.kubernetes.io/name": "api"}}}
    assert (
        default_line(log_event(MODIFIED, new, old))
        == "MODIFIED x (metadata.labels.app.kubernetes.io/name: web→api)"
    )
    deeper = {"metadata": {"name": "x"}, "spec": {"a.b": {"c": 1}}}
    deeper_new = {"metadata": {"name": "x"}, "spec": {"a.b": {"c": 2}}}
    assert default_line(log_event(MODIFIED, deeper_new, deeper)) == "MODIFIED x (spec.a.b.c: 1→2)"


def test_state_list_items_use_the_key() -> None:
    (ev,) = diff_state([{"id": 7, "v": 1}], [{"id": 7, "v": 2}])
    out = annotate(ev)
    assert out is not None
    assert default_line(out) == "MODIFIED 7 (v: 1→2)"
    (gone,) = diff_state([{"id": 7}], [])
    assert default_line(gone) == "DELETED 7"
    pods = diff_state([], [k8s("web", namespace="prod")])
    assert default_line(pods[0]) == "ADDED prod/web"  # Kubernetes-like wins over the uid key


def test_compact_json_otherwise() -> None:
    assert default_line(log_event(ADDED, {"path": "/tmp/a", "size": 3})) == 'ADDED {"path":"/tmp/a","size":3}'
    (ev,) = diff_state([{"x": 1}], [{"x": 1}, {"y": [1, 2]}])
    assert default_line(ev) == 'ADDED {"y":[1,2]}'


def test_text_state() -> None:
    (ev,) = diff_state("draft", "final")
    assert default_line(ev) == "CHANGED (draft→final)"
    (ev,) = diff_state("line one\nline two", "line one\nline 2")
    assert default_line(ev) == "CHANGED (line one⏎line two→line one⏎line 2)"


def test_gap_variants() -> None:
    s = Sequencer(last_seq=4)
    (gap, _) = s.feed({"events": [{"seq": 6, "type": "X"}]}).events
    assert default_line(gap) == "GAP: missed 1 event (seq 5)"
    s = Sequencer(last_seq=0)
    (gap, *_) = s.feed({"events": [{"seq": i, "type": "X"} for i in range(1, 6)]}, limit=2).events
    assert default_line(gap) == "GAP: missed 3 events (seq 1-3), more than 2 new events in one update"
    s = Sequencer(last_seq=50)
    (gap, _) = s.feed({"events": [{"seq": 1, "type": "X"}]}).events
    assert default_line(gap) == "GAP: the event log restarted (seq 50 → 1); events in between may be missed"


def test_a_gap_after_a_restart_with_an_empty_new_log_reads_as_a_sentence() -> None:
    s = Sequencer()
    s.prime({"log_id": "a", "last_seq": 1, "events": [{"seq": 1, "type": "X"}]})
    (gap,) = s.feed({"log_id": "b", "last_seq": 0, "events": []}).events
    assert default_line(gap) == "GAP: the event log restarted after seq 1; events since may be missed"


def test_a_gap_past_the_servers_retention_names_it() -> None:
    s = Sequencer(last_seq=2)
    body = {
        "retention": "changes of the last 7d, at most 64kB per table",
        "events": [{"seq": 9, "type": "X"}],
    }
    (gap, _) = s.feed(body).events
    assert default_line(gap) == (
        "GAP: missed 6 events (seq 3-8): older than the log keeps (changes of the last 7d, at most 64kB per table)"
    )


def test_error_without_message() -> None:
    (ev,) = Sequencer(last_seq=0).feed({"events": [{"seq": 1, "type": "ERROR", "code": 7}]}).events
    assert default_line(ev) == 'ERROR: {"code":7}'


def test_short_value_forms() -> None:
    assert [short_value(v) for v in ("x", None, True, False, 3, 1.5, [1], {"a": 1})] == [
        "x",
        "null",
        "true",
        "false",
        "3",
        "1.5",
        "[1]",
        '{"a":1}',
    ]


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda k: st.lists(k) | st.dictionaries(st.text(), k),
    ),
    st.recursive(
        st.none() | st.integers() | st.text(), lambda k: st.lists(k) | st.dictionaries(st.text(), k)
    ),
)
def test_any_event_gets_one_line(old: Any, new: Any) -> None:
    for ev in diff_state(old, new):
        out = annotate(ev)
        if out is None:
            continue
        line = default_line(out)
        assert line.startswith(out.type)
        assert "\n" not in line


# --- the narrowing fast path against the general rule ------------------------------------------------

_UNSEEN = object()


def narrow_reference(path: str, a: Any, b: Any) -> tuple[str, Any, Any]:
    """The narrowing rule written plainly: while both sides are lists of one length (at most
    100) with one differing element, or dicts with one differing string key, step into it."""
    for _ in range(4):
        if type(a) is list and type(b) is list and len(a) == len(b) <= 100:
            diff = [i for i in range(len(a)) if a[i] != b[i]]
            if len(diff) != 1:
                break
            path, a, b = f"{path}[{diff[0]}]", a[diff[0]], b[diff[0]]
        elif type(a) is dict and type(b) is dict:
            keys = [k for k in {**a, **b} if a.get(k, _UNSEEN) != b.get(k, _UNSEEN)]
            if len(keys) != 1 or type(keys[0]) is not str:
                break
            k = keys[0]
            path, a, b = (f"{path}.{k}" if path else k), a.get(k, _UNSEEN), b.get(k, _UNSEEN)
        else:
            break
    return path, a, b


narrow_values = st.recursive(
    st.none() | st.integers(0, 2) | st.sampled_from(["a", "b"]),
    lambda k: st.lists(k, max_size=3) | st.dictionaries(st.sampled_from(["p", "q", 1]), k, max_size=3),
    max_leaves=10,
)


@given(path=st.sampled_from(["", "status", "spec.a"]), a=narrow_values, b=narrow_values)
def test_narrowing_follows_the_rule(path: str, a: Any, b: Any) -> None:
    got = _narrow(path, a, b)
    want = narrow_reference(path, a, b)
    assert got[0] == want[0]
    # The sides, the lines module's own "missing" standing for the reference's.
    assert [_UNSEEN if v is lines_module._MISSING else v for v in got[1:]] == list(want[1:])


def test_narrowing_into_a_list_of_many_and_an_added_key() -> None:
    a = [{"n": i} for i in range(100)]
    b = [*a[:42], {"n": 42, "new": True}, *a[43:]]
    assert _narrow("items", a, b) == ("items[42].new", lines_module._MISSING, True)
    assert _narrow("items", [*a, {}], [*b, {}])[0] == "items"  # more than 100: not followed
