"""The MCP stdio transport, with a stdin reader that a cancel (Ctrl-C) ends at once.

The SDK's ``stdio_server()`` reads stdin in a worker thread. A thread cannot be
cancelled, so Ctrl-C on a server whose client still holds the pipe (or a
terminal) waited until stdin closed. Here the wire is read on the event loop:
wait until the descriptor is readable, then one ``os.read`` (which cannot block
then). Only pipes, sockets and terminals can block; other stdins (a file,
``/dev/null``) reach EOF by themselves and keep the SDK's reader.

Like the SDK, fd 0 points at the null device while serving, so handlers and child
processes (kubectl) never read the wire; it is restored on exit.
"""

from __future__ import annotations

import codecs
import os
import stat
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import anyio
from mcp.server.stdio import stdio_server as sdk_stdio_server

__all__ = ["stdio_server"]

_CHUNK = 1 << 16


def _can_block(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)


class _Lines:
    """``async for line in ...`` over a descriptor, read on the event loop (no thread)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._lines: deque[str] = deque()
        self._partial = ""
        self._eof = False

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        while not self._lines:
            if self._eof:
                raise StopAsyncIteration
            await anyio.wait_readable(self._fd)
            chunk = os.read(self._fd, _CHUNK)  # readable: returns at once (data or EOF)
            text = self._partial + self._decoder.decode(chunk, final=not chunk)
            *complete, self._partial = text.split("\n")
            self._lines.extend(line + "\n" for line in complete)
            if not chunk:
                self._eof = True
                if self._partial:  # a last message without its newline
                    self._lines.append(self._partial)
                    self._partial = ""
        return self._lines.popleft()


@asynccontextmanager
async def stdio_server() -> AsyncIterator[tuple[Any, Any]]:
    """``mcp.server.stdio.stdio_server()``, but Ctrl-C does not wait for stdin to close."""
    if not _can_block(0):
        async with sdk_stdio_server() as streams:
            yield streams
        return
    wire = os.dup(0)
    os.set_inheritable(wire, False)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        # The SDK iterates stdin with ``async for``; that is all of AsyncFile it uses.
        lines = cast(anyio.AsyncFile[str], _Lines(wire))
        async with sdk_stdio_server(stdin=lines) as streams:
            yield streams
    finally:
        os.dup2(wire, 0)
        os.close(null)
        os.close(wire)
