"""End to end: WatchManager -> McpResourceSource -> kcp server (stdio) -> fake kubectl, with the ADR's filter."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from asyncai_watch.core.limits import Limits
from asyncai_watch.errors import WatchError
from asyncai_watch.mcp.client import McpResourceSource
from asyncai_watch.runtime.manager import WatchManager
from tests.support.fake_kubectl import FakeCluster
from tests.support.kcp_helpers import WAIT, kcp_argv, kcp_env, watch_starts, write_kubeconfig

ON_EVENT = """
m = event["object"]["metadata"]
f'{event["type"].lower()} {m["namespace"]}/{m["name"]}' if event["type"] in ("ADDED", "DELETED") else None
"""


@pytest.mark.anyio
async def test_configmap_watch_create_patches_delete(tmp_path: Path) -> None:
    cluster = FakeCluster(tmp_path / "cluster")
    cluster.create("already-there")
    kc = write_kubeconfig(tmp_path / "kc.json", "https://kcp.test:6443")
    async with watch_starts() as starts:
        env = {**kcp_env(cluster, tmp_path), "FAKE_KUBECTL_NOTIFY": starts.path}
        source = McpResourceSource.stdio(
            [sys.executable, *kcp_argv(kc, "--backoff", "0:0")], name="kcp", env=env
        )
        limits = Limits(debounce_quiet=0.0, debounce_max_wait=0.0)
        async with source, WatchManager([source], limits=limits) as m:
            uri = "kcp-events://watch/root:app/configmaps?namespace=*"
            started = await m.watch_start(name="cm", uri=uri, on_event=ON_EVENT)
            assert started.shape == "event-log"
            await starts.next()  # kubectl -w is streaming
            cluster.create("final-check", {"a": "1"})
            with anyio.fail_after(WAIT):
                notice = await m.notices.receive()
            assert notice.text == "added default/final-check"
            assert notice.meta["name"] == "cm"
            for n in range(3):
                cluster.patch("final-check", {"a": str(n + 2)})
            cluster.delete("final-check")
            with anyio.fail_after(WAIT):
                notice = await m.notices.receive()
            # The three patches were dropped by the filter: the next notice is the delete.
            assert notice.text == "deleted default/final-check"
            (listed,) = m.watch_list()
            assert listed.events == 5


@pytest.mark.anyio
async def test_watch_start_on_the_api_resources_document_fails_fast(tmp_path: Path) -> None:
    cluster = FakeCluster(tmp_path / "cluster")
    kc = write_kubeconfig(tmp_path / "kc.json", "https://kcp.test:6443")
    source = McpResourceSource.stdio(
        [sys.executable, *kcp_argv(kc, "--backoff", "0:0")], name="kcp", env=kcp_env(cluster, tmp_path)
    )
    async with source, WatchManager([source]) as m:
        uri = "kcp-api://root:app/resources"
        assert "configmaps" in str(await m.read_resource(uri))  # readable ...
        with anyio.fail_after(WAIT), pytest.raises(WatchError) as refused:
            await m.watch_start(name="api", uri=uri)  # ... but not watchable: refused at once
        assert "is not watchable" in str(refused.value)
        assert "kcp-events://watch/root:app/configmaps" in str(refused.value)
        assert m.watch_list() == []
