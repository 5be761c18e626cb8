"""The kcp server as a real stdio subprocess, driving the fake kubectl (tests/support/bin/kubectl)."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError
from mcp.client.subscriptions import ResourceUpdated
from mcp_types import INVALID_PARAMS

from asyncai_watch.core.events import EVENTS_MIME_TYPE
from asyncai_watch.server.eventlog import AFTER_META_KEY
from tests.support.fake_kubectl import FakeCluster
from tests.support.kcp_helpers import WAIT, events_of, kcp_client, watch_starts

URI = "kcp-events://watch/root:app/configmaps?namespace=default"


@pytest.fixture
def cluster(tmp_path: Path) -> FakeCluster:
    return FakeCluster(tmp_path / "cluster")


async def _read(client: Client, uri: str) -> list[dict[str, Any]]:
    with anyio.fail_after(WAIT):
        content = (await client.read_resource(uri)).contents[0]
    assert content.mime_type == EVENTS_MIME_TYPE
    return events_of(content.text)  # type: ignore[union-attr]


async def _next_update(sub: Any, uri: str) -> None:
    with anyio.fail_after(WAIT):
        ev = await sub.__anext__()
    assert ev == ResourceUpdated(uri=uri)


@pytest.mark.anyio
async def test_catalog_capabilities_and_tools(tmp_path: Path, cluster: FakeCluster) -> None:
    async with kcp_client(tmp_path, cluster) as client:
        assert client.protocol_version == "2026-07-28"
        assert client.server_capabilities.resources is not None
        assert client.server_capabilities.resources.subscribe is True
        templates = {t.uri_template: t for t in (await client.list_resource_templates()).resource_templates}
        watch = templates[
            "kcp-events://watch/{workspace}/{resource}{?namespace,labelSelector,fieldSelector,kcp}"
        ]
        assert watch.mime_type == EVENTS_MIME_TYPE
        assert watch.description is not None
        assert watch.description.endswith(
            'Example: await watch_start(name="cm", uri="kcp-events://watch/root:app/configmaps?namespace=*")'
        )
        assert templates["kcp-api://{workspace}/resources{?kcp}"].mime_type == "application/json"
        tools = {t.name: t.annotations for t in (await client.list_tools()).tools}
        assert set(tools) == {"get_api_resources", "get", "list", "apply", "delete"}
        for name in ("get_api_resources", "get", "list"):
            annotations = tools[name]
            assert annotations is not None
            assert annotations.read_only_hint is True
        for name in ("apply", "delete"):
            annotations = tools[name]
            assert annotations is not None
            assert annotations.destructive_hint is True
        api = json.loads((await client.read_resource("kcp-api://root:app/resources")).contents[0].text)  # type: ignore[union-attr]
        tool = await client.call_tool("get_api_resources", {"workspace": "root:app"})
        assert json.loads(tool.content[0].text) == api  # type: ignore[union-attr]
        assert {
            "name": "configmaps",
            "shortNames": ["cm"],
            "kind": "ConfigMap",
            "namespaced": True,
        }.items() <= next(r for r in api if r["name"] == "configmaps").items()


@pytest.mark.anyio
async def test_event_notification_read_and_duplicate_added_suppressed(
    tmp_path: Path, cluster: FakeCluster
) -> None:
    seeded = cluster.create("seeded", {"a": "1"})
    async with kcp_client(tmp_path, cluster) as client, client.listen(resource_subscriptions=[URI]) as sub:
        assert await _read(client, URI) == []  # the seed is the baseline: no events
        cluster.create("fresh", {"k": "v"})
        await _next_update(sub, URI)
        (added,) = await _read(client, URI)
        assert added["type"] == "ADDED"
        assert added["seq"] >= 1
        assert added["object"]["metadata"]["name"] == "fresh"
        assert "managedFields" not in added["object"]["metadata"]
        # kubectl re-printing a known object at the same resourceVersion is suppressed...
        cluster.raw_event({"type": "ADDED", "object": seeded})
        # ...so the next thing readers see is the patch, with old.
        cluster.patch("seeded", {"a": "2"})
        await _next_update(sub, URI)
        events = await _read(client, URI)
        assert [(e["seq"], e["type"]) for e in events] == [
            (added["seq"], "ADDED"),
            (added["seq"] + 1, "MODIFIED"),
        ]
        assert events[1]["old"]["data"] == {"a": "1"}
        assert events[1]["object"]["data"] == {"a": "2"}
        cluster.delete("fresh")
        await _next_update(sub, URI)
        assert (await _read(client, URI))[-1]["type"] == "DELETED"


@pytest.mark.anyio
async def test_dropped_stream_relists_and_reports_the_gap(tmp_path: Path, cluster: FakeCluster) -> None:
    cluster.create("stays")
    cluster.create("changes", {"v": "1"})
    cluster.create("goes")
    async with (
        watch_starts() as starts,
        kcp_client(tmp_path, cluster, starts=starts) as client,
        client.listen(resource_subscriptions=[URI]) as sub,
    ):
        assert await _read(client, URI) == []
        await starts.next()
        # The API server drops the watch.
        cluster.drop_streams(
            1, 'error: an error on the server ("unable to decode an event from the watch stream")'
        )
        await _next_update(sub, URI)  # the in-band ERROR
        (err,) = await _read(client, URI)
        assert err["type"] == "ERROR"
        assert "unable to decode an event" in err["message"]
        # Changes whose history the API server no longer has (compacted): whichever watch resumes
        # after them gets 410 Expired, and the re-list reports them.
        with cluster.quiet():
            cluster.patch("changes", {"v": "2"})
            cluster.delete("goes")
            cluster.create("new")
        await starts.next()  # a watch after the error is streaming (resumed, or after the re-list)
        cluster.drop_streams(0)
        seen: list[dict[str, Any]] = []
        with anyio.fail_after(WAIT):
            while len(seen) < 3:  # awaiting notifications until the three gap events arrived
                await _next_update(sub, URI)
                seen = [e for e in await _read(client, URI) if e.get("synthetic")]
        got = sorted((e["type"], e["object"]["metadata"]["name"]) for e in seen)
        assert got == [("ADDED", "new"), ("DELETED", "goes"), ("MODIFIED", "changes")]
        modified = next(e for e in seen if e["type"] == "MODIFIED")
        assert modified["old"]["data"] == {"v": "1"}


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        (
            "kcp-events://watch/root:app/confgmaps",
            ['the server doesn\'t have a resource type "confgmaps"', "did you mean: configmaps"],
        ),
        (
            "kcp-events://watch/root:nope/configmaps",
            ["could not find the requested resource", "workspace 'root:nope' was not found"],
        ),
        ("kcp-events://watch/root:app/configmaps?labelSelector=a%20b", ["unable to parse requirement"]),
        ("kcp-events://watch/root:app/configmaps?nmspace=x", ["unknown query parameter 'nmspace'"]),
    ],
)
async def test_bad_input_fails_the_first_read_clearly(
    tmp_path: Path, cluster: FakeCluster, uri: str, expected: list[str]
) -> None:
    async with kcp_client(tmp_path, cluster) as client, contextlib.AsyncExitStack() as stack:
        if "unknown query parameter" in expected[0]:
            # A URI that is no watch URI at all is refused at the listen already, with the same text.
            with anyio.fail_after(WAIT), pytest.raises(MCPError) as refused:
                await stack.enter_async_context(client.listen(resource_subscriptions=[uri]))
            assert expected[0] in refused.value.error.message
        else:
            await stack.enter_async_context(client.listen(resource_subscriptions=[uri]))
        with anyio.fail_after(WAIT), pytest.raises(MCPError) as info:
            await client.read_resource(uri)
        for fragment in expected:
            assert fragment in info.value.error.message


@pytest.mark.anyio
async def test_read_only_server_remints_token_per_connect(tmp_path: Path, cluster: FakeCluster) -> None:
    counter = tmp_path / "n"
    mint = f"{sys.executable} -c \"import pathlib,uuid;p=pathlib.Path('{counter}');p.write_text(p.read_text()+'x' if p.exists() else 'x');print('tok-'+str(len(p.read_text())))\""
    async with (
        watch_starts() as starts,
        kcp_client(tmp_path, cluster, "--read-only", "--token-command", mint, starts=starts) as client,
    ):
        tools = {t.name for t in (await client.list_tools()).tools}
        assert tools == {"get_api_resources", "get", "list"}
        async with client.listen(resource_subscriptions=[URI]) as sub:
            assert await _read(client, URI) == []
            await starts.next()
            cluster.drop_streams(0)
            await starts.next()
            cluster.create("after-reconnect")
            await _next_update(sub, URI)
    tokens = (cluster.root / "tokens.log").read_text().split()
    # One token for the seed connection, a fresh one for the reconnect (each used by list and watch).
    assert "tok-1" in tokens
    assert "tok-2" in tokens


@pytest.mark.anyio
async def test_tools_apply_get_list_delete(tmp_path: Path, cluster: FakeCluster) -> None:
    async with kcp_client(tmp_path, cluster) as client:
        manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "t1"}, "data": {"x": "1"}}
        res = await client.call_tool("apply", {"workspace": "root:app", "manifest": json.dumps(manifest)})
        assert not res.is_error, res.content
        got = json.loads(
            (await client.call_tool("get", {"workspace": "root:app", "resource": "cm", "name": "t1"}))
            .content[0]
            .text  # type: ignore[union-attr]
        )
        assert got["data"] == {"x": "1"}
        assert "managedFields" not in got["metadata"]
        listed = json.loads(
            (
                await client.call_tool(
                    "list", {"workspace": "root:app", "resource": "configmaps", "namespace": "*"}
                )
            )
            .content[0]
            .text  # type: ignore[union-attr]
        )
        assert [o["metadata"]["name"] for o in listed] == ["t1"]
        res = await client.call_tool(
            "delete",
            {"workspace": "root:app", "resource": "configmaps", "name": "t1", "namespace": "default"},
        )
        assert res.content[0].text == 'configmap "t1" deleted'  # type: ignore[union-attr]
        missing = await client.call_tool("get", {"workspace": "root:app", "resource": "cm", "name": "t1"})
        assert missing.is_error
        assert 'configmaps "t1" not found' in missing.content[0].text  # type: ignore[union-attr]


@pytest.mark.anyio
async def test_relabel_out_of_and_back_into_a_label_selector(tmp_path: Path, cluster: FakeCluster) -> None:
    # The API server matches a selector watch against the old and the new object: leaving the
    # selector is DELETED (the last matching state), entering it is ADDED.
    uri = "kcp-events://watch/root:app/configmaps?namespace=default&labelSelector=app%3Dweb"
    seeded = cluster.create("web-1", {"v": "1"}, labels={"app": "web"})
    cluster.create("db-1", labels={"app": "db"})
    async with (
        watch_starts() as starts,
        kcp_client(tmp_path, cluster, starts=starts) as client,
        client.listen(resource_subscriptions=[uri]) as sub,
    ):
        assert await _read(client, uri) == []
        await starts.next()
        moved = cluster.label("web-1", {"app": "db"})
        await _next_update(sub, uri)
        (gone,) = await _read(client, uri)
        assert (gone["type"], gone["object"]["metadata"]["name"]) == ("DELETED", "web-1")
        assert gone["object"]["metadata"]["labels"] == {"app": "web"}  # the last state that matched
        assert gone["object"]["metadata"]["resourceVersion"] == moved["metadata"]["resourceVersion"]
        assert gone["object"]["metadata"]["uid"] == seeded["metadata"]["uid"]
        cluster.patch("db-1", {"x": "1"})  # matches neither before nor after: nothing
        cluster.label("web-1", {"app": "web"})
        events: list[dict[str, Any]] = []
        with anyio.fail_after(WAIT):
            while len(events) < 2:
                await _next_update(sub, uri)
                events = await _read(client, uri)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("DELETED", "web-1"),
        ("ADDED", "web-1"),
    ]
    back = events[1]
    assert back["object"]["metadata"]["labels"] == {"app": "web"}
    assert "old" not in back  # an ADDED, not a MODIFIED: readers saw it leave


@pytest.mark.anyio
async def test_omitted_namespace_is_the_kubeconfig_contexts(tmp_path: Path, cluster: FakeCluster) -> None:
    uri = "kcp-events://watch/root:app/cm"  # a short name; no namespace: the context's ("team")
    cluster.create("elsewhere", namespace="default")
    async with (
        watch_starts() as starts,
        kcp_client(tmp_path, cluster, starts=starts, namespace="team") as client,
        client.listen(resource_subscriptions=[uri]) as sub,
    ):
        assert await _read(client, uri) == []
        await starts.next()
        cluster.create("ignored", namespace="default")
        cluster.create("mine", namespace="team")
        await _next_update(sub, uri)
        events = await _read(client, uri)
    assert [(e["type"], e["object"]["metadata"]["namespace"]) for e in events] == [("ADDED", "team")]
    raw = [c[c.index("--raw") + 1] for c in cluster.calls() if "--raw" in c]
    assert raw[0] == "/clusters/root:app/api/v1/namespaces/team/configmaps"


@pytest.mark.anyio
async def test_a_watch_works_while_another_api_group_fails_discovery(
    tmp_path: Path, cluster: FakeCluster
) -> None:
    # kubectl api-resources then exits 1 but prints the groups that answered (checked with the real one).
    cluster.break_discovery("metrics.k8s.io/v1beta1")
    async with (
        watch_starts() as starts,
        kcp_client(tmp_path, cluster, starts=starts) as client,
        client.listen(resource_subscriptions=[URI]) as sub,
    ):
        assert await _read(client, URI) == []
        await starts.next()
        cluster.create("fine")
        await _next_update(sub, URI)
        (added,) = await _read(client, URI)
    assert (added["type"], added["object"]["metadata"]["name"]) == ("ADDED", "fine")


@pytest.mark.anyio
async def test_a_listen_on_a_uri_that_is_not_a_watch_is_refused(tmp_path: Path, cluster: FakeCluster) -> None:
    # kcp-api:// reads fine but never changes: a listen on it used to be acknowledged and never fire.
    async with kcp_client(tmp_path, cluster) as client:
        for uri, fragment in (
            ("kcp-api://root:app/resources", "is not watchable"),
            ("kcp-events://watch/root:app/configmaps?color=red", "unknown query parameter 'color'"),
        ):
            with anyio.fail_after(WAIT), pytest.raises(MCPError) as refused:
                async with client.listen(resource_subscriptions=[URI, uri]):
                    pass
            assert refused.value.code == INVALID_PARAMS
            assert fragment in refused.value.message
            assert "kcp-events://watch/" in refused.value.message  # what to watch instead
        # The refusal started no watcher and the connection still serves watches.
        assert [c for c in cluster.calls() if "--raw" in c] == []
        with anyio.fail_after(WAIT):
            async with client.listen(resource_subscriptions=[URI]) as sub:
                assert sub.honored.resource_subscriptions == [URI]


@pytest.mark.anyio
async def test_a_read_that_names_its_position_gets_what_is_new(tmp_path: Path, cluster: FakeCluster) -> None:
    """A read without a position gets the newest 256 events; one that sends its last seen seq (and the
    log's log_id) in ``_meta`` gets every newer event the ring holds, and a stale log_id the newest 256."""
    async with (
        watch_starts() as starts,
        kcp_client(tmp_path, cluster, starts=starts) as client,
        client.listen(resource_subscriptions=[URI]) as sub,
    ):
        base = json.loads((await client.read_resource(URI)).contents[0].text)  # type: ignore[union-attr]
        await starts.next()
        lines = "".join(
            json.dumps(
                {
                    "workspace": "root:app",
                    "resource": "configmaps",
                    "event": {
                        "type": "ADDED",
                        "object": {"metadata": {"name": f"o{i}", "namespace": "default", "uid": f"u{i}"}},
                    },
                }
            )
            + "\n"
            for i in range(300)
        )
        with cluster.events_file.open("a") as f:
            f.write(lines)
        body: dict[str, Any] = {"last_seq": 0}
        while body["last_seq"] < 300:  # each read re-arms the notification for what comes after it
            await _next_update(sub, URI)
            body = json.loads((await client.read_resource(URI)).contents[0].text)  # type: ignore[union-attr]
        assert [e["seq"] for e in body["events"]] == list(range(45, 301))  # the newest 256

        async def read_after(log_id: str, seq: int) -> list[int]:
            meta: Any = {AFTER_META_KEY: {"log_id": log_id, "seq": seq}}
            result = await client.read_resource(URI, meta=meta)
            return [e["seq"] for e in json.loads(result.contents[0].text)["events"]]  # type: ignore[union-attr]

        assert await read_after(base["log_id"], 0) == list(range(1, 301))  # all of it: the ring holds 300
        assert await read_after(base["log_id"], 290) == list(range(291, 301))
        assert await read_after(base["log_id"], 300) == []
        assert await read_after("a-log-that-restarted", 290) == list(range(45, 301))
