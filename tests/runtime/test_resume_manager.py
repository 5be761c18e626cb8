"""The manager resumes its watches from the --watch-state file's resume store."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from asyncai_watch.core.events import EVENTS_MIME_TYPE
from asyncai_watch.core.notice import SOURCE_RESTORE, SOURCE_WATCH, Notice
from asyncai_watch.core.resume import REDELIVERED_META_KEY
from asyncai_watch.runtime.manager import WatchManager
from asyncai_watch.testing import FakeClock
from tests.support.managers import IMMEDIATE, NOTES, memo_fake
from tests.support.resume_logs import LOG, log_body, log_fake

pytestmark = [pytest.mark.anyio, pytest.mark.trio]  # backend-neutral: also under trio


async def receive(m: WatchManager) -> Notice:
    with anyio.fail_after(30):
        return await m.notices.receive()


async def test_a_state_changed_while_the_agent_was_down_arrives_as_its_net_change(tmp_path: Path) -> None:
    path, fake = tmp_path / "state.json", memo_fake()
    fake.set(NOTES, {"a": 1, "b": 2})
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path) as m:
        await m.watch_start("notes", NOTES)
    fake.set(NOTES, {"a": 1, "b": 3, "c": 4})  # while down: changed, added
    fake.set(NOTES, {"a": 1, "b": 20, "c": 4})
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path) as m:
        restore = await receive(m)
        assert restore.source == SOURCE_RESTORE
        assert (
            "- notes memo://notes: restored, caught up 2 changes made while the agent was down"
            in restore.text
        )
        away = await receive(m)
        assert away.source == SOURCE_WATCH
        assert away.meta["name"] == "notes"
        lines = away.text.splitlines()
        assert lines[0].startswith("While you were away (2 changes to memo://notes")
        assert sorted(lines[1:]) == ["ADDED c", "MODIFIED b (2→20)"]


async def test_an_event_log_catches_up_every_missed_event_in_order(tmp_path: Path) -> None:
    path, fake = tmp_path / "state.json", log_fake()
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path) as m:
        await m.watch_start("pods", LOG)
    fake.set(LOG, log_body("L1", range(1, 8)), mime_type=EVENTS_MIME_TYPE)  # 4..7 while down
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path) as m:
        restore = await receive(m)
        assert "pods kcp://pods: restored, caught up 4 changes" in restore.text
        away = await receive(m)
        assert [line.split()[-1] for line in away.text.splitlines()[1:]] == [
            "pod-4",
            "pod-5",
            "pod-6",
            "pod-7",
        ]
        assert "GAP" not in away.text
        assert fake.positions[-1] == ("L1", 3)  # read from the saved position


async def test_a_log_that_restarted_while_the_agent_was_down_is_a_gap(tmp_path: Path) -> None:
    path, fake = tmp_path / "state.json", log_fake()
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path) as m:
        await m.watch_start("pods", LOG)
    fake.set(LOG, log_body("L2", range(1, 3)), mime_type=EVENTS_MIME_TYPE)
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path) as m:
        restore = await receive(m)
        assert "the server's log restarted" in restore.text
        away = await receive(m)
        assert away.text.splitlines()[1].startswith("GAP")


async def test_nothing_changed_is_resumed_with_no_notice(tmp_path: Path) -> None:
    path, fake = tmp_path / "state.json", log_fake()
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path) as m:
        await m.watch_start("pods", LOG)
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path) as m:
        restore = await receive(m)
        assert "pods kcp://pods: restored, resumed (nothing changed" in restore.text
        fake.set(LOG, log_body("L1", range(1, 5)), mime_type=EVENTS_MIME_TYPE)
        fake.push(LOG)
        after = await receive(m)  # the next notice is the live change, not a catch-up
        assert after.text == "ADDED pod-4"


async def test_a_notice_not_taken_is_handed_over_again_flagged_and_once_taken_never(tmp_path: Path) -> None:
    path, fake = tmp_path / "state.json", memo_fake()
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path) as m:
        await m.watch_start("notes", NOTES)
        fake.update(NOTES, {"k": 1})
        first = await receive(m)
        assert first.text == "ADDED k"
        # The agent's turn on it never completes: no notice_taken.
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path) as m:
        assert (await receive(m)).source == SOURCE_RESTORE
        again = await receive(m)
        assert again.meta[REDELIVERED_META_KEY] == "1"
        assert again.text.endswith("\nADDED k")
        m.notice_taken(again)
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path) as m:
        restore = await receive(m)
        assert "notes memo://notes: restored, resumed" in restore.text
        fake.update(NOTES, {"k": 2})
        assert (await receive(m)).text == "MODIFIED k (1→2)"


async def test_without_a_state_file_notices_carry_no_id() -> None:
    fake = memo_fake()
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock()) as m:
        await m.watch_start("notes", NOTES)
        fake.update(NOTES, {"k": 1})
        notice = await receive(m)
        assert "asyncai-watch/delivery" not in notice.meta
        m.notice_taken(notice)  # nothing to acknowledge: a no-op
