"""What ``serve`` runs behind its MCP server: the upstream links, the watch manager, the notices.

:meth:`Bridge.run` starts at once and owns everything as tasks: one supervisor per upstream
(:class:`~.upstreams.UpstreamLink`), and the :class:`~asyncai_watch.WatchManager` over the links,
entered in the background (its restore of ``--watch-state`` waits for the upstreams it needs,
bounded by each link's wait), so the host's ``initialize`` is answered before any upstream is.
A tool that needs the manager awaits :meth:`Bridge.manager`, bounded too.

Every notice goes into the ring (the pull side) and then to the hub (the pushes). A restore
notice is also reported in the next tool result, once (:meth:`Bridge.take_restores`): a push
can be dropped without a word, and a tool result cannot.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.abc

from asyncai_watch import log
from asyncai_watch.clock import Clock, SystemClock, fail_after
from asyncai_watch.core.limits import Limits
from asyncai_watch.core.notice import SOURCE_RESTORE, Notice
from asyncai_watch.errors import WatchError
from asyncai_watch.runtime.manager import WatchManager

from .hub import Hub
from .ring import Entry, NoticeRing
from .upstreams import UpstreamLink

__all__ = ["Bridge", "ManagerUnavailableError"]

MANAGER_GRACE: Final = 20.0
"""Seconds past the upstream wait that a tool waits for the manager (a restore's reads and
subscriptions) before it answers that serve is still starting."""


CONNECT_FALLBACK: Final = 1.0
"""Seconds after start when the upstreams connect even if no host asked anything yet."""


class ManagerUnavailableError(WatchError):
    """The watch manager is not running yet (restoring saved watches), or failed to start."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class Bridge:
    """The links, the manager over them, the notice ring and the push hub of one ``serve``."""

    def __init__(
        self,
        links: Sequence[UpstreamLink],
        ring: NoticeRing,
        hub: Hub,
        *,
        limits: Limits,
        watch_state: Path | None = None,
        verbose: bool = False,
        wait: float,
        clock: Clock | None = None,
    ) -> None:
        self.links = tuple(links)
        self.ring = ring
        self.hub = hub
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._limits = limits
        self._watch_state = watch_state
        self._verbose = verbose
        self._wait = wait
        self._manager: WatchManager | None = None
        self._ready = anyio.Event()
        self._failed: str | None = None
        self._unreported: list[Entry] = []

    @classmethod
    def over(cls, manager: WatchManager, ring: NoticeRing, hub: Hub) -> Bridge:
        """A bridge around a manager the caller runs, with no upstream links of its own: serve's
        MCP server in-process over the caller's watches (tests, embedding). Nothing pumps the
        manager's notices into ``ring``; :meth:`run` is not needed."""
        bridge = cls((), ring, hub, limits=manager.limits, wait=0.0, clock=manager.clock)
        bridge._manager = manager
        bridge._ready.set()
        return bridge

    async def run(
        self,
        connect: anyio.Event | None = None,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run until cancelled; ``started`` at once (nothing here waits for an upstream).

        The upstreams start connecting when ``connect`` is set (at once without one): serve
        sets it once the host's ``initialize`` is answered, because starting a connection
        blocks the event loop a little (a process to spawn, an HTTP client's TLS setup) and the
        host is waiting for that answer. At most :data:`CONNECT_FALLBACK` seconds later they
        start anyway."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._run_manager)
            task_status.started()
            if connect is not None:
                try:
                    async with fail_after(self.clock, CONNECT_FALLBACK):
                        await connect.wait()
                except TimeoutError:
                    pass  # nobody asked: connect all the same
            for link in self.links:
                tg.start_soon(link.run)

    async def _run_manager(self) -> None:
        manager = WatchManager(
            self.links, limits=self._limits, watch_state=self._watch_state, verbose=self._verbose
        )
        try:
            async with manager:
                self._manager = manager
                # The restore notice is queued before the manager is entered: into the ring first,
                # so the first tool result can report it.
                while True:
                    try:
                        first = manager.notices.receive_nowait()
                    except anyio.WouldBlock:
                        break
                    self._add(first)
                    manager.notice_taken(first)
                self._ready.set()
                log.emit("serve.ready", verbose=self._verbose, notices=self.ring.last_id)
                async for notice in manager.notices:
                    self._add(notice)
                    # In the ring, where a pull reads it: with --watch-state, taken (serve's own
                    # ring is what its clients catch up from).
                    manager.notice_taken(notice)
        except Exception as exc:  # e.g. the state file went bad since startup: tools say so, pulls still work
            self._failed = str(exc) if isinstance(exc, WatchError) else f"{type(exc).__name__}: {exc}"
            self._manager = None
            self._ready.set()
            log.logger.exception("serve.manager_failed", extra={"error": self._failed})

    def _add(self, notice: Notice) -> None:
        """Every notice into the ring (pull), then out to whoever can hear a push."""
        entry = self.ring.add(notice, _now())
        if notice.source == SOURCE_RESTORE:
            self._unreported.append(entry)
        self.hub.publish(entry)
        log.emit(
            "serve.notice",
            notice_id=entry.id,
            source=notice.source,
            watch=notice.meta.get("name"),
            outlets=len(self.hub.outlets),
            push_dropped=self.hub.dropped,
        )

    async def manager(self) -> WatchManager:
        """The running manager; waits (bounded) while it restores the saved watches."""
        if not self._ready.is_set():
            try:
                async with fail_after(self.clock, self._wait + MANAGER_GRACE):
                    await self._ready.wait()
            except TimeoutError:
                raise ManagerUnavailableError(
                    "serve is still restoring the saved watches (it waits for their upstream servers); "
                    "watch_list() shows the upstreams, try again shortly"
                ) from None
        if self._manager is None:
            raise ManagerUnavailableError(f"serve cannot run watches: {self._failed}")
        return self._manager

    async def state_saved(self) -> None:
        """Return once no write of the ``--watch-state`` file is in flight."""
        if self._manager is not None:
            await self._manager.state_saved()

    def take_restores(self, seen: Sequence[int] = ()) -> list[Entry]:
        """Restore notices no tool result has reported yet (``seen``: ids this result holds anyway)."""
        out = [e for e in self._unreported if e.id not in seen]
        self._unreported.clear()
        return out

    def upstream_dicts(self) -> list[dict[str, Any]]:
        now, wall = self.clock.now(), datetime.now(UTC)
        return [link.status.as_dict(now, wall) for link in self.links]

    def unavailable(self) -> list[str]:
        """One sentence per upstream that is not connected now."""
        now = self.clock.now()
        return [link.status.summary(now) for link in self.links if link.status.status != "connected"]
