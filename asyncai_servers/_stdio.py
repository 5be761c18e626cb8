"""The MCP stdio transport, on the event loop: a cancel (Ctrl-C) ends it at once, and no thread.

The SDK's ``stdio_server()`` reads stdin in a worker thread. A thread cannot be
cancelled, so Ctrl-C on a server whose client still holds the pipe (or a
terminal) waited until stdin closed. Here the wire is read on the event loop:
wait until the descriptor is readable, then one ``os.read`` (which cannot block
then). Only pipes, sockets and terminals can block; other stdins (a file,
``/dev/null``) reach EOF by themselves and keep the SDK's reader.

The SDK also writes each message with two worker-thread round trips (``write``,
then ``flush``). Here stdout is written on the event loop too, onto a private
duplicate of fd 1: ``os.write`` as far as it goes, and on a full pipe (the client
is not reading) wait until the descriptor is writable and go on with the rest, so
other tasks (``--also-http`` clients) keep being served while a stdio client
stalls. One message is written whole before the next begins. A pipe or socket is
set non-blocking for this; that flag lives on the open file description, which
the client's end does not share (stderr does, if it is the same pipe as stdout),
and its old value is restored on exit. A file or ``/dev/null`` never waits for a
reader, and a terminal is left blocking too: its open file description is the
shell's and stdin's and stderr's as well, and a terminal is read by its emulator.

Like the SDK, fd 0 points at the null device and fd 1 at stderr while serving, so
handlers and child processes (kubectl) never read the wire or write on it (a stray
``print`` lands on stderr); both are restored on exit.

A server is a child of its client, and ends quietly when that client goes: a
closed stdin ends ``server.run``; SIGTERM (a parent stopped by ``timeout``, or
its whole process group signalled) ends the input the same way, so the server
shuts down as after a closed stdin and exits 0; a broken stdout (the client
exited while a response or notification was being written) ends the transport
without a traceback.
"""

from __future__ import annotations

import codecs
import fcntl
import os
import stat
import sys
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from typing import Any, cast

import anyio
from mcp.server.stdio import stdio_server as sdk_stdio_server

from asyncai_watch.signals import on_sigterm

__all__ = ["stdio_server"]

_CHUNK = 1 << 16


def _can_block(fd: int) -> bool:
    return _is_pipe_or_socket(fd) or os.isatty(fd)


def _is_pipe_or_socket(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


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


class _Writer:
    """``await write(text)`` onto a descriptor, on the event loop (no thread).

    On a non-blocking descriptor a full pipe (the client is not reading) parks only the
    writing task, in ``wait_writable``; the rest of the message follows once there is room.
    ``write`` returns when the kernel holds every byte of the message, and one write ends
    before the next begins (a lock, though the SDK writes from one task anyway), so messages
    are never torn or reordered. A write cancelled part-way (the transport is ending) leaves
    the rest of its message unsent.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lock = anyio.Lock(fast_acquire=True)

    async def write(self, text: str) -> None:
        async with self._lock:
            data = memoryview(text.encode("utf-8"))
            while data:
                try:
                    written = os.write(self._fd, data)
                except BlockingIOError:  # the pipe is full: wait for the client to read
                    await anyio.wait_writable(self._fd)
                    continue
                data = data[written:]

    async def flush(self) -> None:
        # Nothing to do: nothing is buffered here, write returned once the kernel had every byte.
        pass


@asynccontextmanager
async def stdio_server() -> AsyncIterator[tuple[Any, Any]]:
    """``mcp.server.stdio.stdio_server()``, but Ctrl-C does not wait for stdin to close.

    stdout is written on the event loop (no worker thread per message), and a client that
    stops reading parks only the task writing to it. SIGTERM ends the input like a closed
    stdin (``server.run`` then returns), and a client that went away mid-write
    (``BrokenPipeError``) ends the transport quietly instead of with a traceback.
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


def _flush_sys_stdout() -> None:
    # Python's sys.stdout writes to fd 1 through its own buffer: empty it before fd 1 is moved
    # (what was printed before serving goes to the wire, in order) and before fd 1 is restored
    # (a handler's stray print, still buffered, goes to stderr rather than onto the wire).
    with suppress(AttributeError, OSError, ValueError):  # no sys.stdout, or a closed one
        sys.stdout.flush()


@contextmanager
def _stdout_wire() -> Iterator[_Writer | None]:
    """The wire on fd 1 as a ``_Writer`` over a private duplicate, fd 1 pointing at stderr meanwhile.

    Passing ``stdout=`` to the SDK skips its own claim of fd 1, so this is that claim. A pipe or
    socket is made non-blocking (the flag is on the open file description that the duplicate
    shares with fd 1, so its old value is put back on exit); a file, ``/dev/null`` or a terminal
    is written blocking (see the module docstring). None when fd 1 is not open: the SDK's own
    writer is left to deal with that.
    """
    _flush_sys_stdout()
    try:
        wire = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)  # above 0-2, not inherited by children
    except OSError:
        yield None
        return
    blocking = os.get_blocking(wire)
    try:
        if _is_pipe_or_socket(wire):
            os.set_blocking(wire, False)
        try:
            os.dup2(2, 1)
        except OSError:  # no stderr: stray output goes nowhere
            _detach_stdout()
        yield _Writer(wire)
    finally:
        _flush_sys_stdout()
        os.set_blocking(wire, blocking)
        os.dup2(wire, 1)
        os.close(wire)


@asynccontextmanager
async def _transport() -> AsyncIterator[tuple[Any, Any]]:
    with _stdout_wire() as writer:
        # The SDK only calls ``await stdout.write(text)`` and ``await stdout.flush()``.
        stdout = cast(anyio.AsyncFile[str] | None, writer)
        async with _with_stdin(stdout) as streams:
            yield streams


@asynccontextmanager
async def _with_stdin(stdout: anyio.AsyncFile[str] | None) -> AsyncIterator[tuple[Any, Any]]:
    if not _can_block(0):
        # A file or /dev/null: EOF comes by itself, and SIGTERM keeps its default action.
        async with sdk_stdio_server(stdout=stdout) as streams:
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
            sdk_stdio_server(stdin=cast(anyio.AsyncFile[str], lines), stdout=stdout) as streams,
        ):
            yield streams
    finally:
        os.dup2(wire, 0)
        os.close(null)
        os.close(wire)
