"""The watcher pool in-process with the fake kubectl: reconnect backoff on an injected clock, sharing, stop."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from fake_kubectl import FakeCluster
from kcp_helpers import FAKE_KUBECTL, WAIT, watch_starts

from asyncai_servers.kcp.kubectl import Endpoint, Kubectl
from asyncai_servers.kcp.uri import WatchTarget
from asyncai_servers.kcp.watcher import Backoff, WatcherPool
from asyncai_watch.clock import FakeClock

URI = "kcp-events://watch/root:app/configmaps"


@pytest.mark.anyio
async def test_reconnect_backoff_doubles_on_failure_and_resets_after_a_clean_end(tmp_path: Path) -> None:
    cluster = FakeCluster(tmp_path / "cluster")
    cluster.create("a")
    clock = FakeClock()
    published: list[str] = []

    async def publish(uri: str) -> None:
        published.append(uri)

    async with watch_starts() as starts, anyio.create_task_group() as tg:
        env = {
            **os.environ,
            "FAKE_KUBECTL_DIR": str(cluster.root),
            "FAKE_KUBECTL_PYTHON": sys.executable,
            "FAKE_KUBECTL_NOTIFY": starts.path,
        }
        kubectl = Kubectl(FAKE_KUBECTL, {None: Endpoint(server="https://kcp.test")}, env=env)
        pool = WatcherPool(tg, kubectl, publish, clock=clock, backoff=lambda: Backoff(0.8, 30.0))
        pool.add_listener(URI)
        pool.add_listener(URI)  # a second listener shares the watcher
        assert len(pool.entries) == 1
        watcher = pool.entries[URI].watcher
        await starts.next()
        assert watcher.connects == 1

        cluster.drop_streams(1, "error: unexpected EOF")
        with anyio.fail_after(WAIT):
            await clock.wait_for_sleepers(1)
        assert clock.deadlines() == [pytest.approx(0.8)]
        assert watcher.ring.body()["events"][-1]["type"] == "ERROR"
        assert watcher.connects == 1  # nothing runs until the backoff deadline
        with cluster.quiet():
            cluster.create("b")  # made while disconnected
        clock.advance(0.8)
        await starts.next()
        assert watcher.connects == 2
        assert [e["type"] for e in watcher.ring.body()["events"]] == ["ERROR", "ADDED"]

        cluster.drop_streams(1, "error: unexpected EOF")  # fails again with no event: the delay doubles
        with anyio.fail_after(WAIT):
            await clock.wait_for_sleepers(1)
        assert clock.deadlines() == [pytest.approx(0.8 + 1.6)]
        clock.advance(1.6)
        await starts.next()

        cluster.drop_streams(0)  # a clean end (server timeout) resets the backoff
        with anyio.fail_after(WAIT):
            await clock.wait_for_sleepers(1)
        assert clock.deadlines() == [pytest.approx(2.4 + 0.8)]
        clock.advance(0.8)
        await starts.next()
        assert published
        assert set(published) == {URI}

        pool.remove_listener(URI)
        assert URI in pool.entries
        pool.remove_listener(URI)  # the last listener left: the watcher (and its kubectl) stops
        assert pool.entries == {}
        tg.cancel_scope.cancel()


class _LateStatus:
    """A process whose exit status shows only once ``wait()`` returns, as when asyncio's watcher thread is late."""

    def __init__(self, proc: anyio.abc.Process) -> None:
        self._proc = proc
        self._waited = False
        self.kills = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self._proc, name)

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode if self._waited else None

    def kill(self) -> None:
        self.kills += 1
        self._proc.kill()

    async def wait(self) -> int:
        code = await self._proc.wait()
        self._waited = True
        return code

    async def aclose(self) -> None:
        await self._proc.aclose()


@pytest.mark.anyio
async def test_a_stream_kubectl_ended_itself_keeps_its_exit_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server timeout (kubectl exits 0) must read as a clean end, not as an error.

    Killing a kubectl that already closed its stdout races asyncio: ``Popen.kill()`` polls first and
    reaps the child, and asyncio then reports status 255 (seen in CI as a spurious ``ERROR`` event
    and a doubled reconnect backoff).
    """
    cluster = FakeCluster(tmp_path / "cluster")
    cluster.create("a")
    procs: list[_LateStatus] = []
    real_open = anyio.open_process

    async def open_process(*args: Any, **kwargs: Any) -> _LateStatus:
        procs.append(_LateStatus(await real_open(*args, **kwargs)))
        return procs[-1]

    monkeypatch.setattr(anyio, "open_process", open_process)
    async with watch_starts() as starts:
        env = {
            **os.environ,
            "FAKE_KUBECTL_DIR": str(cluster.root),
            "FAKE_KUBECTL_PYTHON": sys.executable,
            "FAKE_KUBECTL_NOTIFY": starts.path,
        }
        kubectl = Kubectl(FAKE_KUBECTL, {None: Endpoint(server="https://kcp.test")}, env=env)
        target = WatchTarget(workspace="root:app", resource="configmaps")
        with anyio.fail_after(WAIT):
            conn = await kubectl.connection_args(target.workspace, target.kcp)
            async with kubectl.watch(target, conn) as stream:
                await starts.next()
                cluster.drop_streams(0)
                async for _ in stream.batches():
                    pass
    assert stream.returncode == 0
    assert procs[-1].kills == 0
