"""Large bodies: parsed and diffed in the large-body worker, never on the agent's event loop."""

from __future__ import annotations

import os
import signal

import anyio
import pytest

from asyncai_watch import EVENTS_MIME_TYPE, WatchManager
from asyncai_watch.core.extract import Body
from asyncai_watch.errors import BaselineError
from asyncai_watch.mcp.source import ListedResource
from asyncai_watch.runtime.topic import LARGE_BODY
from asyncai_watch.testing import FakeClock, FakeSource
from tests.support.managers import IMMEDIATE

BIG = "memo://big"


def items(n: int, **changed: str) -> list[dict[str, str]]:
    return [{"id": f"item-{i}", "payload": changed.get(f"item-{i}", "x" * 40)} for i in range(n)]


def source() -> FakeSource:
    fake = FakeSource("memo", resources=[ListedResource(uri=BIG, name="big", mime_type="application/json")])
    fake.set(BIG, items(10_000))
    return fake


async def next_text(m: WatchManager) -> str:
    with anyio.fail_after(60):
        return (await m.notices.receive()).text


def worker_pid(m: WatchManager) -> int:
    process = m._offload._process
    assert process is not None
    return process.pid


@pytest.mark.anyio
async def test_a_large_state_is_diffed_in_the_worker_and_notices_are_right() -> None:
    fake = source()
    assert len(fake.contents[BIG][0]) > LARGE_BODY  # the case under test
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock()) as m:
        await m.watch_start("big", BIG)
        assert m._offload._process is not None  # its baseline was parsed in the worker
        fake.update(BIG, items(10_000, **{"item-7": "changed"})[:-1])
        text = await next_text(m)
        assert text.splitlines() == [
            "MODIFIED item-7 (payload: " + "x" * 40 + "→changed)",
            "DELETED item-9999",
        ]
        assert m.watch_list()[0].events == 2
    assert m._offload._process is None  # the worker ends with the manager


@pytest.mark.anyio
async def test_a_watch_that_grows_large_moves_to_the_worker_with_its_baseline() -> None:
    fake = source()
    fake.set(BIG, items(3))
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock()) as m:
        await m.watch_start("big", BIG)
        assert m._offload._process is None  # small: extracted here
        fake.update(BIG, items(10_000))  # now large: diffed against the small baseline, in the worker
        text = await next_text(m)
        assert m._offload._process is not None
        lines = text.splitlines()
        # How many changed comes first (a notice's 20 lines cannot hide it), then the first 100.
        assert lines[0] == (
            "9,997 changes in one update (ADDED 9,997); the first 100 follow, the rest are not shown "
            "(Limits.events_per_update=100)"
        )
        assert lines[1:3] == ["ADDED item-3", "ADDED item-4"]
        assert lines[-1] == "+81 more"  # 20 lines per notice


@pytest.mark.anyio
async def test_a_large_body_that_cannot_be_a_baseline_fails_the_start_as_a_small_one_does() -> None:
    """Parsed in the worker, a bad baseline still fails ``watch_start`` with a BaselineError that
    says what is wrong, not as a read the server failed."""
    fake = source()
    fake.contents[BIG] = ("{oops" + " " * LARGE_BODY, "application/json")
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock()) as m:
        with pytest.raises(
            BaselineError, match=r"^watch_start: memo://big is served as application/json but"
        ):
            await m.watch_start("big", BIG)
        assert m._offload._process is not None  # the case under test: it was parsed in the worker
        assert m.watch_list() == []


@pytest.mark.anyio
async def test_a_large_event_log_goes_through_the_worker() -> None:
    uri = "memo://log"
    fake = FakeSource("memo", resources=[ListedResource(uri=uri, name="log", mime_type=EVENTS_MIME_TYPE)])
    ring = [{"seq": i, "type": "ADDED", "object": {"id": f"o{i}", "pad": "y" * 60}} for i in range(1, 5001)]
    fake.set_events(uri, ring)
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock()) as m:
        assert (await m.watch_start("log", uri)).shape == "event-log"
        fake.set_events(uri, [*ring[1:], {"seq": 5001, "type": "DELETED", "object": {"id": "o1"}}])
        fake.push(uri)
        assert await next_text(m) == "DELETED o1"


@pytest.mark.anyio
async def test_a_dead_worker_is_replaced_and_the_watch_says_it_has_a_fresh_baseline() -> None:
    fake = source()
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock()) as m:
        await m.watch_start("big", BIG)
        os.kill(worker_pid(m), signal.SIGKILL)
        fake.update(BIG, items(10_000, **{"item-1": "a"}))
        assert "ERROR" in await next_text(m)  # that read was lost with the worker
        # The next read starts a new worker, which takes it as the watch's new baseline.
        fake.update(BIG, items(10_000, **{"item-1": "a", "item-2": "b"}))
        assert "the large-body worker restarted; memo://big has a fresh baseline" in await next_text(m)
        fake.update(BIG, items(10_000, **{"item-1": "a", "item-2": "b", "item-3": "c"}))
        assert (await next_text(m)).startswith("MODIFIED item-3")


def test_a_large_body_is_left_unparsed_until_a_worker_takes_it() -> None:
    text = "[" + ",".join(['"x"'] * 10) + "]"
    raw = Body.raw(text, "application/json")
    assert raw.value is None
    assert not raw.parsed
    taken = raw.parsed_body()  # as a state read: indexed, its items parsed only when they change
    assert taken.index is not None
    assert taken.index.value == ["x"] * 10
