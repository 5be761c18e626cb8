"""The watcher pool in-process with the fake kubectl: reconnect backoff on an injected clock, sharing, stop."""

from __future__ import annotations

import os
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from asyncai_servers.kcp.kubectl import Endpoint, Kubectl
from asyncai_servers.kcp.uri import WatchTarget
from asyncai_servers.kcp.watcher import WatcherPool
from asyncai_watch.testing import FakeClock
from tests.support.fake_kubectl import FakeCluster
from tests.support.kcp_helpers import FAKE_KUBECTL, WAIT, watch_starts

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
        pool = WatcherPool(tg, kubectl, publish, clock=clock)  # the default backoff: 0.8 s doubling
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
        cluster.create("b")  # made while disconnected: the resumed watch replays it
        clock.advance(0.8)
        await starts.next()
        assert watcher.connects == 2
        assert watcher.lists == 1  # resumed from the last resourceVersion, no re-list

        cluster.drop_streams(1, "error: unexpected EOF")  # fails again with no event: the delay doubles
        with anyio.fail_after(WAIT):
            await clock.wait_for_sleepers(1)
        assert clock.deadlines() == [pytest.approx(0.8 + 1.6)]
        clock.advance(1.6)
        await starts.next()
        events = watcher.ring.body()["events"]
        assert [(e["type"], e.get("object", {}).get("metadata", {}).get("name")) for e in events] == [
            ("ERROR", None),
            ("ADDED", "b"),
            ("ERROR", None),
        ]

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
            path = await kubectl.resolve(target, conn)
            async with kubectl.watch(path, conn, None) as stream:
                await starts.next()
                cluster.drop_streams(0)
                async for _ in stream.batches():
                    pass
    assert stream.returncode == 0
    assert procs[-1].kills == 0


# --- list once, then watch from the resourceVersion ------------------------------------------------------

NS_URI = "kcp-events://watch/root:app/configmaps?namespace=default"


class _Pool:
    """One watcher on ``uri`` in-process: the ring, its publishes as a stream, the fake kubectl's calls."""

    def __init__(
        self,
        cluster: FakeCluster,
        starts: Any,
        tg: anyio.abc.TaskGroup,
        uri: str,
        server: str = "https://kcp.test",
    ) -> None:
        self.cluster = cluster
        self.clock = FakeClock()
        self.updates, self._recv = anyio.create_memory_object_stream[str](1000)
        env = {
            **os.environ,
            "FAKE_KUBECTL_DIR": str(cluster.root),
            "FAKE_KUBECTL_PYTHON": sys.executable,
            "FAKE_KUBECTL_NOTIFY": starts.path,
        }
        kubectl = Kubectl(FAKE_KUBECTL, {None: Endpoint(server=server)}, env=env)
        self.pool = WatcherPool(tg, kubectl, self._publish, clock=self.clock)
        self.pool.add_listener(uri)
        self.watcher = self.pool.entries[uri].watcher

    async def _publish(self, uri: str) -> None:
        self.updates.send_nowait(uri)

    def events(self) -> list[dict[str, Any]]:
        self.watcher.read()  # as a reader does: the next append notifies again
        events: list[dict[str, Any]] = self.watcher.ring.body()["events"]
        return events

    async def until(self, done: Any) -> list[dict[str, Any]]:
        """Await the watcher's publishes until ``done(events)`` holds."""
        with anyio.fail_after(WAIT):
            while not done(self.events()):
                await self._recv.receive()
        return self.events()

    def raw_calls(self) -> list[str]:
        """The ``--raw`` paths kubectl was asked for, in order."""
        return [c[c.index("--raw") + 1] for c in self.cluster.calls() if "--raw" in c]

    def lists(self) -> list[str]:
        return [p for p in self.raw_calls() if "watch=true" not in p]

    def watch_rvs(self) -> list[str | None]:
        out: list[str | None] = []
        for p in self.raw_calls():
            if "watch=true" in p:
                query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(p).query))
                out.append(query.get("resourceVersion"))
        return out


