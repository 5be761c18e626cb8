"""The files server's change source: the pure watch table, and real inotify through the event loop."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from asyncai_servers.files.change_source import Batch, ChangeSource, NotifyTiming, WatchTable
from asyncai_servers.files.inotify import (
    IN_CREATE,
    IN_DELETE,
    IN_DELETE_SELF,
    IN_IGNORED,
    IN_ISDIR,
    IN_MODIFY,
    IN_MOVE_SELF,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_Q_OVERFLOW,
    ChangeSourceError,
    Inotify,
)
from asyncai_watch.testing import FakeClock

WAIT = 15.0


def test_table_names_paths_and_tracks_directories() -> None:
    table = WatchTable("/r", recursive=True)
    table.added(1, "/r")
    table.added(2, "/r/a")
    table.added(3, "/r/a/b")
    table.added(4, "/r/c")
    t = table.translate(
        [
            (2, IN_MODIFY, 0, "f.txt"),
            (1, IN_CREATE | IN_ISDIR, 0, "new"),
            (1, IN_MOVED_FROM | IN_ISDIR, 7, "a"),  # a and a/b leave: their watches go
            (3, IN_MODIFY, 0, "late"),  # queued before the move: the path would be stale, so dropped
            (1, IN_MOVED_TO | IN_ISDIR, 7, "moved"),
            (4, IN_DELETE_SELF, 0, ""),  # a subdirectory's own end says nothing new ...
            (4, IN_IGNORED, 0, ""),  # ... and its watch is forgotten
            (9, IN_MODIFY, 0, "x"),  # an unknown watch
            (1, IN_DELETE | IN_ISDIR, 0, "c"),
        ]
    )
    assert t.paths == {"/r/a/f.txt", "/r/new", "/r/a", "/r/moved", "/r/c"}
    assert t.new_dirs == ["/r/new", "/r/moved"]
    assert sorted(t.dropped) == [2, 3]
    assert not t.gone
    assert not t.overflow
    assert len(table) == 1
    assert table.path_of(4) is None


def test_table_flags_the_root_going_and_an_overflow() -> None:
    for mask in (IN_DELETE_SELF, IN_MOVE_SELF, IN_IGNORED):
        table = WatchTable("/r", recursive=False)
        table.added(1, "/r")
        t = table.translate([(1, mask, 0, "")])
        assert t.gone, mask
        assert t.paths == {"/r"}
    table = WatchTable("/r", recursive=False)
    table.added(1, "/r")
    t = table.translate([(-1, IN_Q_OVERFLOW, 0, "")])
    assert t.overflow
    # Not recursive: a new directory is a path like any other, nothing to watch.
    t = table.translate([(1, IN_CREATE | IN_ISDIR, 0, "d")])
    assert (t.paths, t.new_dirs) == ({"/r/d"}, [])


@pytest.fixture
async def inotify() -> AsyncIterator[Inotify]:
    async with Inotify().running() as shared:
        yield shared


async def next_batch(source: ChangeSource) -> Batch:
    with anyio.fail_after(WAIT):
        batch = await source.next_batch()
    assert batch is not None
    return batch


async def batch_naming(source: ChangeSource, path: Path) -> Batch:
    """Batches until one names ``path`` (a write can come in more than one)."""
    while True:
        batch = await next_batch(source)
        if str(path) in batch.paths:
            return batch


@pytest.mark.anyio
async def test_recursive_source_follows_new_and_moved_directories(tmp_path: Path, inotify: Inotify) -> None:
    (tmp_path / "old").mkdir()
    source = ChangeSource(inotify, str(tmp_path), recursive=True, timing=NotifyTiming())
    await source.open()
    try:
        assert source.watches == 2
        (tmp_path / "made").mkdir()
        await batch_naming(source, tmp_path / "made")
        assert source.watches == 3  # watched once its batch is out
        (tmp_path / "made" / "f.txt").write_text("x")
        await batch_naming(source, tmp_path / "made" / "f.txt")
        (tmp_path / "old").rename(tmp_path / "renamed")
        batch = await batch_naming(source, tmp_path / "renamed")
        assert str(tmp_path / "old") in batch.paths
        (tmp_path / "renamed" / "g.txt").write_text("y")
        batch = await batch_naming(source, tmp_path / "renamed" / "g.txt")
        assert not any(p.startswith(str(tmp_path / "old")) for p in batch.paths)  # no stale names
        assert source.watches == 3
        # A symlinked directory is an entry, never followed.
        elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere"
        elsewhere.mkdir()
        os.symlink(elsewhere, tmp_path / "link")
        await batch_naming(source, tmp_path / "link")
        assert source.watches == 3
    finally:
        source.close()


@pytest.mark.anyio
async def test_the_watched_directory_going_away_is_flagged(tmp_path: Path, inotify: Inotify) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    source = ChangeSource(inotify, str(root), recursive=True, timing=NotifyTiming())
    await source.open()
    try:
        shutil.rmtree(root)
        while not (await next_batch(source)).gone:
            pass
    finally:
        source.close()


@pytest.mark.anyio
async def test_open_fails_with_a_message_and_stop_ends_a_wait(tmp_path: Path, inotify: Inotify) -> None:
    missing = ChangeSource(inotify, str(tmp_path / "missing"), recursive=False, timing=NotifyTiming())
    with pytest.raises(ChangeSourceError, match="does not exist"):
        await missing.open()
    source = ChangeSource(inotify, str(tmp_path), recursive=False, timing=NotifyTiming())
    await source.open()
    results: list[Batch | None] = []
    async with anyio.create_task_group() as tg:

        async def wait() -> None:
            results.append(await source.next_batch())

        tg.start_soon(wait)
        await anyio.wait_all_tasks_blocked()
        source.stop()
    assert results == [None]
    source.close()


@pytest.mark.anyio
async def test_debounce_holds_a_batch_open_until_its_deadline(tmp_path: Path, inotify: Inotify) -> None:
    clock = FakeClock()
    source = ChangeSource(
        inotify, str(tmp_path), recursive=False, timing=NotifyTiming(debounce_ms=100), clock=clock
    )
    await source.open()
    try:
        got: list[Batch | None] = []
        async with anyio.create_task_group() as tg:

            async def collect() -> None:
                got.append(await source.next_batch())

            tg.start_soon(collect)
            (tmp_path / "a.txt").write_text("a")
            with anyio.fail_after(WAIT):
                await clock.wait_for_sleepers(1)  # the first change is in: the batch waits for its deadline
            assert clock.deadlines() == [0.1]
            (tmp_path / "b.txt").write_text("b")
            await anyio.wait_all_tasks_blocked()
            assert got == []  # held open: nothing is handed out before the deadline
            clock.advance(0.1)
        (batch,) = got
        assert batch is not None
        paths = set(batch.paths)
        if str(tmp_path / "b.txt") not in paths:  # written while the batch was open: in it, or next
            paths |= (await next_batch(source)).paths
        assert {str(tmp_path / "a.txt"), str(tmp_path / "b.txt")} <= paths
        assert clock.sleepers == 0
    finally:
        source.close()
