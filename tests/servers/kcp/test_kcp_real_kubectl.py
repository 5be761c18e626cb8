"""The kcp server with the REAL kubectl (v1.33.9) against a fake Kubernetes API server (loopback).

What users run is the real kubectl, so these pin that the server's argv, its parsing of kubectl's
actual output, the dedupe of kubectl's ADDED burst and the reconnect paths work with it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.subscriptions import ResourceUpdated

from tests.support.fake_kube_apiserver import FakeApiServer, run_fake_apiserver
from tests.support.fake_kubectl import FakeCluster
from tests.support.kcp_helpers import WAIT, events_of, kcp_client, write_kubeconfig
from tests.support.kubectl_bin import real_kubectl  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.kubectl, pytest.mark.anyio]

URI = "kcp-events://watch/root:app/configmaps?namespace=default"


async def _kubectl(kubectl: str, api: FakeApiServer, tmp: Path, *args: str, stdin: str | None = None) -> str:
    kc = write_kubeconfig(tmp / "user.kubeconfig", api.url)
    proc = await anyio.run_process(
        [
            kubectl,
            *args,
            "--kubeconfig",
            str(kc),
            "--server",
            f"{api.url}/clusters/root:app",
            "--cache-dir",
            str(tmp / "c"),
        ],
        input=stdin.encode() if stdin else None,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout.decode()


async def _events_until(client: Client, sub: Any, done: Any, uri: str = URI) -> list[dict[str, Any]]:
    """Await update notifications until ``done(events)`` holds for the ring's events."""
    with anyio.fail_after(WAIT):
        while True:
            events = events_of((await client.read_resource(uri)).contents[0].text)  # type: ignore[union-attr]
            if done(events):
                return events
            assert await sub.__anext__() == ResourceUpdated(uri=uri)


def _changes(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] != "ERROR"]


def _cm(name: str, **data: str) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default"},
            "data": data,
        }
    )


async def test_create_patch_delete(real_kubectl: str, tmp_path: Path) -> None:  # noqa: F811
    cluster = FakeCluster(tmp_path / "unused")
    async with run_fake_apiserver(FakeApiServer()) as api:
        api.put(
            "root:app", "configmaps", "default", {"metadata": {"name": "old"}, "data": {"v": "0"}}, emit=False
        )
        async with (
            kcp_client(tmp_path, cluster, kubectl=real_kubectl, server=api.url) as client,
            client.listen(resource_subscriptions=[URI]) as sub,
        ):
            started = api.next_watch_started()
            assert events_of((await client.read_resource(URI)).contents[0].text) == []  # type: ignore[union-attr]
            with anyio.fail_after(WAIT):
                await started.wait()
            await _kubectl(
                real_kubectl,
                api,
                tmp_path,
                "create",
                "--validate=false",
                "-f",
                "-",
                stdin=_cm("new", a="1"),
            )
            await _kubectl(
                real_kubectl, api, tmp_path, "patch", "configmap", "new", "-p", '{"data":{"a":"2"}}'
            )
            await _kubectl(real_kubectl, api, tmp_path, "delete", "configmap", "new")
            events = await _events_until(client, sub, lambda evs: len(evs) >= 3)
    # kubectl -w printed "old" as ADDED when it started; it was in the seed, so it is suppressed.
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "new"),
        ("MODIFIED", "new"),
        ("DELETED", "new"),
    ]
    assert [e["seq"] for e in events] == [1, 2, 3]
    assert events[1]["old"]["data"] == {"a": "1"}
    assert events[1]["object"]["data"] == {"a": "2"}
    assert all("managedFields" not in e["object"]["metadata"] for e in events)


