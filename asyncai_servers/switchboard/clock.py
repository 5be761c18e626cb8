"""Wall-clock time for lease deadlines (leases must mean the same instant to every replica)."""

from __future__ import annotations

import time
from typing import Protocol

import anyio

__all__ = ["Clock", "WallClock"]


class Clock(Protocol):
    """What the lease timer needs; tests pass a manual clock they advance by hand."""

    def now(self) -> float: ...

    async def sleep_until(self, deadline: float) -> None: ...


class WallClock:
    """Unix time: comparable across replicas and restarts (a monotonic clock is not)."""

    def now(self) -> float:
        return time.time()

    async def sleep_until(self, deadline: float) -> None:
        await anyio.sleep(max(0.0, deadline - time.time()))