def _names(events: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    return [(e["type"], e.get("object", {}).get("metadata", {}).get("name")) for e in events]


@pytest.mark.anyio
async def test_a_dropped_stream_resumes_from_the_last_resource_version(tmp_path: Path) -> None:
    """Events made while disconnected arrive once each, in order, as they happened; no re-list."""
    cluster = FakeCluster(tmp_path / "cluster")
    cluster.create("a", {"v": "1"})
    cluster.create("b")
    async with watch_starts() as starts, anyio.create_task_group() as tg:
        p = _Pool(cluster, starts, tg, NS_URI)
        await starts.next()
        live = cluster.patch("b", {"v": "live"})
        await p.until(lambda evs: len(evs) == 1)
        cluster.drop_streams(1, "error: unexpected EOF")
        with anyio.fail_after(WAIT):
            await p.clock.wait_for_sleepers(1)
        # While nobody watches: two patches, a create, a create-and-delete.
        cluster.patch("a", {"v": "2"})
        cluster.patch("a", {"v": "3"})
        cluster.create("c")
        cluster.create("d")
        cluster.delete("d")
        p.clock.advance(0.8)
        events = await p.until(lambda evs: len(evs) == 7)
        tg.cancel_scope.cancel()
    assert _names(events) == [
        ("MODIFIED", "b"),
        ("ERROR", None),
        ("MODIFIED", "a"),
        ("MODIFIED", "a"),
        ("ADDED", "c"),
        ("ADDED", "d"),
        ("DELETED", "d"),
    ]
    assert [e["object"]["data"] for e in events[2:4]] == [{"v": "2"}, {"v": "3"}]
    assert events[3]["old"]["data"] == {"v": "2"}
    assert not any(e.get("synthetic") for e in events)  # replayed history, not a re-list's diff
    assert [e["seq"] for e in events] == list(range(1, 8))
    # One list; the second watch resumed at the last event the first one delivered.
    assert len(p.lists()) == 1
    assert p.watch_rvs()[1] == live["metadata"]["resourceVersion"]


@pytest.mark.anyio
async def test_an_object_deleted_between_the_list_and_the_watch_is_reported_deleted(tmp_path: Path) -> None:
    cluster = FakeCluster(tmp_path / "cluster")
    cluster.create("doomed")
    cluster.after_next_list(delete="doomed")  # right after the seed list is answered
    async with watch_starts() as starts, anyio.create_task_group() as tg:
        p = _Pool(cluster, starts, tg, NS_URI)
        await starts.next()
        cluster.create("marker")
        events = await p.until(lambda evs: ("ADDED", "marker") in _names(evs))
        tg.cancel_scope.cancel()
    # The seed had it; the watch from the list's resourceVersion carried its deletion.
    assert _names(events) == [("DELETED", "doomed"), ("ADDED", "marker")]
    assert not events[0].get("synthetic")
    assert {o["metadata"]["name"] for o in p.watcher.state.known.values()} == {"marker"}


@pytest.mark.anyio
async def test_410_gone_relists_and_reports_what_changed(tmp_path: Path) -> None:
    """A resumed watch older than the API server's history re-lists; the diff arrives with no GAP."""
    cluster = FakeCluster(tmp_path / "cluster")
    cluster.create("stays")
    cluster.create("changes", {"v": "1"})
    cluster.create("goes")
    async with watch_starts() as starts, anyio.create_task_group() as tg:
        p = _Pool(cluster, starts, tg, NS_URI)
        await starts.next()
        log_id = p.watcher.ring.log_id
        cluster.drop_streams(0)
        with anyio.fail_after(WAIT):
            await p.clock.wait_for_sleepers(1)
        with cluster.quiet():  # changes the history no longer holds (compacted past the resumed RV)
            cluster.patch("changes", {"v": "2"})
            cluster.delete("goes")
            cluster.create("new")
        p.clock.advance(0.8)
        events = await p.until(lambda evs: len(evs) >= 3)
        await starts.next()  # the watch after the re-list streams
        cluster.create("after")
        events = await p.until(lambda evs: ("ADDED", "after") in _names(evs))
        tg.cancel_scope.cancel()
    assert sorted(_names(events[:3])) == [("ADDED", "new"), ("DELETED", "goes"), ("MODIFIED", "changes")]
    assert all(e["synthetic"] for e in events[:3])
    assert next(e for e in events if e["type"] == "MODIFIED")["old"]["data"] == {"v": "1"}
    # 410 is recovered, not an ERROR; seqs run on without a jump and the log is the same: no GAP.
    assert _names(events[3:]) == [("ADDED", "after")]
    assert [e["seq"] for e in events] == [1, 2, 3, 4]
    assert p.watcher.ring.log_id == log_id
    lists, rvs = p.lists(), p.watch_rvs()
    assert len(lists) == 2  # the seed, and the re-list after 410
    assert len(rvs) == 3  # the first watch, the resumed one that got 410, the one after the re-list
    assert rvs[1] == rvs[0]  # nothing was streamed between: it resumed where the list left off
    assert int(rvs[2] or 0) > int(rvs[1] or 0)


@pytest.mark.anyio
async def test_bookmarks_advance_the_resource_version_and_log_nothing(tmp_path: Path) -> None:
    cluster = FakeCluster(tmp_path / "cluster")
    cluster.create("a")
    async with watch_starts() as starts, anyio.create_task_group() as tg:
        p = _Pool(cluster, starts, tg, NS_URI)
        await starts.next()
        listed_rv = p.watcher.resource_version
        for n in range(3):  # changes outside the watched namespace: this watch gets no event for them
            cluster.create(f"elsewhere-{n}", namespace="other")
        bookmark_rv = cluster.bookmark()
        cluster.compact()  # history before the bookmark is gone: only the bookmark's RV still resumes
        cluster.drop_streams(0)
        with anyio.fail_after(WAIT):
            await p.clock.wait_for_sleepers(1)
        assert p.watcher.resource_version == bookmark_rv != listed_rv
        p.clock.advance(0.8)
        await starts.next()
        cluster.create("b")
        events = await p.until(lambda evs: len(evs) >= 1)
        tg.cancel_scope.cancel()
    assert _names(events) == [("ADDED", "b")]  # the BOOKMARK itself is no event
    assert events[0]["seq"] == 1
    assert p.watch_rvs() == [listed_rv, bookmark_rv]  # resumed at the bookmark: no 410, no re-list
    assert len(p.lists()) == 1


# --- in-stream ERRORs other than 410 -----------------------------------------------------------------------


def _status(code: int, reason: str, message: str, **extra: Any) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
        **extra,
    }