async def test_dropped_stream_and_expired_resource_version(real_kubectl: str, tmp_path: Path) -> None:  # noqa: F811
    cluster = FakeCluster(tmp_path / "unused")
    async with run_fake_apiserver(FakeApiServer()) as api:
        for name in ("keep", "change", "gone"):
            api.put(
                "root:app",
                "configmaps",
                "default",
                {"metadata": {"name": name}, "data": {"v": "0"}},
                emit=False,
            )
        async with (
            kcp_client(tmp_path, cluster, kubectl=real_kubectl, server=api.url) as client,
            client.listen(resource_subscriptions=[URI]) as sub,
        ):
            started = api.next_watch_started()
            await client.read_resource(URI)
            with anyio.fail_after(WAIT):
                await started.wait()
            # Changes the open stream never carries and the history has lost (compacted), then the drop:
            # the resumed watch gets 410 Expired and re-lists.
            api.put(
                "root:app",
                "configmaps",
                "default",
                {"metadata": {"name": "change"}, "data": {"v": "1"}},
                emit=False,
            )
            api.remove("root:app", "configmaps", "default", "gone", emit=False)
            api.compact()
            api.drop_watches()
            # kubectl may report the cut stream (an in-band ERROR, e.g. under load); the gap must follow.
            events = await _events_until(client, sub, lambda evs: len(_changes(evs)) >= 2)
            assert sorted(
                (e["type"], e["object"]["metadata"]["name"], e.get("synthetic")) for e in _changes(events)
            ) == [
                ("DELETED", "gone", True),
                ("MODIFIED", "change", True),
            ]
            # The next watch's resourceVersion is compacted away: 410 Expired, then a fresh list.
            expired_at = api.watch_requests
            api.expire_next_watch()
            started = api.next_watch_started()
            api.drop_watches()
            with anyio.fail_after(WAIT):
                await started.wait()  # the 410 stream
                while api.watch_requests < expired_at + 2:
                    started = api.next_watch_started()
                    await started.wait()
            api.put("root:app", "configmaps", "default", {"metadata": {"name": "after"}, "data": {}})
            events = await _events_until(
                client,
                sub,
                lambda evs: any(e["object"]["metadata"]["name"] == "after" for e in _changes(evs)),
            )
    # 410 Expired is recovered by a re-list, never surfaced as an ERROR.
    assert not [e for e in events if e["type"] == "ERROR" and "too old" in e["message"]], events
    assert _changes(events)[-1]["type"] == "ADDED"


async def test_relabel_out_of_and_back_into_a_label_selector(real_kubectl: str, tmp_path: Path) -> None:  # noqa: F811
    # The API server matches a selector watch against the old and the new object: `kubectl label`
    # moving an object out of the selector is DELETED (its last matching state), back in is ADDED.
    uri = "kcp-events://watch/root:app/configmaps?namespace=default&labelSelector=app%3Dweb"
    cluster = FakeCluster(tmp_path / "unused")
    async with run_fake_apiserver(FakeApiServer()) as api:
        seeded = api.put(
            "root:app",
            "configmaps",
            "default",
            {"metadata": {"name": "web-1", "labels": {"app": "web", "tier": "front"}}, "data": {}},
            emit=False,
        )
        api.put(
            "root:app",
            "configmaps",
            "default",
            {"metadata": {"name": "db-1", "labels": {"app": "db"}}, "data": {}},
            emit=False,
        )
        async with (
            kcp_client(tmp_path, cluster, kubectl=real_kubectl, server=api.url) as client,
            client.listen(resource_subscriptions=[uri]) as sub,
        ):
            started = api.next_watch_started()
            assert events_of((await client.read_resource(uri)).contents[0].text) == []  # type: ignore[union-attr]
            with anyio.fail_after(WAIT):
                await started.wait()
            await _kubectl(
                real_kubectl, api, tmp_path, "label", "configmap", "web-1", "app=db", "--overwrite"
            )
            moved_rv = api.objects["root:app"][("configmaps", "default", "web-1")]["metadata"][
                "resourceVersion"
            ]
            events = await _events_until(client, sub, lambda evs: len(evs) >= 1, uri)
            (gone,) = events
            assert (gone["type"], gone["object"]["metadata"]["name"]) == ("DELETED", "web-1")
            assert gone["object"]["metadata"]["labels"] == {"app": "web", "tier": "front"}
            assert gone["object"]["metadata"]["resourceVersion"] == moved_rv
            assert gone["object"]["metadata"]["uid"] == seeded["metadata"]["uid"]
            # Neither before nor after in the selector: no event.
            await _kubectl(real_kubectl, api, tmp_path, "label", "configmap", "db-1", "x=1")
            await _kubectl(
                real_kubectl, api, tmp_path, "label", "configmap", "web-1", "app=web", "--overwrite"
            )
            events = await _events_until(client, sub, lambda evs: len(evs) >= 2, uri)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("DELETED", "web-1"),
        ("ADDED", "web-1"),
    ]
    assert events[1]["object"]["metadata"]["labels"] == {"app": "web", "tier": "front"}
    assert "old" not in events[1]


