"""The MCP stdio transport, with a stdin reader that a cancel (Ctrl-C) ends at once.

The SDK's ``stdio_server()`` reads stdin in a worker thread. A thread cannot be
cancelled, so Ctrl-C on a server whose client still holds the pipe (or a
terminal) waited until stdin closed. Here the wire is read on the event loop:
wait until the descriptor is readable, then one ``os.read`` (which cannot block
then). Only pipes, sockets and terminals can block; other stdins (a file,
``/dev/null``) reach EOF by themselves and keep the SDK's reader.

Like the SDK, fd 0 points at the null device while serving, so handlers and child
processes (kubectl) never read the wire; it is restored on exit.

A server is a child of its client, and ends quietly when that client goes: a
closed stdin ends ``server.run``; SIGTERM (a parent stopped by ``timeout``, or
its whole process group signalled) ends the input the same way, so the server
shuts down as after a closed stdin and exits 0; a broken stdout (the client
exited while a response or notification was being written) ends the transport
without a traceback.
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

from asyncai_watch.signals import on_sigterm

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
        self._waiting = anyio.CancelScope()

    def end(self) -> None:
        """End the input now, as if stdin had closed (lines already read are still served)."""
        self._eof = True
        self._waiting.cancel()

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        while not self._lines:
            if self._eof:
                raise StopAsyncIteration
            with self._waiting:  # end() cancels only this wait
                await anyio.wait_readable(self._fd)
            if self._eof:
                continue
            self._waiting = anyio.CancelScope()
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
    """``mcp.server.stdio.stdio_server()``, but Ctrl-C does not wait for stdin to close.

    SIGTERM ends the input like a closed stdin (``server.run`` then returns), and a client
    that went away mid-write (``BrokenPipeError``) ends the transport quietly instead of
    with a traceback.
    """
    try:
        async with _transport() as streams:
            yield streams
    except* (BrokenPipeError, ConnectionResetError):
        # The client is gone: nothing can be said to it, and nobody is left to read an error.
        _detach_stdout()


def _detach_stdout() -> None:
    # Point fd 1 at the null device so the interpreter's final flush of sys.stdout cannot print
    # "Exception ignored ... BrokenPipeError" on the way out.
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
    finally:
        os.close(null)


@asynccontextmanager
async def _transport() -> AsyncIterator[tuple[Any, Any]]:
    if not _can_block(0):
        # A file or /dev/null: EOF comes by itself, and SIGTERM keeps its default action.
        async with sdk_stdio_server() as streams:
            yield streams
        return
    wire = os.dup(0)
    os.set_inheritable(wire, False)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        lines = _Lines(wire)
        # The SDK iterates stdin with ``async for``; that is all of AsyncFile it uses.
        async with (
            on_sigterm(lines.end),
            sdk_stdio_server(stdin=cast(anyio.AsyncFile[str], lines)) as streams,
        ):
            yield streams
    finally:
        os.dup2(wire, 0)
        os.close(null)
        os.close(wire)