@pytest.mark.anyio
async def test_an_in_stream_500_grows_the_backoff_and_resumes_from_the_same_resource_version(
    tmp_path: Path,
) -> None:
    """kubectl exits 0 after the API server's ERROR, but the watch failed: no reconnect every 0.8 s."""
    cluster = FakeCluster(tmp_path / "cluster")
    cluster.create("a")
    boom = {"type": "ERROR", "object": _status(500, "InternalError", "etcdserver: leader changed")}
    async with watch_starts() as starts, anyio.create_task_group() as tg:
        p = _Pool(cluster, starts, tg, NS_URI)
        await starts.next()
        listed_rv = p.watcher.resource_version
        deadline = 0.0
        for attempt, delay in enumerate([0.8, 1.6, 3.2, 6.4], start=1):
            cluster.raw_event(boom)  # the API server sends it and closes the stream
            with anyio.fail_after(WAIT):
                await p.clock.wait_for_sleepers(1)
            deadline += delay
            assert p.clock.deadlines() == [pytest.approx(deadline)], f"attempt {attempt}"
            p.clock.advance(delay)
            await starts.next()
        cluster.create("b")
        events = await p.until(lambda evs: ("ADDED", "b") in _names(evs))
        tg.cancel_scope.cancel()
    errors = [e for e in events if e["type"] == "ERROR"]
    assert len(errors) == 4  # once per failed attempt
    assert all(e["message"] == "etcdserver: leader changed (500 InternalError)" for e in errors)
    assert len(p.lists()) == 1  # a 500 leaves the resourceVersion usable: resumed, not re-listed
    assert p.watch_rvs() == [listed_rv] * 5


