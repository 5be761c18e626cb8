"""Sans-IO pieces of the kcp server: URI parsing, the concatenated-JSON parser, reconcile and dedupe."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncai_servers.kcp.__main__ import _backoff, _parser
from asyncai_servers.kcp.jsonstream import JsonStreamError, JsonStreamParser
from asyncai_servers.kcp.kubectl import ApiResource, WatchPath, api_path, find_resource, server_base
from asyncai_servers.kcp.state import (
    WatchState,
    apply_events,
    is_too_large_resource_version,
    reconcile,
    strip_managed_fields,
)
from asyncai_servers.kcp.uri import UriError, parse_api_uri, parse_watch_uri, validate_tool_args
from asyncai_servers.kcp.watcher import stderr_says_expired, stderr_says_too_large

# --- URIs -------------------------------------------------------------------------------------------


def test_watch_uri_all_fields() -> None:
    t = parse_watch_uri(
        "kcp-events://watch/root:app/configmaps?namespace=*&labelSelector=app%3Dweb,tier!%3Ddb"
        "&fieldSelector=metadata.name%3Dx&kcp=prod"
    )
    assert (t.workspace, t.resource, t.namespace, t.all_namespaces) == ("root:app", "configmaps", "*", True)
    assert t.label_selector == "app=web,tier!=db"
    assert t.field_selector == "metadata.name=x"
    assert t.kcp == "prod"


def test_watch_uri_defaults() -> None:
    t = parse_watch_uri("kcp-events://watch/root/deployments.apps")
    assert (t.workspace, t.resource, t.namespace, t.label_selector, t.kcp) == (
        "root",
        "deployments.apps",
        None,
        None,
        None,
    )
    assert not t.all_namespaces
    assert parse_watch_uri("kcp-events://watch/root:a/cm?namespace=default").namespace == "default"


@pytest.mark.parametrize(
    ("uri", "fragment"),
    [
        ("kcp-events://watch/root:app", "expected kcp-events://watch/{workspace}/{resource}"),
        ("kcp-events://watch/Root/configmaps", "workspace 'Root'"),
        ("kcp-events://watch/root::x/configmaps", "workspace 'root::x'"),
        ("kcp-events://watch/root/Config_Maps", "resource 'Config_Maps'"),
        ("kcp-events://watch/root/configmaps?namespace=Bad_NS", "namespace 'Bad_NS'"),
        ("kcp-events://watch/root/configmaps?ns=default", "unknown query parameter 'ns'"),
        ("memo://notes", "not a kcp watch URI"),
    ],
)
def test_watch_uri_rejections_name_the_problem(uri: str, fragment: str) -> None:
    with pytest.raises(UriError, match=re.escape(fragment)):
        parse_watch_uri(uri)


def test_api_uri() -> None:
    assert parse_api_uri("kcp-api://root:app/resources").workspace == "root:app"
    assert parse_api_uri("kcp-api://root/resources?kcp=alt").kcp == "alt"
    with pytest.raises(UriError, match="expected kcp-api://"):
        parse_api_uri("kcp-api://root:app/other")


# --- the concatenated JSON stream --------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet=st.characters(codec="utf-8")),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
documents = st.lists(st.dictionaries(st.text(max_size=6), json_values, max_size=3), min_size=1, max_size=3)


def _kubectl_text(docs: list[Any]) -> bytes:
    # kubectl -o json: 4-space indent, non-ASCII kept as UTF-8, one document after another.
    return "".join(json.dumps(d, indent=4, ensure_ascii=False) + "\n" for d in docs).encode()


# Quadratic in the text (every cut parses it all): on a machine kept busy it needs more CPU time
# than the suite's default per-test bound, which is there to catch a hang, not to time this.
@pytest.mark.timeout(600)
@given(documents)
def test_stream_split_at_every_byte_offset(docs: list[Any]) -> None:
    data = _kubectl_text(docs) + '{"tail": "é😀\\"}"}'.encode()
    want = [*docs, {"tail": 'é😀"}'}]
    for cut in range(len(data) + 1):
        parser = JsonStreamParser()
        got = parser.feed(data[:cut]) + parser.feed(data[cut:])
        assert got == want, cut
        assert not parser.pending


@given(documents, st.lists(st.integers(min_value=1, max_value=7), min_size=1))
def test_stream_any_chunking(docs: list[Any], sizes: list[int]) -> None:
    data = _kubectl_text(docs)
    parser = JsonStreamParser()
    got: list[Any] = []
    pos, i = 0, 0
    while pos < len(data):
        step = sizes[i % len(sizes)]
        got += parser.feed(data[pos : pos + step])
        pos, i = pos + step, i + 1
    assert got == docs


def test_stream_pending_and_errors() -> None:
    parser = JsonStreamParser()
    assert parser.feed(b'{"a": [1, {"b": "}"}') == []
    assert parser.pending
    assert parser.feed(b"]}") == [{"a": [1, {"b": "}"}]}]
    assert not parser.pending
    assert parser.feed("é".encode()[:1]) == []
    assert parser.pending  # half a UTF-8 sequence is still buffered
    with pytest.raises(JsonStreamError, match="expected a JSON object or array"):
        JsonStreamParser().feed(b"error: the server doesn't have a resource type\n")
    with pytest.raises(JsonStreamError, match="malformed JSON"):
        JsonStreamParser().feed(b'{"a": tru}')


# --- reconcile and dedupe -------------------------------------------------------------------------------


def _obj(uid: str, rv: int, data: str = "") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"cm-{uid}",
            "namespace": "default",
            "uid": uid,
            "resourceVersion": str(rv),
            "managedFields": [{"manager": "kubectl"}],
        },
        "data": {"v": data},
    }


def test_managed_fields_stripped_everywhere() -> None:
    state = WatchState()
    state.seed([_obj("a", 1)])
    assert "managedFields" not in state.known["a"]["metadata"]
    out = state.on_event({"type": "MODIFIED", "object": _obj("a", 2, "x")})
    (ev,) = out.events
    assert "managedFields" not in ev["object"]["metadata"]
    assert "managedFields" not in ev["old"]["metadata"]
    assert ev["old"]["metadata"]["resourceVersion"] == "1"
    assert strip_managed_fields("text") == "text"


def test_duplicate_added_suppressed_and_changed_added_becomes_modified() -> None:
    state = WatchState()
    state.seed([_obj("a", 1), _obj("b", 5)])
    assert state.on_event({"type": "ADDED", "object": _obj("a", 1)}).events == []
    (ev,) = state.on_event({"type": "ADDED", "object": _obj("b", 6)}).events
    assert ev["type"] == "MODIFIED"
    assert ev["old"]["metadata"]["resourceVersion"] == "5"
    (new,) = state.on_event({"type": "ADDED", "object": _obj("c", 7)}).events
    assert new["type"] == "ADDED"
    assert "old" not in new
    assert state.on_event({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}).events == []


def test_watch_error_events() -> None:
    state = WatchState()
    gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version: 1 (5)"}
    assert state.on_event({"type": "ERROR", "object": gone}).expired
    out = state.on_event(
        {"type": "ERROR", "object": {"code": 500, "reason": "InternalError", "message": "boom"}}
    )
    assert out.events == [{"type": "ERROR", "message": "boom (500 InternalError)"}]
    assert not out.expired


def test_reconcile_gap_events() -> None:
    known = {"a": strip_managed_fields(_obj("a", 1)), "b": strip_managed_fields(_obj("b", 2))}
    events = reconcile(known, [_obj("a", 1), _obj("b", 3, "new"), _obj("c", 4)])
    kinds = sorted((e["type"], e["object"]["metadata"]["uid"]) for e in events)
    assert kinds == [("ADDED", "c"), ("MODIFIED", "b")]
    assert reconcile(known, [])[0]["type"] == "DELETED"


# A fake cluster driven by hypothesis: changes happen while the watch is up (seen live) or down (seen
# only through the re-list on reconnect); every reconnect also replays kubectl -w's ADDED burst.
ops = st.lists(
    st.one_of(
        st.tuples(st.just("create"), st.integers(0, 5)),
        st.tuples(st.just("update"), st.integers(0, 5)),
        st.tuples(st.just("delete"), st.integers(0, 5)),
        st.tuples(st.just("drop"), st.just(0)),
        st.tuples(st.just("reconnect"), st.just(0)),
    ),
    max_size=40,
)


@given(st.sets(st.integers(0, 5)), ops)
def test_reconcile_property_events_replay_to_final_state(
    initial: set[int], steps: list[tuple[str, int]]
) -> None:
    rv = 0
    cluster: dict[str, dict[str, Any]] = {}

    def bump(uid: str, data: str) -> dict[str, Any]:
        nonlocal rv
        rv += 1
        cluster[uid] = _obj(uid, rv, data)
        return cluster[uid]

    for n in initial:
        bump(f"u{n}", "init")
    state = WatchState()
    state.seed(list(cluster.values()))
    seed = dict(state.known)
    delivered: list[dict[str, Any]] = []
    connected = True

    def reconnect() -> None:
        delivered.extend(state.relist(list(cluster.values())))
        for obj in list(cluster.values()):  # kubectl -w's initial list, printed as ADDED
            delivered.extend(state.on_event({"type": "ADDED", "object": obj}).events)

    for op, n in steps:
        uid = f"u{n}"
        live: dict[str, Any] | None = None
        if op == "create" and uid not in cluster:
            live = {"type": "ADDED", "object": bump(uid, "c")}
        elif op == "update" and uid in cluster:
            live = {"type": "MODIFIED", "object": bump(uid, f"m{rv}")}
        elif op == "delete" and uid in cluster:
            rv += 1
            live = {"type": "DELETED", "object": cluster.pop(uid)}
        elif op == "drop":
            connected = False
        elif op == "reconnect" and not connected:
            reconnect()
            connected = True
        if live is not None and connected:
            delivered.extend(state.on_event(live).events)
    if not connected:
        reconnect()
    final = {k: strip_managed_fields(v) for k, v in cluster.items()}
    assert apply_events(seed, delivered) == final
    # No event restates what the reader already has: ADDED only for unknown uids, never twice.
    shadow = dict(seed)
    for ev in delivered:
        key = ev["object"]["metadata"]["uid"]
        if ev["type"] == "ADDED":
            assert key not in shadow
        if ev["type"] == "MODIFIED":
            assert ev["old"] == shadow[key]
            assert ev["old"] != ev["object"]
        shadow = apply_events(shadow, [ev])


@pytest.mark.parametrize(
    ("args", "refused"),
    [
        ({"resource": "configmaps", "name": "--all"}, "name='--all'"),  # would delete every object
        ({"resource": "--as=system:admin"}, "resource='--as=system:admin'"),
        ({"resource": "cm", "namespace": "-A"}, "namespace='-A'"),
        ({"resource": "cm", "labelSelector": "--selector=x"}, "labelSelector"),
        ({"resource": "cm", "kcp": "--kubeconfig=/etc/x"}, "kcp="),
    ],
)
def test_tool_arguments_that_kubectl_would_read_as_flags_are_refused(
    args: dict[str, str], refused: str
) -> None:
    with pytest.raises(UriError, match=refused):
        validate_tool_args(args)


def test_ordinary_tool_arguments_pass() -> None:
    validate_tool_args(
        {"resource": "deployments.apps", "name": "web-1", "namespace": "*", "labelSelector": "app=x"}
    )


# --- discovery -> API paths ----------------------------------------------------------------------------


def _res(
    name: str, api_version: str, kind: str, *, short: tuple[str, ...] = (), namespaced: bool = True
) -> ApiResource:
    return ApiResource(
        name=name,
        short_names=short,
        api_version=api_version,
        namespaced=namespaced,
        kind=kind,
        verbs=("list", "watch"),
    )


RESOURCES = [
    _res("configmaps", "v1", "ConfigMap", short=("cm",)),
    _res("events", "v1", "Event", short=("ev",)),
    _res("namespaces", "v1", "Namespace", short=("ns",), namespaced=False),
    _res("deployments", "apps/v1", "Deployment", short=("deploy",)),
    _res("events", "events.k8s.io/v1", "Event", short=("ev",)),
    _res("workspaces", "tenancy.kcp.io/v1alpha1", "Workspace", short=("ws",), namespaced=False),
]


@pytest.mark.parametrize(
    ("wanted", "found"),
    [
        ("configmaps", "configmaps"),
        ("cm", "configmaps"),
        ("configmap", "configmaps"),
        ("deploy", "deployments.apps"),
        ("deployments.apps", "deployments.apps"),
        ("deployment.v1.apps", "deployments.apps"),
        ("events", "events"),  # the core group wins an unqualified name, as in kubectl
        ("events.events.k8s.io", "events.events.k8s.io"),
        ("ws", "workspaces.tenancy.kcp.io"),
    ],
)
def test_find_resource_accepts_what_kubectl_get_does(wanted: str, found: str) -> None:
    res = find_resource(wanted, RESOURCES)
    assert res is not None
    assert res.qualified == found


def test_find_resource_unknown() -> None:
    assert find_resource("confgmaps", RESOURCES) is None
    assert find_resource("deployments.batch", RESOURCES) is None


def test_api_paths_carry_the_workspace_group_and_namespace() -> None:
    cm, _, ns, deploy, _, ws = RESOURCES
    assert api_path(cm, "root:app", "default") == "/clusters/root:app/api/v1/namespaces/default/configmaps"
    assert api_path(cm, "root:app", None) == "/clusters/root:app/api/v1/configmaps"  # all namespaces
    assert api_path(deploy, "root", "x") == "/clusters/root/apis/apps/v1/namespaces/x/deployments"
    assert api_path(ns, "root", "default") == "/clusters/root/api/v1/namespaces"  # cluster-scoped
    assert api_path(ws, "root", None) == "/clusters/root/apis/tenancy.kcp.io/v1alpha1/workspaces"


def test_watch_uri_encodes_selectors_and_resumes_from_the_resource_version() -> None:
    path = WatchPath(
        path="/clusters/root/api/v1/configmaps",
        resource=RESOURCES[0],
        namespace=None,
        label_selector="app=web,tier!=db",
        field_selector="metadata.name=x y",
    )
    assert path.list_uri() == (
        "/clusters/root/api/v1/configmaps?labelSelector=app%3Dweb%2Ctier%21%3Ddb&fieldSelector=metadata.name%3Dx%20y"
    )
    assert path.watch_uri("42") == (
        "/clusters/root/api/v1/configmaps?watch=true&resourceVersion=42&allowWatchBookmarks=true"
        "&labelSelector=app%3Dweb%2Ctier%21%3Ddb&fieldSelector=metadata.name%3Dx%20y"
    )
    assert "resourceVersion" not in path.watch_uri(None)


def test_bookmark_carries_its_resource_version_and_no_event() -> None:
    out = WatchState().on_event(
        {"type": "BOOKMARK", "object": {"kind": "ConfigMap", "metadata": {"resourceVersion": "77"}}}
    )
    assert out.events == []
    assert out.resource_version == "77"


def test_api_paths_carry_the_server_urls_path_prefix() -> None:
    """kubectl sends ``--raw`` paths relative to the host: kcp behind ``https://proxy/kcp`` needs /kcp."""
    cm = ApiResource(
        name="configmaps", short_names=("cm",), api_version="v1", namespaced=True, kind="ConfigMap", verbs=()
    )
    assert (
        api_path(cm, "root:app", "default", prefix="/kcp")
        == "/kcp/clusters/root:app/api/v1/namespaces/default/configmaps"
    )
    assert api_path(cm, "root", None, prefix="/a/b/") == "/a/b/clusters/root/api/v1/configmaps"
    assert server_base("https://proxy.test/kcp/") == "https://proxy.test/kcp"
    assert server_base("https://proxy.test/kcp/clusters/root:app") == "https://proxy.test/kcp"
    assert server_base("https://kcp.test:6443/clusters/root") == "https://kcp.test:6443"
    assert server_base("https://kcp.test:6443") == "https://kcp.test:6443"


