"""The resume store beside a --watch-state file: checkpoints and the outbox survive a SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from asyncai_watch.core.notice import SOURCE_WATCH, Notice
from asyncai_watch.core.resume import Checkpoint
from asyncai_watch.errors import StateFileError
from asyncai_watch.resume_store import MAX_PENDING_NOTICES, ResumeStore, store_path
from tests.support import ROOT


def test_checkpoints_round_trip_and_a_stopped_watch_is_deleted(tmp_path: Path) -> None:
    with ResumeStore.beside(tmp_path / "state.json") as store:
        store.staged.quiet("k", Checkpoint("kcp://x", ("L1", 42)), now=0.0)
        store.staged.quiet("m", Checkpoint.of_state("memo://n", '{"a": 1}', "application/json"), now=0.0)
        assert store.write() == 2
    with ResumeStore.beside(tmp_path / "state.json") as store:
        assert store.load() == {
            "k": Checkpoint("kcp://x", ("L1", 42)),
            "m": Checkpoint("memo://n", None, '{"a": 1}', "application/json"),
        }
        store.staged.forget("k", now=0.0)
    with ResumeStore.beside(tmp_path / "state.json") as store:
        assert set(store.load()) == {"m"}


def test_the_store_sits_beside_the_state_files_real_target(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link.json").symlink_to(tmp_path / "real" / "state.json")
    assert store_path(tmp_path / "link.json") == tmp_path / "real" / "state.json.resume.sqlite"


def test_a_handed_notice_is_pending_until_taken(tmp_path: Path) -> None:
    with ResumeStore(tmp_path / "s.sqlite") as store:
        first = store.hand(Notice(SOURCE_WATCH, "one", meta={"name": "a"}))
        second = store.hand(Notice(SOURCE_WATCH, "two", meta={"name": "b"}))
        store.taken(first)
    with ResumeStore(tmp_path / "s.sqlite") as store:
        assert store.pending() == [(second, Notice(SOURCE_WATCH, "two", meta={"name": "b"}))]


def test_handing_a_notice_commits_the_staged_checkpoints_with_it(tmp_path: Path) -> None:
    store = ResumeStore(tmp_path / "s.sqlite", window=60.0)
    store.staged.handed("a", Checkpoint("kcp://x", ("L", 9)), now=0.0)
    store.hand(Notice(SOURCE_WATCH, "x", meta={"name": "a"}))
    assert store.staged.staged == {}
    with ResumeStore(tmp_path / "s.sqlite") as other:  # a second reader sees it committed
        assert other.load()["a"].position == ("L", 9)
    store.close()


def test_the_outbox_is_bounded_and_counts_what_it_dropped(tmp_path: Path) -> None:
    with ResumeStore(tmp_path / "s.sqlite") as store:
        for i in range(MAX_PENDING_NOTICES + 3):
            store.hand(Notice(SOURCE_WATCH, f"n{i}"))
        pending = store.pending()
        assert len(pending) == MAX_PENDING_NOTICES
        assert pending[0][1].text == "n3"
        assert store.dropped == 3


def test_a_file_that_is_not_a_database_is_refused_naming_it_and_the_way_out(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    path.write_bytes(b"not a database at all, just text " * 100)
    with pytest.raises(StateFileError, match=r"s\.sqlite is not a usable SQLite database .*remove it"):
        ResumeStore(path)


_KILLED = textwrap.dedent(
    """
    import os, sys
    from asyncai_watch.core.notice import Notice
    from asyncai_watch.core.resume import Checkpoint
    from asyncai_watch.resume_store import ResumeStore
    store = ResumeStore(sys.argv[1], window=1.0)
    store.staged.quiet("k", Checkpoint("kcp://x", ("L", 1)), now=0.0)
    store.write()                                   # committed
    store.hand(Notice("watch", "handed, turn not done"))
    store.staged.quiet("k", Checkpoint("kcp://x", ("L", 2)), now=0.5)  # staged, inside the window
    print("ready", flush=True)
    sys.stdin.read()
    """
)


def test_a_sigkill_keeps_what_was_committed_and_loses_only_the_staged_window(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with ResumeStore(path) as store:
        assert store.load()["k"].position == ("L", 1)
        assert [n.text for _, n in store.pending()] == ["handed, turn not done"]
