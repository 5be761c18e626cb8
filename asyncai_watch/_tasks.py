"""A task group held by an ``AsyncExitStack``, safe to unwind under cancellation.

CPython's ``AsyncExitStack`` (3.11 and later) loops forever when one exit callback raises a new
exception and a later one re-raises that same object, which is what an anyio task group does
with the cancellation it is handed: ``_fix_exception_context`` links the exception to itself
and then walks the cycle. A stack whose earlier callback is cancelled while closing a
connection hit this on every Ctrl-C. Re-raising the exception the exit was handed is the same
as not suppressing it, so the wrapper says the latter.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from types import TracebackType

import anyio
import anyio.abc

__all__ = ["enter_task_group"]


class _Held:
    def __init__(self) -> None:
        self.tg = anyio.create_task_group()

    async def __aenter__(self) -> anyio.abc.TaskGroup:
        return await self.tg.__aenter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        try:
            return bool(await self.tg.__aexit__(exc_type, exc, tb))
        except BaseException as raised:
            if exc is not None and raised is exc:
                return False  # "not suppressed": the stack raises it, without a self-link
            raise


async def enter_task_group(stack: AsyncExitStack) -> anyio.abc.TaskGroup:
    """Enter a new task group on ``stack`` (exited, and joined, when the stack unwinds)."""
    return await stack.enter_async_context(_Held())