@pytest.mark.parametrize(
    ("stderr", "expired"),
    [
        ("Error from server (Expired): too old resource version: 5 (7)", True),
        ("Error from server (Gone): the resourceVersion is gone", True),
        ("E0101 00:00:00.000000 1 x.go:1] noise\nError from server (Expired): too old", True),
        ("error: dial tcp 10.0.4.10:6443: connect: connection refused", False),
        ("Error from server (InternalError): object 410 Expired in cache", False),
        ("error: token Expired", False),
    ],
)
def test_expiry_is_read_from_kubectls_error_form_only(stderr: str, expired: bool) -> None:
    assert stderr_says_expired(stderr) is expired


def test_too_large_resource_version_status() -> None:
    cause = {
        "details": {
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]
        }
    }
    assert is_too_large_resource_version({"code": 504, "reason": "Timeout", **cause})
    assert is_too_large_resource_version(
        {"code": 504, "reason": "Timeout", "message": "Too large resource version: 9, current: 3"}
    )
    assert not is_too_large_resource_version(
        {"code": 504, "reason": "Timeout", "message": "request timed out"}
    )
    assert not is_too_large_resource_version({"code": 500, "reason": "InternalError", "message": "boom"})
    assert stderr_says_too_large("Error from server (Timeout): Too large resource version: 9, current: 3")
    assert not stderr_says_too_large("Error from server (Timeout): the request timed out")


# --- the --backoff option ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "delays"),
    [
        ("0.8:30", [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0]),
        ("0.5:1", [0.5, 1.0, 1.0]),
        ("2", [2.0, 2.0]),  # MAX defaults to INITIAL
        ("0:0", [0.0, 0.0]),  # the tests' setting: reconnect at once
    ],
)
def test_backoff_option_doubles_from_initial_up_to_max_and_never_gives_up(
    spec: str, delays: list[float]
) -> None:
    backoff = _backoff(spec, _parser("asyncai-mcp-kcp", read_only=False))
    assert [backoff.delay(n) for n in range(len(delays))] == pytest.approx(delays)
    assert backoff.delay(10_000) == pytest.approx(delays[-1])


@pytest.mark.parametrize("spec", ["soon", "2:1", "-1:4", "1:inf", "nan:nan"])
def test_backoff_option_refuses_what_is_not_a_finite_range(
    spec: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _backoff(spec, _parser("asyncai-mcp-kcp", read_only=False))
    assert exit_info.value.code == 2
    assert "--backoff" in capsys.readouterr().err
