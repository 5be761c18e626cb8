"""WatchManager.flush(): pending lines go out at once (a graceful close does not drop a change
still inside the debounce quiet time; asyncai-watch watch calls it on Ctrl-C)."""

from __future__ import annotations

import pytest

from asyncai_watch.core.limits import Limits
from asyncai_watch.testing import FakeClock
from tests.support.managers import NOTES, manager, memo_fake, next_notice

pytestmark = [pytest.mark.anyio, pytest.mark.trio]  # backend-neutral: also under trio


async def test_flush_sends_the_pending_lines_without_waiting() -> None:
    clock = FakeClock()
    fake = memo_fake()
    async with manager(fake, clock=clock, limits=Limits(debounce_quiet=3.0, debounce_max_wait=15.0)) as m:
        await m.watch_start("notes", NOTES)
        fake.update(NOTES, {"todo": "milk"})
        await clock.wait_for_deadline(3.0)  # the line is pending, due in 3 s
        await m.flush()
        assert m.notices.statistics().current_buffer_used == 1  # on notices when flush returns
        assert (await next_notice(m)).text == "ADDED todo"
        assert clock.now() == 0.0  # without any time passing
        await m.flush()  # nothing pending: nothing sent
        # The debounce goes on as before.
        clock.advance(1.0)
        fake.update(NOTES, {"todo": "eggs"})
        await clock.wait_for_deadline(4.0)
        assert m.notices.statistics().current_buffer_used == 0
        clock.advance(3.0)
        assert (await next_notice(m)).text == "MODIFIED todo (milk→eggs)"
