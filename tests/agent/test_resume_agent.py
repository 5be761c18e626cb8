"""At-least-once to the agent: a notice is taken when the run that read it completes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from asyncai_agent.events import AgentEvent
from asyncai_agent.orchestrator import Orchestrator
from asyncai_agent.runtime import Run
from asyncai_agent.thread import Message
from asyncai_watch.core.notice import Notice
from asyncai_watch.runtime.manager import WatchManager
from asyncai_watch.testing import FakeClock, FakeSource
from tests.support.managers import IMMEDIATE, NOTES, memo_fake

pytestmark = pytest.mark.anyio


class Channel:
    name = "test"

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def send(self, text: str) -> None:
        self.sent.append(text)


class Model:
    """Records what each run read; a run blocks until ``finish`` is set when ``block`` is."""

    def __init__(self, *, block: bool) -> None:
        self.block = block
        self.reading = anyio.Event()
        self.finish = anyio.Event()
        self.read: list[str] = []

    async def __call__(
        self, run: Run, thread: list[Message], emit: Callable[[AgentEvent], None]
    ) -> str | None:
        self.read += [m.text for m in run.picked_up]
        self.reading.set()
        if self.block:
            await self.finish.wait()
        return "NO_REPLY"


async def run_agent(
    path: Path, fake: FakeSource, model: Model, *, change: dict[str, int] | None = None
) -> None:
    """One life of the agent: the manager feeds the orchestrator; it ends (cancelled) once the
    model is reading and, when it blocks, before its run completes: a crash mid-turn."""
    async with (
        WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path) as m,
        Orchestrator(model, default_channel=Channel(), notice_taken=m.notice_taken) as orch,
    ):
        if not m.watch_list():
            await m.watch_start("notes", NOTES)
        orch.forward_notices(m.notices)
        if change is not None:
            fake.update(NOTES, change)
        with anyio.fail_after(30):
            await model.reading.wait()
            if not model.block:
                await orch.wait_idle()


async def test_a_notice_whose_run_did_not_complete_is_read_again_flagged_once(tmp_path: Path) -> None:
    path, fake = tmp_path / "state.json", memo_fake()
    first = Model(block=True)
    await run_agent(path, fake, first, change={"k": 1})  # dies mid-turn on "ADDED k"
    assert any("ADDED k" in text for text in first.read)
    second = Model(block=False)
    await run_agent(path, fake, second)  # its run completes: the notice is taken
    again = [t for t in second.read if "ADDED k" in t]
    assert len(again) == 1
    assert "Redelivered" in again[0]
    third = Model(block=False)
    await run_agent(path, fake, third)  # taken: never again
    assert not any("ADDED k" in t for t in third.read)


async def test_the_orchestrator_acknowledges_only_after_the_run_completes() -> None:
    taken: list[Notice] = []
    model = Model(block=True)
    notice = Notice("watch", "ADDED k", meta={"name": "n", "asyncai-watch/delivery": "1"})
    async with Orchestrator(model, default_channel=Channel(), notice_taken=taken.append) as orch:
        await orch.notice_tx.send(notice)
        with anyio.fail_after(30):
            await model.reading.wait()
        assert taken == []
        model.finish.set()
        with anyio.fail_after(30):
            await orch.wait_idle()
        assert taken == [notice]
