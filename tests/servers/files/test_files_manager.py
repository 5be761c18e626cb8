"""The files server through the generic client: WatchManager -> McpResourceSource -> stdio.

No files-specific code on the client side: this is the third server the
library watches with the same machinery as memo and kcp.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import anyio
import pytest

from asyncai_watch.core.limits import Limits
from asyncai_watch.core.notice import Notice
from asyncai_watch.runtime.manager import WatchManager
from asyncai_watch.testing import FakeClock
from tests.support.managers import stdio_manager

pytestmark = pytest.mark.anyio

WAIT = 30.0


FILES = [sys.executable, "-m", "asyncai_servers.files"]


async def notice_containing(m: WatchManager, text: str, seen: list[Notice]) -> Notice:
    with anyio.fail_after(WAIT):
        while True:
            notice = await m.notices.receive()
            seen.append(notice)
            if text in notice.text:
                return notice


def replace_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


async def test_burst_of_1000_writes_gives_few_notices_and_the_final_state_is_right(tmp_path: Path) -> None:
    target = tmp_path / "burst.json"
    target.write_text('{"n": -1}')
    uri = f"file://{target}"

    def burst() -> None:
        for i in range(1000):
            target.write_text(json.dumps({"n": i}))  # in place: the server may catch torn states

    # The design's default debounce on a clock that moves only when told: however slowly a busy
    # machine runs the burst, nothing is due until the test says so, so its lines make one notice.
    clock = FakeClock()
    limits = Limits()
    seen: list[Notice] = []

    async def flush() -> Notice:
        """The notice of everything pending, once something is (the watch parks on its deadline)."""
        with anyio.fail_after(WAIT):
            await clock.wait_for_sleepers(1)
            clock.advance(limits.debounce_max_wait)
            notice = await m.notices.receive()
        seen.append(notice)
        return notice

    async with stdio_manager("files", [*FILES, str(tmp_path)], limits, clock=clock) as m:
        assert (await m.watch_start(name="burst", uri=uri)).shape == "state"
        await anyio.to_thread.run_sync(burst)
        await anyio.to_thread.run_sync(replace_atomically, target, '{"n": 999, "end": true}')
        await flush()  # the burst, as far as the watch has read it (its end may be in "+N more")
        # A whole document with a key no earlier one had: whatever state the watch read last,
        # "ADDED done" is in its diff, and every read from here has a few lines, under the cap.
        await anyio.to_thread.run_sync(replace_atomically, target, '{"n": 999, "end": true, "done": 1}')
        while "ADDED done" not in (tail := await flush()).text.splitlines():
            pass
        # The watch holds exactly the last document: the next write is one clean diff.
        await anyio.to_thread.run_sync(replace_atomically, target, '{"n": 999, "end": true, "done": 2}')
        last = await flush()
        assert last.text == "MODIFIED done (1→2)", last.text
        assert await m.read_resource(uri) == {"n": 999, "end": True, "done": 2}
        (watch,) = m.watch_list()
    # Reads coalesced: one diff per write would be 1,000 events or more (torn reads add more).
    assert watch.events < 500, watch
    assert watch.notices == len(seen)
    # Few notices: the burst's, at most two catching up with the end of it, the last two writes'.
    assert len(seen) <= 5, [n.text for n in seen]
    # Each notice is its window's net change: every object at most once, so the burst of 1,000
    # writes (torn reads and all) reads as a few lines, each event typed with its line.
    for notice in seen:
        keys = [ev.key for ev in notice.events]
        assert len(keys) == len(set(keys)), notice.text
        assert notice.text.splitlines() == [ev.line for ev in notice.events], notice.text
    assert seen[0].events[0].key in ("n", "error"), seen[0].text
    # The writes after the burst were under the cap: all their lines are shown.
    assert not re.search(r"^\+\d+ more$", f"{tail.text}\n{last.text}", re.MULTILINE), tail.text


async def test_directory_changes_reach_the_agent_as_lines(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a")
    uri = f"dir-events://{tmp_path}?recursive=true"
    async with stdio_manager(
        "files", [*FILES, str(tmp_path)], Limits(debounce_quiet=0.2, debounce_max_wait=5.0)
    ) as m:
        assert (await m.watch_start(name="tree", uri=uri)).shape == "event-log"
        (tmp_path / "a.txt").rename(tmp_path / "b.txt")
        (tmp_path / "sub").mkdir()
        (tmp_path / "sub" / "c.txt").write_text("c")
        seen: list[Notice] = []
        await notice_containing(m, "sub/c.txt", seen)
        text = "\n".join(n.text for n in seen)
        # Entries are named by their identity ("name"), as the same item in a state resource would be.
        lines = text.splitlines()
        for line in ("DELETED a.txt", "ADDED b.txt", "ADDED sub", "ADDED sub/c.txt"):
            assert line in lines, text


async def test_torn_json_surfaces_as_an_error_and_recovers(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text('{"mode": "on"}')
    uri = f"file://{config}"
    async with stdio_manager(
        "files", [*FILES, str(tmp_path)], Limits(debounce_quiet=0.2, debounce_max_wait=5.0)
    ) as m:
        await m.watch_start(name="cfg", uri=uri)
        # Written whole (by rename) so each read sees exactly this torn text, nothing in between.
        await anyio.to_thread.run_sync(replace_atomically, config, '{"mode": "o')
        seen: list[Notice] = []
        torn = await notice_containing(m, "error", seen)
        # The error value replaces the document: the diff says so, and never shows torn text.
        assert set(torn.text.splitlines()) == {"ADDED error", "DELETED mode"}
        assert (await m.read_resource(uri)).keys() == {"error"}
        await anyio.to_thread.run_sync(replace_atomically, config, '{"mode": "off"}')
        recovered = await notice_containing(m, "mode", seen)
        assert set(recovered.text.splitlines()) == {"ADDED mode", "DELETED error"}
        assert await m.read_resource(uri) == {"mode": "off"}
