"""The files server's change source: the pure watch table, and real inotify through the event loop."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

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
    WatchShares,
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
async def test_sources_share_a_directory_watch_until_the_last_lets_go(
    tmp_path: Path, inotify: Inotify
) -> None:
    (tmp_path / "sub").mkdir()
    tree = ChangeSource(inotify, str(tmp_path), recursive=True, timing=NotifyTiming())
    sub = ChangeSource(inotify, str(tmp_path / "sub"), recursive=False, timing=NotifyTiming())
    await tree.open()
    await sub.open()
    try:
        assert (inotify.instances, inotify.watches) == (1, 2)  # the root, and sub/ shared by both
        (tmp_path / "sub" / "x.txt").write_text("x")
        await batch_naming(tree, tmp_path / "sub" / "x.txt")
        await batch_naming(sub, tmp_path / "sub" / "x.txt")
        # The tree sees sub/ leave and lets go of it, then watches it again under its new name;
        # the kernel's watch stayed (sub still holds it), so it is the same one.
        (tmp_path / "sub").rename(tmp_path / "moved")
        await batch_naming(tree, tmp_path / "moved")
        assert (await next_batch(sub)).gone
        assert (tree.watches, inotify.watches) == (2, 2)
        (tmp_path / "moved" / "y.txt").write_text("y")
        batch = await batch_naming(tree, tmp_path / "moved" / "y.txt")
        assert not any(p.startswith(str(tmp_path / "sub")) for p in batch.paths)  # each source's own names
        tree.close()
        assert inotify.watches == 1  # the root went with its only holder; the shared one stays
        (tmp_path / "moved" / "z.txt").write_text("z")
        await batch_naming(sub, tmp_path / "sub" / "z.txt")  # still watched (named as sub knows it)
        sub.close()
        assert (inotify.instances, inotify.watches) == (1, 0)
    finally:
        tree.close()
        sub.close()


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


# -- the shared instance: which source holds which watch, and who gets which event ----------------

_HOLDERS = st.sampled_from("abc")
_WDS = st.integers(1, 4)
_ops = st.one_of(
    st.tuples(st.just("attach"), _HOLDERS, _WDS),
    st.tuples(st.just("detach"), _HOLDERS, st.lists(_WDS, max_size=3)),
    st.tuples(st.just("detach_all"), _HOLDERS),
    st.tuples(
        st.just("route"),
        st.lists(
            st.tuples(_WDS, st.sampled_from([IN_MODIFY, IN_IGNORED, IN_CREATE | IN_ISDIR]))
            | st.just((-1, IN_Q_OVERFLOW)),
            max_size=5,
        ),
    ),
)


@given(st.lists(_ops, max_size=40))
def test_shares_route_each_event_to_its_holders_and_remove_a_watch_with_its_last_holder(
    ops: list[tuple[Any, ...]],
) -> None:
    shares: WatchShares[str] = WatchShares()
    held: dict[str, set[int]] = {}  # the model: who holds what
    in_kernel: set[int] = set()  # watches the kernel has (added, neither removed nor dropped by it)
    for op in ops:
        if op[0] == "attach":
            _, holder, wd = op
            shares.attach(holder, wd)
            held.setdefault(holder, set()).add(wd)
            in_kernel.add(wd)
        elif op[0] in ("detach", "detach_all"):
            holder = op[1]
            wds = op[2] if op[0] == "detach" else sorted(held.get(holder, ()))
            removed = shares.detach(holder, wds) if op[0] == "detach" else shares.detach_all(holder)
            mine = held.get(holder, set())
            letting_go = mine & set(wds)
            mine -= letting_go
            still = {wd for h, ws in held.items() for wd in ws}
            # A watch leaves the kernel exactly when its last holder lets go, and only once.
            assert sorted(removed) == sorted(letting_go - still)
            assert set(removed) <= in_kernel
            in_kernel -= set(removed)
        else:
            events = [(wd, mask, 0, "x") for wd, mask in op[1]]
            routed = shares.route(events)
            expected: dict[str, list[tuple[int, int, int, str]]] = {}
            for event in events:
                wd, mask = event[0], event[1]
                owners = (
                    [h for h, ws in held.items() if ws]
                    if mask & IN_Q_OVERFLOW
                    else [h for h, ws in held.items() if wd in ws]
                )
                for h in owners:
                    expected.setdefault(h, []).append(event)
                if mask & IN_IGNORED:  # the kernel dropped it: nobody holds it, nobody removes it
                    for ws in held.values():
                        ws.discard(wd)
                    in_kernel.discard(wd)
            assert routed == expected
        assert {wd for ws in held.values() for wd in ws} == {wd for wd in range(1, 5) if shares.holders(wd)}
        assert len(shares) == len({wd for ws in held.values() for wd in ws})
        for holder in "abc":
            assert shares.held(holder) == frozenset(held.get(holder, ()))


@given(
    st.lists(st.sampled_from(["a", "a/b", "a/b/c", "d", "d/e"]), unique=True),
    st.lists(
        st.tuples(
            st.sampled_from(["", "a", "a/b", "d"]),  # the directory an event is on ("": the root)
            st.sampled_from(
                [
                    IN_MODIFY,
                    IN_CREATE | IN_ISDIR,
                    IN_MOVED_FROM | IN_ISDIR,
                    IN_MOVED_TO | IN_ISDIR,
                    IN_IGNORED,
                ]
            ),
            st.sampled_from(["a", "b", "c", "e", "f.txt"]),
        ),
        max_size=8,
    ),
)
def test_table_names_only_paths_in_its_tree_and_forgets_what_moved_away(
    dirs: list[str], raw: list[tuple[str, int, str]]
) -> None:
    """Each source names the watches it holds by its own paths: whatever another source sharing a
    descriptor sees, this table reports only paths in its tree and never a stale one."""
    table = WatchTable("/r", recursive=True)
    wd_of = {"": 1} | {d: i + 2 for i, d in enumerate(dirs)}
    before = {wd: f"/r/{d}".rstrip("/") for d, wd in wd_of.items()}
    for wd, path in before.items():
        table.added(wd, path)
    events = [(wd_of[d], mask, 0, "" if mask == IN_IGNORED else name) for d, mask, name in raw if d in wd_of]
    out = table.translate(events)
    assert all(path == "/r" or path.startswith("/r/") for path in out.paths), out.paths
    assert all(path.startswith("/r/") for path in out.new_dirs), out.new_dirs
    left = {wd: table.path_of(wd) for wd in before}
    for wd, path in left.items():
        if path is not None:
            assert path == before[wd]  # a name never changes under a source
    for wd, mask, _, name in events:
        if mask == IN_MOVED_FROM | IN_ISDIR and left[wd] is not None:
            moved = f"{before[wd]}/{name}"
            stale = [p for p in left.values() if p is not None and (p == moved or p.startswith(moved + "/"))]
            assert not stale, (moved, stale)
    # A watch that left the table was moved away (dropped: to be let go of) or dropped by the kernel.
    ignored = {wd for wd, mask, _, _ in events if mask == IN_IGNORED}
    assert len(out.dropped) == len(set(out.dropped))
    assert {wd for wd, path in left.items() if path is None} <= set(out.dropped) | ignored
    assert out.gone == (1 in ignored)