def _names(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["type"], e["object"]["metadata"]["name"]) for e in _changes(events)]


async def test_an_object_deleted_between_the_list_and_the_watch_is_reported(
    real_kubectl: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    cluster = FakeCluster(tmp_path / "unused")
    async with run_fake_apiserver(FakeApiServer()) as api:
        api.put("root:app", "configmaps", "default", {"metadata": {"name": "doomed"}, "data": {}}, emit=False)
        # Deleted right after the seed list is answered, before any watch request.
        api.after_next_list = lambda: api.remove("root:app", "configmaps", "default", "doomed")
        async with (
            kcp_client(tmp_path, cluster, kubectl=real_kubectl, server=api.url) as client,
            client.listen(resource_subscriptions=[URI]) as sub,
        ):
            started = api.next_watch_started()
            await client.read_resource(URI)
            with anyio.fail_after(WAIT):
                await started.wait()
            api.put("root:app", "configmaps", "default", {"metadata": {"name": "marker"}, "data": {}})
            events = await _events_until(client, sub, lambda evs: ("ADDED", "marker") in _names(evs))
    assert _names(events) == [("DELETED", "doomed"), ("ADDED", "marker")]
    assert not events[0].get("synthetic")
    assert api.list_requests == 1


async def test_a_dropped_watch_resumes_from_the_last_resource_version_and_bookmarks(
    real_kubectl: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    cluster = FakeCluster(tmp_path / "unused")
    async with run_fake_apiserver(FakeApiServer()) as api:
        for name in ("a", "b"):
            api.put("root:app", "configmaps", "default", {"metadata": {"name": name}, "data": {}}, emit=False)
        async with (
            kcp_client(tmp_path, cluster, kubectl=real_kubectl, server=api.url) as client,
            client.listen(resource_subscriptions=[URI]) as sub,
        ):
            started = api.next_watch_started()
            await client.read_resource(URI)
            with anyio.fail_after(WAIT):
                await started.wait()

            def put(name: str, **data: str) -> dict[str, Any]:
                return api.put(
                    "root:app", "configmaps", "default", {"metadata": {"name": name}, "data": data}
                )

            live = put("b", v="live")
            await _events_until(client, sub, lambda evs: len(_changes(evs)) == 1)
            api.drop_watches()
            # Made while the stream is down or coming back: the resumed watch replays what it missed.
            put("a", v="2")
            put("a", v="3")
            put("c")
            put("d")
            api.remove("root:app", "configmaps", "default", "d")
            events = await _events_until(client, sub, lambda evs: len(_changes(evs)) >= 6)
            assert _names(events) == [
                ("MODIFIED", "b"),
                ("MODIFIED", "a"),
                ("MODIFIED", "a"),
                ("ADDED", "c"),
                ("ADDED", "d"),
                ("DELETED", "d"),
            ]
            assert not any(e.get("synthetic") for e in events)
            assert api.list_requests == 1  # resumed, never re-listed: no ADDED burst of a and b
            assert api.watch_rvs[1] == live["metadata"]["resourceVersion"]
            # Writes this watch never sees (another namespace), a BOOKMARK, and history compacted to it:
            # only a watcher that took the bookmark's resourceVersion resumes without a 410 re-list.
            api.put("root:app", "configmaps", "other", {"metadata": {"name": "elsewhere"}, "data": {}})
            api.bookmark()
            bookmark_rv = str(api.rv)
            api.compact()
            started = api.next_watch_started()
            api.drop_watches()
            with anyio.fail_after(WAIT):
                await started.wait()
            put("after")
            events = await _events_until(client, sub, lambda evs: ("ADDED", "after") in _names(evs))
    assert _names(events)[6:] == [("ADDED", "after")]  # the BOOKMARK is no event
    assert api.watch_rvs[-1] == bookmark_rv
    assert api.list_requests == 1
