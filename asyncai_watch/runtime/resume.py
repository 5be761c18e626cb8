"""A manager's resume store: checkpoints written in batches, notices kept until their turn ends.

The shell of :mod:`asyncai_watch.core.resume` over :class:`~asyncai_watch.resume_store.ResumeStore`
(only with a ``watch_state`` file; without one every call here is a no-op):

- each watcher marks where it stands after a read's lines were queued (:meth:`Resume.mark`): a
  checkpoint moves on when the watch has no lines waiting, else it is held until its notice
  leaves (:meth:`Resume.handed`, which also keeps the notice in the outbox, with an id in its
  ``meta`` for :meth:`Resume.taken`);
- :meth:`Resume.run` writes the staged checkpoints when the save window ends, on the clock.

Writes run on the event loop, in order: a checkpoint written by a window can never land after,
and undo, one written with a later notice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import anyio
import attrs

from asyncai_watch import log
from asyncai_watch.clock import Clock, move_on_at
from asyncai_watch.core.notice import SOURCE_WATCH, Notice
from asyncai_watch.core.resume import Checkpoint
from asyncai_watch.errors import StateFileError
from asyncai_watch.resume_store import ResumeStore

__all__ = ["NOTICE_ID_META_KEY", "Resume"]

NOTICE_ID_META_KEY: Final = "asyncai-watch/delivery"
"""Notice ``meta`` key: the outbox id ``WatchManager.notice_taken`` acknowledges. Not an identifier,
so the renderings (``<watch-event>`` attributes, channel meta) leave it out."""


class Resume:
    """The resume store of one manager, or none (see the module docstring)."""

    def __init__(self, state_path: Path | str | None, clock: Clock, *, verbose: bool = False) -> None:
        self._path = state_path
        self._clock = clock
        self._verbose = verbose
        self.store: ResumeStore | None = None
        self._wake = anyio.Event()
        self._sleeping_until: float | None = None

    @property
    def on(self) -> bool:
        return self.store is not None

    def open(self) -> dict[str, Checkpoint]:
        """Open the store beside the state file (after the state file is owned); the checkpoints."""
        if self._path is None:
            return {}
        self.store = ResumeStore.beside(self._path)
        return self.store.load()

    def close(self) -> None:
        store, self.store = self.store, None
        if store is not None:
            try:
                store.close()
            except StateFileError as exc:
                log.emit("watch.resume_store_failed", verbose=self._verbose, error=str(exc))

    def mark(self, name: str, checkpoint: Checkpoint | None, waiting: bool) -> None:
        """Watch ``name`` took a read up to ``checkpoint``; ``waiting``: it has lines not handed yet."""
        store = self.store
        if store is None:
            return
        if waiting:
            store.staged.hold(name)
        elif checkpoint is not None:
            self._staged(store.staged.quiet(name, checkpoint, self._clock.now()))

    def started(self, name: str, checkpoint: Checkpoint | None) -> None:
        """A watch began on its baseline: its checkpoint is written at once (a kill right after
        the start must not lose what changes next)."""
        store = self.store
        if store is None or checkpoint is None:
            return
        store.staged.quiet(name, checkpoint, self._clock.now())
        self._write(store)

    def forget(self, name: str) -> None:
        store = self.store
        if store is not None:
            store.staged.forget(name, self._clock.now())
            self._write(store)

    def handed(self, name: str | None, checkpoint: Checkpoint | None, notice: Notice) -> Notice:
        """``notice`` leaves for the agent: kept until :meth:`taken`, with the watch's checkpoint
        written in the same transaction. Returns it with its id in ``meta``."""
        store = self.store
        if store is None or notice.source != SOURCE_WATCH or NOTICE_ID_META_KEY in notice.meta:
            return notice  # no store; a restore notice (made afresh each start); a redelivery (kept)
        if name is not None and checkpoint is not None:
            store.staged.handed(name, checkpoint, self._clock.now())
        try:
            notice_id = store.hand(notice)
        except StateFileError as exc:
            log.emit("watch.resume_store_failed", verbose=self._verbose, error=str(exc))
            return notice
        # evolve, not a new Notice: the typed events go with it.
        return attrs.evolve(notice, meta={**notice.meta, NOTICE_ID_META_KEY: str(notice_id)})

    def taken(self, notice: Notice) -> None:
        """The turn that read ``notice`` completed: it is not handed over again."""
        store = self.store
        notice_id = notice.meta.get(NOTICE_ID_META_KEY)
        if store is None or notice_id is None or not notice_id.isdigit():
            return
        store.taken(int(notice_id))

    def pending(self) -> list[Notice]:
        """The notices handed before a restart whose turns did not complete, each with its id."""
        if self.store is None:
            return []
        return [
            Notice(n.source, n.text, meta={**n.meta, NOTICE_ID_META_KEY: str(i)})
            for i, n in self.store.pending()
        ]

    def _staged(self, deadline: float | None) -> None:
        if deadline is not None and deadline != self._sleeping_until:
            self._wake.set()

    def _write(self, store: ResumeStore) -> None:
        try:
            store.write()
        except StateFileError as exc:  # the watches go on; the next start reads from further back
            log.emit("watch.resume_store_failed", verbose=self._verbose, error=str(exc))

    async def run(self) -> None:
        """Write the staged checkpoints when their window ends, until cancelled."""
        while self.store is not None:
            self._sleeping_until = self.store.staged.deadline
            async with move_on_at(self._clock, self._sleeping_until):
                await self._wake.wait()
            self._wake = anyio.Event()
            store = self.store
            if store is not None and store.staged.due(self._clock.now()):
                self._write(store)
