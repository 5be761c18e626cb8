"""FakeClock: time moves only on advance; sleepers are visible to tests without polling."""

from __future__ import annotations

import time

import anyio
import anyio.lowlevel
import pytest

from asyncai_watch.clock import Clock, SystemClock, WallClock, fail_after
from asyncai_watch.testing import FakeClock


@pytest.mark.anyio
async def test_fake_clock_wakes_due_sleepers_in_order() -> None:
    clock = FakeClock(start=10.0)
    woke: list[tuple[str, float]] = []

    async def sleeper(name: str, deadline: float) -> None:
        await clock.sleep_until(deadline)
        woke.append((name, clock.now()))

    async with anyio.create_task_group() as tg:
        tg.start_soon(sleeper, "late", 15.0)
        tg.start_soon(sleeper, "early", 12.0)
        with anyio.fail_after(5):
            await clock.wait_for_sleepers(2)
        assert clock.deadlines() == [12.0, 15.0]
        assert clock.next_deadline == 12.0
        clock.advance(1.0)
        await anyio.wait_all_tasks_blocked()
        assert woke == []
        clock.advance(1.0)
        with anyio.fail_after(5):
            await clock.wait_for_deadline(15.0)
        await anyio.wait_all_tasks_blocked()
        assert woke == [("early", 12.0)]
        clock.set_time(20.0)
    assert woke == [("early", 12.0), ("late", 20.0)]
    assert clock.sleepers == 0


@pytest.mark.anyio
async def test_past_deadline_returns_at_once_and_cancel_unparks() -> None:
    clock = FakeClock()
    await clock.sleep_until(0.0)
    await clock.sleep_until(-5.0)
    with anyio.move_on_after(0) as scope:
        await clock.sleep_until(100.0)
    assert scope.cancelled_caught
    assert clock.sleepers == 0  # a cancelled sleeper removed itself
    with pytest.raises(ValueError, match="seconds >= 0"):
        clock.advance(-1)
    with pytest.raises(ValueError, match="backwards"):
        clock.set_time(-1)


@pytest.mark.anyio
async def test_system_clock_is_anyio_time() -> None:
    clock = SystemClock()
    assert isinstance(clock, Clock)
    assert isinstance(FakeClock(), Clock)
    start = clock.now()
    assert abs(start - anyio.current_time()) < 1.0
    await clock.sleep_until(start)  # already due: returns without waiting


@pytest.mark.anyio
async def test_wall_clock_is_unix_time_so_a_stored_deadline_means_the_same_instant_everywhere() -> None:
    clock = WallClock()
    assert isinstance(clock, Clock)
    before = time.time()
    now = clock.now()
    assert before <= now <= time.time()  # not seconds since boot, as a monotonic clock's are
    with anyio.fail_after(5):
        await clock.sleep_until(now - 60)  # a lease that ran out while nobody waited: at once


@pytest.mark.anyio
async def test_fail_after_on_a_fake_clock_cancels_the_block_at_its_deadline() -> None:
    clock = FakeClock(start=5.0)
    never = anyio.Event()
    reached: list[str] = []

    async def wait_never() -> None:
        async with fail_after(clock, 3):
            reached.append("in")
            await never.wait()

    async def blocked() -> None:
        with pytest.raises(TimeoutError):
            await wait_never()
        reached.append("timed out")

    async with anyio.create_task_group() as tg:
        tg.start_soon(blocked)
        with anyio.fail_after(5):
            await clock.wait_for_sleepers(1)
        assert clock.deadlines() == [8.0]
        clock.advance(2.9)
        await anyio.wait_all_tasks_blocked()
        assert reached == ["in"]  # not before the deadline
        clock.advance(0.1)
    assert reached == ["in", "timed out"]


@pytest.mark.anyio
async def test_fail_after_a_block_that_finishes_first_leaves_nothing_behind() -> None:
    clock = FakeClock()
    async with fail_after(clock, 3):
        await anyio.lowlevel.checkpoint()
    assert clock.sleepers == 0
    async with fail_after(clock, None):  # no deadline: no helper task at all
        assert clock.sleepers == 0


@pytest.mark.anyio
async def test_fail_after_passes_the_blocks_own_exception_through_unwrapped() -> None:
    # McpResourceSource catches MCPError & co. inside fail_after: an ExceptionGroup would slip past.
    async def fails() -> None:
        async with fail_after(FakeClock(), 3):
            await anyio.lowlevel.checkpoint()
            raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        await fails()


@pytest.mark.anyio
async def test_fail_after_a_block_that_finishes_despite_the_deadline_is_not_a_timeout() -> None:
    clock = FakeClock()
    finish = anyio.Event()
    finished: list[bool] = []

    async def shielded() -> None:
        async with fail_after(clock, 3):
            with anyio.CancelScope(shield=True):
                await finish.wait()
        finished.append(True)  # no TimeoutError: the deadline cancelled nothing

    async with anyio.create_task_group() as tg:
        tg.start_soon(shielded)
        with anyio.fail_after(5):
            await clock.wait_for_sleepers(1)
        clock.advance(3)
        await anyio.wait_all_tasks_blocked()
        finish.set()
    assert finished == [True]
