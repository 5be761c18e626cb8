"""Wall-clock time for lease deadlines (leases must mean the same instant to every replica)."""

from __future__ import annotations

import time

import anyio

from asyncai_watch.clock import Clock  # the library's protocol; tests pass its FakeClock

__all__ = ["Clock", "WallClock"]


class WallClock:
    """Unix time: comparable across replicas and restarts (a monotonic clock is not)."""

    def now(self) -> float:
        return time.time()

    async def sleep_until(self, deadline: float) -> None:
        await anyio.sleep(max(0.0, deadline - time.time()))