@pytest.mark.anyio
async def test_a_stream_that_failed_after_two_minutes_starts_the_backoff_afresh(tmp_path: Path) -> None:
    """client-go's rule: a watch that lived 120 s was healthy, whatever ended it."""
    cluster = FakeCluster(tmp_path / "cluster")
    cluster.create("a")
    async with watch_starts() as starts, anyio.create_task_group() as tg:
        p = _Pool(cluster, starts, tg, NS_URI)
        await starts.next()
        cluster.drop_streams(1, "error: unexpected EOF")  # at once: a failed attempt
        with anyio.fail_after(WAIT):
            await p.clock.wait_for_sleepers(1)
        assert p.clock.deadlines() == [pytest.approx(0.8)]
        p.clock.advance(0.8)
        await starts.next()
        p.clock.advance(119.9)  # not yet healthy: the next failure doubles the wait
        cluster.drop_streams(1, "error: unexpected EOF")
        with anyio.fail_after(WAIT):
            await p.clock.wait_for_sleepers(1)
        assert p.clock.deadlines() == [pytest.approx(120.7 + 1.6)]
        p.clock.advance(1.6)
        await starts.next()
        p.clock.advance(121.0)  # this stream lived over two minutes
        cluster.drop_streams(1, "error: unexpected EOF")
        with anyio.fail_after(WAIT):
            await p.clock.wait_for_sleepers(1)
        assert p.clock.deadlines() == [pytest.approx(243.3 + 0.8)]
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_an_in_stream_too_large_resource_version_relists(tmp_path: Path) -> None:
    """504 "Too large resource version" (the API server is behind the RV, e.g. after an etcd restore):
    resuming from that RV can never work, so the watcher lists again and reports what differs."""
    cluster = FakeCluster(tmp_path / "cluster")
    cluster.create("a")
    too_large = {
        "type": "ERROR",
        "object": _status(
            504,
            "Timeout",
            "Too large resource version: 9999, current: 3",
            details={
                "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]
            },
        ),
    }
    async with watch_starts() as starts, anyio.create_task_group() as tg:
        p = _Pool(cluster, starts, tg, NS_URI)
        await starts.next()
        listed_rv = p.watcher.resource_version
        with cluster.quiet():  # a change the API server's restored state has but no watch will replay
            cluster.create("restored")
        cluster.raw_event(too_large)
        with anyio.fail_after(WAIT):
            await p.clock.wait_for_sleepers(1)
        assert p.clock.deadlines() == [pytest.approx(0.8)]
        p.clock.advance(0.8)
        events = await p.until(lambda evs: ("ADDED", "restored") in _names(evs))
        await starts.next()  # the watch from the re-list's resourceVersion streams
        tg.cancel_scope.cancel()
    assert _names(events) == [("ERROR", None), ("ADDED", "restored")]
    assert "Too large resource version" in events[0]["message"]
    assert events[1]["synthetic"]
    assert len(p.lists()) == 2
    rvs = p.watch_rvs()
    assert rvs[0] == listed_rv
    assert rvs[1] != listed_rv


@pytest.mark.anyio
async def test_only_kubectls_expired_error_relists(tmp_path: Path) -> None:
    """An HTTP-level 410 (``Error from server (Gone)``) re-lists; a "410" elsewhere in stderr is an error."""
    cluster = FakeCluster(tmp_path / "cluster")
    cluster.create("a")
    async with watch_starts() as starts, anyio.create_task_group() as tg:
        p = _Pool(cluster, starts, tg, NS_URI)
        await starts.next()
        cluster.drop_streams(
            1, "error: dial tcp 10.0.4.10:6443: connect: connection refused (Expired token?)"
        )
        with anyio.fail_after(WAIT):
            await p.clock.wait_for_sleepers(1)
        assert len(p.lists()) == 1
        assert "connection refused" in p.events()[-1]["message"]
        p.clock.advance(0.8)
        await starts.next()
        cluster.drop_streams(1, "Error from server (Gone): too old resource version: 5 (7)")
        await starts.next()  # re-listed at once and watching again: no backoff
        tg.cancel_scope.cancel()
    assert len(p.lists()) == 2
    assert [e["type"] for e in p.events()] == ["ERROR"]  # the 410 is recovered, not reported


@pytest.mark.anyio
async def test_a_kcp_host_with_a_path_prefix_lists_and_watches_under_it(tmp_path: Path) -> None:
    """kcp behind a proxy at ``https://proxy/kcp``: kubectl drops --server's path from ``--raw`` paths."""
    cluster = FakeCluster(tmp_path / "cluster")
    cluster.create("a")
    async with watch_starts() as starts, anyio.create_task_group() as tg:
        p = _Pool(cluster, starts, tg, NS_URI, server="https://proxy.test/kcp/")
        await starts.next()
        cluster.create("b")
        events = await p.until(lambda evs: len(evs) >= 1)
        tg.cancel_scope.cancel()
    assert _names(events) == [("ADDED", "b")]
    assert all(path.startswith("/kcp/clusters/root:app/api/v1/") for path in p.raw_calls())
