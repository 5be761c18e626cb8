"""A manager's ``--watch-state`` file: saved on every start and stop, restored on entry.

What becomes of each saved spec is decided in the pure :mod:`asyncai_watch.core.restore`; this
is its shell: it writes the file (one write at a time, in a worker thread), starts the saved
watches at once (at most :data:`_RESTORE_AT_ONCE` in flight), sends the restore notice, and
tries a saved watch that may start later again after each of the backoff's delays.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Final

import anyio
import anyio.abc

from asyncai_watch import log
from asyncai_watch.clock import Clock
from asyncai_watch.core.limits import Limits
from asyncai_watch.core.notice import Notice
from asyncai_watch.core.restore import Restore, fate, restored_later
from asyncai_watch.core.resume import Outcome
from asyncai_watch.core.spec import WatchSpec
from asyncai_watch.errors import describe
from asyncai_watch.runtime.notices import Notices
from asyncai_watch.runtime.watcher import Watcher
from asyncai_watch.runtime.watches import Watches
from asyncai_watch.state_file import SavedWatch, StateFile

__all__ = ["Persistence"]

_RESTORE_AT_ONCE: Final = 256  # saved watches started at once on entry

Launch = Callable[[Watcher], Awaitable[object]]
"""Run a reserved watcher's start (restoring: the file is written once, after all of them)."""
Start = Callable[[WatchSpec], Awaitable[object]]
"""Start a saved spec anew, as a restore (reserving its name again)."""
CatchUpFn = Callable[[Watcher], Awaitable[tuple[Outcome, Notice | None]]]
"""A restored watch's outcome and its ``while you were away`` notice (with a resume store)."""


class Persistence:
    """The ``watch_state`` file of one manager, or none (see the module docstring)."""

    def __init__(
        self,
        path: Path | str | None,
        watches: Watches,
        *,
        limits: Limits,
        clock: Clock,
        notices: Notices,
        verbose: bool,
    ) -> None:
        self._state = StateFile(path) if path is not None else None
        self._watches = watches
        self._limits = limits
        self._clock = clock
        self._notices = notices
        self._verbose = verbose
        self._lock = anyio.Lock()
        self._restoring = anyio.CapacityLimiter(_RESTORE_AT_ONCE)

    def load(self) -> list[SavedWatch]:
        """The saved specs (none without a file); a corrupt file raises :class:`~asyncai_watch.StateFileError`."""
        return self._state.load(max_watches=self._limits.max_watches) if self._state is not None else []

    async def save(self, *, without: str | None = None) -> None:
        """Write every started watch's spec, but ``without``'s."""
        if self._state is None:
            return
        async with self._lock:
            await anyio.to_thread.run_sync(self._state.save, self._watches.saved(without=without))

    async def saved(self) -> None:
        """Return once no write is in flight."""
        async with self._lock:
            pass

    def close(self) -> None:
        if self._state is not None:
            self._state.close()  # the file's lock: the next owner may start now

    async def restore(
        self,
        saved: Sequence[SavedWatch],
        *,
        launch: Launch,
        start: Start,
        tg: anyio.abc.TaskGroup,
        catch_up: CatchUpFn | None = None,
    ) -> None:
        """Start every saved watch. One that cannot start is listed ``restore_failed`` with its
        reason and stays saved; one that may start later is tried again in the background, in
        ``tg`` (:func:`~asyncai_watch.core.restore.fate`). No saved spec is ever dropped. Opens
        the notices with the restore notice."""
        assert self._state is not None
        delays = self._limits.backoff.delays()
        outcome = Restore(str(self._state.path), delays, resuming=catch_up is not None)
        failed: dict[str, Exception] = {}

        def keep(spec: WatchSpec, exc: Exception) -> None:
            failed[spec.name] = exc
            self._watches.keep_failed(spec, describe(exc))

        async def launch_one(watcher: Watcher) -> None:
            async with self._restoring:
                try:
                    await launch(watcher)
                except Exception as exc:
                    keep(watcher.spec, exc)

        # Slots are taken in saved order, then the starts run at once (a bridge restarting with
        # thousands of watches): the connection's feed groups their subscriptions.
        async with anyio.create_task_group() as starts:
            for entry in saved:
                spec = entry.spec
                try:
                    watcher, _ = self._watches.reserve(spec.name, spec.uri, spec.on_event)
                except Exception as exc:
                    keep(spec, exc)
                else:
                    starts.start_soon(launch_one, watcher)
        for entry in saved:
            spec = entry.spec
            error = failed.get(spec.name)
            if error is None:
                outcome.add(spec, None)
            elif outcome.add(spec, error, describe(error)) == "retry" and delays:
                tg.start_soon(self._retry, spec, start, name=f"restore {spec.name}")
        self._watches.order_as([entry.spec.name for entry in saved])
        away: list[tuple[Watcher, Notice]] = []
        if catch_up is not None:
            for spec in outcome.restored:
                restored = self._watches.get(spec.name)
                if restored is None or restored.status != "running":
                    continue
                outcome.resumed[spec.name], notice = await catch_up(restored)
                if notice is not None:
                    away.append((restored, notice))
        if outcome.retrying or outcome.broken:
            await self.save()  # each reason goes into the file with its spec
        log.emit(
            "watch.restored",
            verbose=self._verbose,
            path=outcome.path,
            restored=[s.name for s in outcome.restored],
            retrying=[s.name for s, _ in outcome.retrying],
            restore_failed=[s.name for s, _ in (*outcome.retrying, *outcome.broken)],
        )
        for watcher, notice in away:
            self._notices.now(watcher, [notice])  # each after the restore notice
        await self._notices.open(outcome.notice())  # before any other notice

    async def _retry(self, spec: WatchSpec, start: Start) -> None:
        """Try a saved watch again after each of the backoff's delays, while it is still the one
        that could not start (the user may have started it another way, or stopped it)."""
        for attempt, delay in enumerate(self._limits.backoff.delays(), 1):
            await self._clock.sleep_until(self._clock.now() + delay)
            waiting = self._watches.get(spec.name)
            if waiting is None or waiting.status != "restore_failed" or waiting.spec != spec:
                return
            try:
                await start(spec)
            except Exception as exc:
                waiting.retry_failed(describe(exc), attempt=attempt, fate=fate(exc))
                await self.save()
                if fate(exc) == "broken":
                    return
            else:
                await self.save()
                self._notices.now(None, [restored_later(spec, attempt)])
                return
