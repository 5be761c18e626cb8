"""Task groups held open across methods (``__aenter__`` / ``__aexit__``), safe to unwind.

:func:`exit_task_group` ends one that an object entered in its ``__aenter__``: cancel, join, and
hand back the body's own exception unwrapped. :func:`enter_task_group` holds one on an
``AsyncExitStack``, where unwinding under cancellation needs care:

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

__all__ = ["enter_task_group", "exit_task_group"]


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


async def exit_task_group(
    tg: anyio.abc.TaskGroup,
    exc_type: type[BaseException] | None,
    exc: BaseException | None,
    tb: TracebackType | None,
) -> bool | None:
    """Cancel ``tg``'s tasks and exit it from an ``__aexit__`` that got ``exc``.

    The task group wraps the body's own exception in a group; it is handed back unwrapped, so
    the caller of ``async with`` sees what its block raised.
    """
    tg.cancel_scope.cancel()
    try:
        return await tg.__aexit__(exc_type, exc, tb)
    except BaseExceptionGroup as group:
        if exc is not None and len(group.exceptions) == 1 and group.exceptions[0] is exc:
            raise exc from exc.__cause__
        raise
