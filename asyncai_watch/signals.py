"""SIGTERM as an orderly shutdown instead of an abrupt death.

A process that is stopped by ``timeout``, a service manager or its parent gets
SIGTERM. Its default action kills the process at once: open connections are not
closed and child processes find a broken pipe. :func:`on_sigterm` runs an
action instead (end the input, like a closed stdin), and :func:`sigterm_cancels`
cancels a block, which then exits normally. Either way, what encloses the block
unwinds with no exception in flight, as after a normal end.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import attrs

__all__ = ["Termination", "on_sigterm", "sigterm_cancels"]


@attrs.define
class Termination:
    """Whether SIGTERM arrived while the block ran."""

    received: bool = False


@asynccontextmanager
async def on_sigterm(action: Callable[[], None]) -> AsyncIterator[Termination]:
    """While the block runs, the first SIGTERM calls ``action()``; later ones are absorbed.

    The handler stays installed until the block ends, so the orderly shutdown it starts is
    not cut short by a second SIGTERM (``timeout`` signals the command, then its whole
    process group). Only the main thread receives signals: elsewhere the block simply runs.
    """
    termination = Termination()
    if threading.current_thread() is not threading.main_thread():
        yield termination
        return
    async with anyio.create_task_group() as tg:
        tg.start_soon(_watch, action, termination)
        yield termination
        tg.cancel_scope.cancel()  # the block is done: stop listening for the signal


@asynccontextmanager
async def sigterm_cancels() -> AsyncIterator[Termination]:
    """Run the block; SIGTERM cancels it and the ``async with`` then exits normally."""
    with anyio.CancelScope() as scope:
        async with on_sigterm(scope.cancel) as termination:
            yield termination


async def _watch(action: Callable[[], None], termination: Termination) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM) as signals:
        async for _ in signals:
            if not termination.received:
                termination.received = True
                action()
