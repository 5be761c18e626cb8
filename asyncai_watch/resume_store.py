"""Where ``--watch-state`` keeps what a watch needs to resume, and the notices not yet taken.

Beside the state file ``PATH`` (beside its real target, like its lock) is ``PATH.resume.sqlite``,
an SQLite database in WAL mode (stdlib :mod:`sqlite3`; docs/watch-manager.md, "Resuming"):

- ``checkpoints``: per watch, an event log's ``(log_id, seq)`` or a state watch's last body
  (:class:`~asyncai_watch.core.resume.Checkpoint`, at most
  :data:`~asyncai_watch.core.resume.MAX_SAVED_BODY` bytes);
- ``outbox``: the notices handed to the agent whose turn has not completed yet, at most
  :data:`MAX_PENDING_NOTICES` (the oldest beyond it are dropped, and counted).

Why SQLite and not atomically replaced files: checkpoints change many times a second on a busy
watch, and a transaction rewrites only the rows that moved, where a replaced file rewrites every
watch's body each time; a WAL commit is one append (no ``fsync`` with ``synchronous=NORMAL``),
and a committed transaction survives the process being killed (SIGKILL): only a power loss can
take the last commits back, and then a watch reads from further back, it misses nothing.

The store is not an owner itself: the state file's ``flock`` (:class:`StateFile`) makes one
process its only writer. Its calls block (a commit is tens of microseconds; a 1 MiB body a few
milliseconds): the shell batches checkpoints (:class:`~asyncai_watch.core.resume.Checkpoints`)
so a busy watch commits at most once per window.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from pathlib import Path
from typing import Final

from asyncai_watch.core.notice import Notice
from asyncai_watch.core.resume import SAVE_WINDOW, Checkpoint, Checkpoints
from asyncai_watch.errors import StateFileError

__all__ = ["MAX_PENDING_NOTICES", "STORE_SUFFIX", "ResumeStore"]

STORE_SUFFIX: Final = ".resume.sqlite"
MAX_PENDING_NOTICES: Final = 256
"""Notices kept for redelivery while their turns have not completed; beyond it the oldest go
(counted in :attr:`ResumeStore.dropped`), so an agent that never finishes a turn cannot grow the
store without bound."""

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS checkpoints (
    name TEXT PRIMARY KEY, uri TEXT NOT NULL, log_id TEXT, seq INTEGER,
    body TEXT, mime_type TEXT, skipped TEXT);
CREATE TABLE IF NOT EXISTS outbox (
    id INTEGER PRIMARY KEY AUTOINCREMENT, source TEXT NOT NULL, text TEXT NOT NULL, meta TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""


def store_path(state_path: Path | str) -> Path:
    """The store beside a state file (beside its real target, as its lock is)."""
    target = Path(os.path.realpath(state_path))
    return target.with_name(target.name + STORE_SUFFIX)


class ResumeStore:
    """The checkpoints and the outbox of one ``--watch-state`` file (see the module docstring)."""

    def __init__(self, path: Path | str, *, window: float = SAVE_WINDOW) -> None:
        self.path = Path(path)
        self.staged = Checkpoints(window=window)
        """Checkpoints waiting for their write (pure; the shell waits for its deadline)."""
        self._lock = threading.Lock()  # the shell may commit from a worker thread
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
        except (OSError, sqlite3.Error) as exc:
            raise StateFileError(f"resume store {self.path}: cannot open it: {exc}") from exc
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            conn.close()
            raise StateFileError(
                f"resume store {self.path} is not a usable SQLite database ({exc}); remove it to "
                "start every watch from a fresh baseline (the watch specs are in the state file)"
            ) from exc
        self._conn: sqlite3.Connection | None = conn

    @classmethod
    def beside(cls, state_path: Path | str, *, window: float = SAVE_WINDOW) -> ResumeStore:
        return cls(store_path(state_path), window=window)

    def __enter__(self) -> ResumeStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StateFileError(f"resume store {self.path} is closed")
        return self._conn

    def close(self) -> None:
        """Write what is staged, then close (a clean stop loses nothing)."""
        if self._conn is None:
            return
        try:
            self.write()
        finally:
            conn, self._conn = self._conn, None
            conn.close()

    def load(self) -> dict[str, Checkpoint]:
        """Every saved checkpoint by watch name (a row of the wrong types is left out: that watch
        starts from a fresh baseline)."""
        with self._lock:
            rows = (
                self._db()
                .execute("SELECT name, uri, log_id, seq, body, mime_type, skipped FROM checkpoints")
                .fetchall()
            )
        out: dict[str, Checkpoint] = {}
        for name, uri, log_id, seq, body, mime_type, skipped in rows:
            if not (isinstance(name, str) and isinstance(uri, str)):
                continue
            position = (log_id, seq) if isinstance(log_id, str) and type(seq) is int else None
            out[name] = Checkpoint(
                uri,
                position,
                body if isinstance(body, str) else None,
                mime_type if isinstance(mime_type, str) else None,
                skipped if isinstance(skipped, str) else None,
            )
        return out

    def write(self) -> int:
        """Commit every staged checkpoint in one transaction; how many rows moved."""
        with self._lock:
            staged = self.staged.take()
            if staged:
                self._commit(staged)
            return len(staged)

    def _commit(self, staged: dict[str, Checkpoint | None], notice: Notice | None = None) -> int | None:
        db = self._db()
        try:
            db.execute("BEGIN IMMEDIATE")
            for name, cp in staged.items():
                if cp is None:
                    db.execute("DELETE FROM checkpoints WHERE name = ?", (name,))
                    continue
                log_id, seq = cp.position if cp.position is not None else (None, None)
                db.execute(
                    "INSERT OR REPLACE INTO checkpoints VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (name, cp.uri, log_id, seq, cp.body, cp.mime_type, cp.skipped),
                )
            row_id = None
            if notice is not None:
                cur = db.execute(
                    "INSERT INTO outbox (source, text, meta) VALUES (?, ?, ?)",
                    (notice.source, notice.text, json.dumps(dict(notice.meta))),
                )
                row_id = cur.lastrowid
                over = db.execute("SELECT count(*) FROM outbox").fetchone()[0] - MAX_PENDING_NOTICES
                if over > 0:
                    db.execute(
                        "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox ORDER BY id LIMIT ?)", (over,)
                    )
                    db.execute(
                        "INSERT INTO counters VALUES ('dropped', ?) "
                        "ON CONFLICT(name) DO UPDATE SET value = value + excluded.value",
                        (over,),
                    )
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise StateFileError(f"resume store {self.path}: cannot write it: {exc}") from exc
        return row_id

    def hand(self, notice: Notice) -> int:
        """``notice`` goes to the agent: kept (with every staged checkpoint, in one transaction)
        until :meth:`taken`; its id, for :meth:`taken`."""
        with self._lock:
            row_id = self._commit(self.staged.take(), notice)
        assert row_id is not None
        return row_id

    def taken(self, notice_id: int) -> None:
        """The turn that read the notice completed: it is not handed over again."""
        with self._lock:
            try:
                self._db().execute("DELETE FROM outbox WHERE id = ?", (notice_id,))
            except sqlite3.Error as exc:
                raise StateFileError(f"resume store {self.path}: cannot write it: {exc}") from exc

    def pending(self) -> list[tuple[int, Notice]]:
        """The notices handed but not taken, oldest first (to hand over again, flagged)."""
        with self._lock:
            rows = self._db().execute("SELECT id, source, text, meta FROM outbox ORDER BY id").fetchall()
        out = []
        for row_id, source, text, meta in rows:
            try:
                parsed = json.loads(meta)
            except (TypeError, ValueError):
                parsed = {}
            clean = {str(k): str(v) for k, v in parsed.items()} if isinstance(parsed, dict) else {}
            out.append((int(row_id), Notice(str(source), str(text), meta=clean)))
        return out

    @property
    def dropped(self) -> int:
        """Notices dropped from the outbox over :data:`MAX_PENDING_NOTICES`, ever."""
        with self._lock:
            row = self._db().execute("SELECT value FROM counters WHERE name = 'dropped'").fetchone()
        return int(row[0]) if row else 0
