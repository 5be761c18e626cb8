"""A manager's resume store: checkpoints written in batches, notices kept until their turn ends.

The shell of :mod:`asyncai_watch.core.resume` over :class:`~asyncai_watch.resume_store.ResumeStore`
(only with a ``watch_state`` file; without one every call here is a no-op):

- each watcher marks where it stands after a read's lines were queued (:meth:`Resume.mark`): a
  checkpoint moves on when the watch has no lines waiting, else it is held until its notice
  leaves (:meth:`Resume.handed`, which also keeps the notice in the outbox, with an id in its
  ``meta`` for :meth:`Resume.taken`);
- :meth:`Resume.run` writes the staged checkpoints when the save window ends, on the clock;
- :meth:`Resume.catch_up` says how a restored watch resumes and makes its one ``while you were
  away`` notice.
- :func:`away` turns a restored watch's missed events into its ``while you were away`` notice,
  through its ``on_event`` filter as a live read's events go.

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
from asyncai_watch.core.extract import Body, Pending
from asyncai_watch.core.notice import SOURCE_WATCH, Notice
from asyncai_watch.core.resume import (
    CatchUp,
    Checkpoint,
    Outcome,
    away_filtered,
    catch_up_log,
    catch_up_state,
)
from asyncai_watch.errors import StateFileError, describe
from asyncai_watch.mcp.source import ResourceSource
from asyncai_watch.resume_store import ResumeStore
from asyncai_watch.runtime.topic import Topic, parse
from asyncai_watch.runtime.watcher import Watcher

__all__ = ["NOTICE_ID_META_KEY", "Resume", "away"]

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
        # evolve, not a new Notice: the typed events kept with it go with it.
        return [attrs.evolve(n, meta={**n.meta, NOTICE_ID_META_KEY: str(i)}) for i, n in self.store.pending()]

    async def catch_up(
        self, watcher: Watcher, saved: Checkpoint | None, topic: Topic | None, source: ResourceSource | None
    ) -> tuple[Outcome, Notice | None]:
        """A restored watch's outcome (resumed / caught up / fresh baseline and why) and its one
        ``while you were away`` notice: the events after its saved position up to its baseline
        (an event log, read from that position on ``source``), or its saved body diffed against
        the baseline. ``topic``: the watch's URI on its connection (None when there is none)."""
        baseline = watcher.checkpoint
        if topic is None or baseline is None:
            got = CatchUp(Outcome("fresh", reason="its baseline is kept in the large-body worker"))
        elif saved is not None and saved.uri != watcher.uri:
            got = CatchUp(Outcome("fresh", reason=f"the saved checkpoint is of another URI ({saved.uri})"))
        elif topic.shape == "event-log":
            if saved is None or saved.position is None:
                got = CatchUp(Outcome("fresh", reason="no position was saved for it"))
            else:
                assert source is not None
                try:
                    body = parse(await source.read(watcher.uri, after=saved.position))
                except Exception as exc:
                    got = CatchUp(
                        Outcome("fresh", reason=f"reading from its saved position failed: {describe(exc)}")
                    )
                else:
                    value = body.parsed_body()
                    got = _upto(
                        catch_up_log(saved.position, value.value if value.error is None else value.text)[0],
                        baseline,
                    )
        elif baseline.body is None:
            got = CatchUp(Outcome("fresh", reason=baseline.skipped or "its body is not kept"))
        else:
            got = catch_up_state(saved, Body.of(baseline.body, baseline.mime_type))
        outcome, notice = await away(watcher, got)  # through its filter, as live
        if notice is None:
            self.started(watcher.name, baseline)
            return outcome, None
        self.mark(watcher.name, None, True)  # held until the notice is handed
        return outcome, notice

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


def _upto(got: CatchUp, baseline: Checkpoint) -> CatchUp:
    """``got`` without the events after the watch's baseline (the watch delivers those itself)."""
    if baseline.position is None:
        return got
    _, seq = baseline.position
    events = tuple(ev for ev in got.events if ev.seq is None or ev.seq <= seq)
    if len(events) == len(got.events):
        return got
    changes = sum(1 for ev in events if ev.type != "GAP")
    if not events:
        return CatchUp(Outcome("resumed"))
    return CatchUp(attrs.evolve(got.outcome, changes=changes), events)


async def away(watcher: Watcher, got: CatchUp) -> tuple[Outcome, Notice | None]:
    """A restored watch's outcome and its ``while you were away`` notice (``None``: nothing to
    show). A watch with an ``on_event`` filter runs it on the missed events in its own scope, as
    on a live read's: what it drops is not shown, an error is a line, its lines are the notice's."""
    if not got.events:
        return got.outcome, None
    # The watch's own delivery makes the lines, as for a live read (and counts the events).
    lines, records = await watcher.filtered_lines(Pending(got.events))
    if records:
        log.events(records, watch=watcher.name, uri=watcher.uri, verbose=watcher.verbose)
    return away_filtered(watcher.name, watcher.uri, got, lines, records)
