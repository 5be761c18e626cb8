"""The files server through the generic client: WatchManager -> McpResourceSource -> stdio.

No files-specific code on the client side: this is the third server the
library watches with the same machinery as memo and kcp.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from asyncai_watch.core.limits import Limits
from asyncai_watch.core.notice import Notice
from asyncai_watch.mcp.client import McpResourceSource
from asyncai_watch.runtime.manager import WatchManager

pytestmark = pytest.mark.anyio

WAIT = 30.0


@asynccontextmanager
async def manager(root: Path, limits: Limits) -> AsyncIterator[WatchManager]:
    source = McpResourceSource.stdio([sys.executable, "-m", "asyncai_servers.files", str(root)], name="files")
    async with source, WatchManager([source], limits=limits) as m:
        yield m


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

    # The design's default debounce (3 s quiet, 15 s at most): a loaded machine can stall a
    # burst for over a second, which would split a shorter quiet window into more notices.
    async with manager(tmp_path, Limits(debounce_quiet=3.0, debounce_max_wait=15.0)) as m:
        assert (await m.watch_start(name="burst", uri=uri)).shape == "state"
        await anyio.to_thread.run_sync(burst)
        # The burst ends with a whole document carrying a new key: "ADDED end" proves the
        # watch reached it (whatever torn or intermediate states it read on the way).
        await anyio.to_thread.run_sync(replace_atomically, target, '{"n": 999, "end": true}')
        seen: list[Notice] = []
        await notice_containing(m, "ADDED end", seen)
        # From exactly that state, the next write is one clean diff.
        await anyio.to_thread.run_sync(replace_atomically, target, '{"n": "done", "end": true}')
        done = await notice_containing(m, "999→done", seen)
        assert done.text == "MODIFIED n (999→done)", done.text
        assert await m.read_resource(uri) == {"n": "done", "end": True}
        (watch,) = m.watch_list()
    # The burst's notice (two if the machine stalled over a second mid-burst) plus "done".
    assert len(seen) <= 3, [n.text for n in seen]
    assert watch.notices == len(seen)
    # Reads coalesced: one diff per write would be 1,000 events or more (torn reads add more).
    assert watch.events < 500, watch


async def test_directory_changes_reach_the_agent_as_lines(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a")
    uri = f"dir-events://{tmp_path}?recursive=true"
    async with manager(tmp_path, Limits(debounce_quiet=0.2, debounce_max_wait=5.0)) as m:
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
    async with manager(tmp_path, Limits(debounce_quiet=0.2, debounce_max_wait=5.0)) as m:
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
