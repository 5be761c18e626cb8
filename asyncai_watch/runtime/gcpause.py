"""The cyclic garbage collector paused around one large parse or diff (the shell's choice).

A large read's parse and diff allocate a tree that stays reachable until they return, so a
collection in the middle frees nothing: it only scans the growing tree again, and now and then
the whole heap (a 100,000-item body took twice as long with the collector on,
docs/benchmarks.md). The pure core never touches the collector; the runner and the large-body
worker pause it around a read longer than :data:`GC_PAUSE_ABOVE`, and resume it (if it was on)
when the read is done. The objects made meanwhile are met by the next collection, once.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

__all__ = ["GC_PAUSE_ABOVE", "gc_paused"]

GC_PAUSE_ABOVE: Final = 2048
"""Reads longer than this (characters) are parsed and diffed with the cyclic GC paused."""


@contextmanager
def gc_paused(size: int) -> Iterator[None]:
    """Pause the cyclic GC for the block when ``size`` is over :data:`GC_PAUSE_ABOVE`."""
    paused = size > GC_PAUSE_ABOVE and gc.isenabled()
    if paused:
        gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()
