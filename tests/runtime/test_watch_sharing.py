"""One subscription and one read per (server, URI); cached catalogs; watchability; stop vs. save.

WatchManager over the in-memory FakeSource, with a FakeClock (no real waits).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from asyncai_watch import Notice, NotWatchableError, RoutingError, StateFileError, WatchManager
from asyncai_watch.mcp.source import ListedResource, ListedTemplate
from asyncai_watch.testing import FakeClock, FakeSource
from tests.support.managers import NOTES, manager

pytestmark = pytest.mark.trio  # backend-neutral: the anyio tests also run under trio


def memo() -> FakeSource:
    fake = FakeSource(
        "memo",
        resources=[ListedResource(uri=NOTES, name="notes", mime_type="application/json")],
        templates=[
            ListedTemplate(uri_template="memo://notes/{key}", name="note", mime_type="application/json")
        ],
    )
    fake.set(NOTES, {})
    return fake


async def notices(m: WatchManager, n: int) -> list[Notice]:
    out = []
    with anyio.fail_after(5):
        for _ in range(n):
            out.append(await m.notices.receive())
    return out


@pytest.mark.anyio
async def test_watches_on_one_uri_share_one_listen_and_one_read_per_update() -> None:
    fake = memo()
    async with manager(fake) as m:
        for i in range(3):
            await m.watch_start(f"w{i}", NOTES)
        assert fake.requests["subscriptions/listen"] == 1
        assert fake.listeners(NOTES) == 1
        reads = fake.requests["resources/read"]  # the baselines: one per watch
        fake.update(NOTES, {"a": 1})
        got = await notices(m, 3)
        assert sorted(n.meta["name"] for n in got) == ["w0", "w1", "w2"]
        assert {n.text for n in got} == {"ADDED a"}
        assert fake.requests["resources/read"] == reads + 1  # one read served all three


@pytest.mark.anyio
async def test_each_watch_keeps_its_own_baseline_and_dedupe() -> None:
    fake = memo()
    async with manager(fake) as m:
        await m.watch_start("early", NOTES)
        fake.update(NOTES, {"a": 1})
        assert [n.text for n in await notices(m, 1)] == ["ADDED a"]
        # A watch that joins later takes a fresh baseline: it does not see "a" as new.
        await m.watch_start("late", NOTES)
        fake.update(NOTES, {"a": 1, "b": 2})
        got = {n.meta["name"]: n.text for n in await notices(m, 2)}
        assert got == {"early": "ADDED b", "late": "ADDED b"}
        assert [w.events for w in m.watch_list()] == [2, 1]


@pytest.mark.anyio
async def test_the_last_watch_to_stop_ends_the_shared_subscription() -> None:
    fake = memo()
    async with manager(fake) as m:
        await m.watch_start("a", NOTES)
        await m.watch_start("b", NOTES)
        await m.watch_stop("a")
        assert fake.listeners(NOTES) == 1
        fake.update(NOTES, {"x": 1})
        assert [n.meta["name"] for n in await notices(m, 1)] == ["b"]
        await m.watch_stop("b")
        assert fake.listeners(NOTES) == 0
        # A new watch makes a new subscription.
        await m.watch_start("c", NOTES)
        assert fake.listeners(NOTES) == 1


@pytest.mark.anyio
async def test_a_shared_subscription_resubscribes_once_for_every_watch() -> None:
    clock = FakeClock()
    fake = memo()
    async with manager(fake, clock=clock) as m:
        await m.watch_start("a", NOTES)
        await m.watch_start("b", NOTES)
        fake.end(NOTES)
        await clock.wait_for_deadline(1.0)
        fake.set(NOTES, {"during": "outage"})
        clock.advance(1.0)
        got = {n.meta["name"]: n.text for n in await notices(m, 2)}
        assert got == {"a": "ADDED during", "b": "ADDED during"}
        assert fake.requests["subscriptions/listen"] == 2  # the first one, and one resubscribe


@pytest.mark.anyio
async def test_when_a_shared_subscription_gives_up_every_watch_on_it_fails() -> None:
    clock = FakeClock()
    fake = memo()
    async with manager(fake, clock=clock) as m:
        await m.watch_start("a", NOTES)
        await m.watch_start("b", NOTES)
        fake.disconnect()
        for delay in (1.0, 2.0, 4.0, 8.0, 16.0):
            await clock.wait_for_deadline(clock.now() + delay)
            clock.advance(delay)
        got = await notices(m, 2)
        assert {n.meta["name"] for n in got} == {"a", "b"}
        assert all(n.meta.get("failed") == "true" for n in got)
        assert {w.status for w in m.watch_list()} == {"failed"}
        # Either one can be started again, on a new subscription.
        fake.reconnect()
        await m.watch_start("a", NOTES)
        assert fake.listeners(NOTES) == 1


@pytest.mark.anyio
async def test_a_warm_start_or_read_makes_no_list_requests() -> None:
    fake = memo()
    fake.set("memo://notes/todo", {"value": "milk"})
    async with manager(fake) as m:
        await m.watch_start("a", NOTES)
        listed = fake.requests["resources/list"], fake.requests["resources/templates/list"]
        assert listed == (1, 1)
        await m.watch_start("b", "memo://notes/todo")
        assert await m.read_resource("memo://notes/todo") == {"value": "milk"}
        await m.watch_stop("a")
        await m.watch_start("a", NOTES)
        assert (fake.requests["resources/list"], fake.requests["resources/templates/list"]) == listed


@pytest.mark.anyio
async def test_list_changed_and_a_miss_refresh_the_catalog() -> None:
    fake = memo()
    async with manager(fake) as m:
        await m.read_resource(NOTES)
        assert fake.requests["resources/list"] == 1
        # The server adds a resource and says so: the next use lists again and finds it.
        fake.resources.append(ListedResource(uri="memo://new", name="new", mime_type="text/plain"))
        fake.set("memo://new", "fresh", mime_type="text/plain")
        assert fake.list_changed() == 1
        await anyio.wait_all_tasks_blocked()  # the notification has been taken
        assert await m.read_resource("memo://new") == "fresh"
        assert fake.requests["resources/list"] == 2
        await m.read_resource("memo://new")
        assert fake.requests["resources/list"] == 2
    # A server that cannot say list_changed (and is not a catch-all): a miss lists again, once.
    plain = FakeSource("plain", subscribable=False, resources=[ListedResource(uri="plain://a", name="a")])
    plain.list_changed_supported = False
    plain.set("plain://b", "b", mime_type="text/plain")
    async with manager(plain) as m:
        with pytest.raises(RoutingError, match="plain://b"):
            await m.read_resource("plain://b")
        assert plain.requests["resources/list"] == 2  # the first listing, and the miss's
        plain.resources.append(ListedResource(uri="plain://b", name="b"))
        assert await m.read_resource("plain://b") == "b"
        assert plain.requests["resources/list"] == 3


class ListChangedRefused(FakeSource):
    """A server whose ``list_changed`` listen is refused every time."""

    def __init__(self) -> None:
        super().__init__("memo", resources=[ListedResource(uri=NOTES, name="notes")])
        self.list_changed_listens = 0

    @asynccontextmanager
    async def _refused(self) -> AsyncIterator[AsyncIterator[None]]:
        self.list_changed_listens += 1
        raise ConnectionError("the server refused the listen")
        yield  # pragma: no cover

    def listen_list_changed(self) -> Any:
        return self._refused()


@pytest.mark.anyio
async def test_a_refused_list_changed_listen_backs_off_as_a_watch_does_then_gives_up() -> None:
    fake = ListChangedRefused()
    clock = FakeClock()
    async with manager(fake, clock=clock):
        for attempt, delay in enumerate([1.0, 2.0, 4.0, 8.0, 16.0], start=1):  # a watch's backoff
            with anyio.fail_after(5):
                await clock.wait_for_sleepers(1)
            assert fake.list_changed_listens == attempt
            assert clock.deadlines() == [clock.now() + delay], f"attempt {attempt}"
            clock.advance(delay)
        await anyio.wait_all_tasks_blocked()
        # Five retries failed: no more listens; a routing miss still refreshes the listing.
        assert (fake.list_changed_listens, clock.sleepers) == (6, 0)


@pytest.mark.anyio
async def test_sources_are_listed_concurrently() -> None:
    slow, other = memo(), FakeSource("other", resources=[ListedResource(uri="other://x", name="x")])
    other.set("other://x", "x", mime_type="text/plain")
    gate = anyio.Event()
    listing = anyio.Event()
    original = slow.list_resources

    async def held() -> list[ListedResource]:
        listing.set()
        await gate.wait()
        return await original()

    slow.list_resources = held  # type: ignore[method-assign]
    async with manager(slow, other) as m, anyio.create_task_group() as tg:
        tg.start_soon(m.read_resource, "other://x")
        with anyio.fail_after(5):
            await listing.wait()
            # While memo's listing hangs, the other server has been listed already.
            await other.wait_requests("resources/templates/list", 1)
        gate.set()


@pytest.mark.anyio
async def test_a_server_that_cannot_be_watched_is_listed_so_and_refused_clearly() -> None:
    plain = FakeSource("plain", subscribable=False, resources=[ListedResource(uri="plain://x", name="x")])
    plain.set("plain://x", "hello", mime_type="text/plain")
    async with manager(plain) as m:
        (info,) = await m.list_resources()
        assert info.watchable is False
        with pytest.raises(NotWatchableError, match=r"'plain' is not watchable.*server-contract"):
            await m.watch_start("x", "plain://x")
        assert plain.requests["subscriptions/listen"] == 0
        assert await m.read_resource("plain://x") == "hello"  # reads still work


@pytest.mark.anyio
async def test_watch_stop_keeps_the_watch_when_the_state_file_cannot_be_written(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    path = state_dir / "watches.json"
    fake = memo()
    async with manager(fake, watch_state=path) as m:
        await m.watch_start("notes", NOTES)
        # The state directory becomes unwritable (here: a file where the directory was).
        state_dir.rename(tmp_path / "aside")
        state_dir.write_text("not a directory")
        with pytest.raises(StateFileError, match="cannot write it"):
            await m.watch_stop("notes")
        # Memory agrees with the file: the watch still runs and still delivers.
        assert [(w.name, w.status) for w in m.watch_list()] == [("notes", "running")]
        fake.update(NOTES, {"a": 1})
        assert [n.text for n in await notices(m, 1)] == ["ADDED a"]
        state_dir.unlink()
        (tmp_path / "aside").rename(state_dir)
        assert [s["name"] for s in json.loads(path.read_text())["watches"]] == ["notes"]
        assert await m.watch_stop("notes") is True
        assert json.loads(path.read_text())["watches"] == []
        assert fake.listeners(NOTES) == 0


@pytest.mark.anyio
async def test_event_log_reads_carry_the_position_and_unread_deltas_are_joined() -> None:
    uri = "memo://log"
    fake = FakeSource(
        "memo",
        resources=[ListedResource(uri=uri, name="log", mime_type="application/vnd.asyncai.events+json")],
    )

    def log(*seqs: int) -> dict[str, object]:
        return {
            "log_id": "L1",
            "events": [{"seq": s, "type": "ADDED", "object": {"id": f"o{s}"}} for s in seqs],
        }

    fake.set(uri, log(1, 2), mime_type="application/vnd.asyncai.events+json")
    async with manager(fake) as m:
        await m.watch_start("log", uri)
        assert fake.positions == [None]  # the baseline: a whole read
        gate = fake.gate_reads(uri)
        fake.update(
            uri, log(3), mime_type="application/vnd.asyncai.events+json"
        )  # a delta, as the server answers
        await gate.wait_blocked()
        gate.open()
        assert [n.text for n in await notices(m, 1)] == ["ADDED o3"]
        assert fake.positions[1] == ("L1", 2)  # the read named where the last one ended
        fake.update(uri, log(4, 5), mime_type="application/vnd.asyncai.events+json")
        assert [n.text for n in await notices(m, 1)] == ["ADDED o4\nADDED o5"]
        assert fake.positions[-1] == ("L1", 3)
