"""Filters as a watch sees them: the per-event time limit through a WatchManager."""

from __future__ import annotations

import anyio
import pytest

from asyncai_watch.core.limits import Limits
from asyncai_watch.mcp.source import ListedResource
from asyncai_watch.runtime.manager import WatchManager
from asyncai_watch.testing import FakeClock, FakeSource

pytestmark = pytest.mark.anyio

NOTES = "memo://notes"
SLOW = "memo://slow"


async def test_a_filter_waiting_on_a_read_that_never_answers_times_out_and_the_watch_goes_on() -> None:
    fake = FakeSource(
        "memo",
        resources=[
            ListedResource(uri=NOTES, name="notes", mime_type="application/json"),
            ListedResource(uri=SLOW, name="slow", mime_type="application/json"),
        ],
    )
    fake.set(NOTES, {})
    fake.set(SLOW, {"x": 1})
    gate = fake.gate_reads(SLOW)  # never opened: the filter's read never answers
    limits = Limits(debounce_quiet=0, debounce_max_wait=0, filter_timeout=0.5)
    source = 'read_resource(uri="memo://slow") if event["key"] == "slow" else event["key"]'
    async with WatchManager([fake], limits=limits, clock=FakeClock()) as m:
        await m.watch_start("notes", NOTES, on_event=source)
        fake.update(NOTES, {"slow": 1})
        with anyio.fail_after(20):  # generous; the old limit let the read wait 30 s
            await gate.wait_blocked()
            timed_out = await m.notices.receive()
        assert "filter error: timeout: on_event ran for more than 0.5 s on this event" in timed_out.text
        assert "read_resource() had not answered and was abandoned" in timed_out.text
        assert not gate.is_open
        fake.update(NOTES, {"slow": 1, "next": 1})
        with anyio.fail_after(20):
            served = await m.notices.receive()
        assert served.text == "next"
        assert [w.name for w in m.watch_list()] == ["notes"]
