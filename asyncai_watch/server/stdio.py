"""Serve MCP over stdio, on the event loop: requests read linearly, Ctrl-C ends it at once, no thread.

:func:`stdio_server` is a drop-in for the SDK's ``mcp.server.stdio.stdio_server()``: ``async with
stdio_server() as (read, write): await server.run(read, write, options)``. What differs:

**Reading.** stdin is read on the event loop: wait until the descriptor is readable, then one
``os.read`` (which cannot block then). The SDK reads it in a worker thread, and a thread cannot
be cancelled, so Ctrl-C on a server whose client still held the pipe waited until stdin closed.
Lines are split as bytes and a large one is decoded in steps with the loop running between them
(:mod:`asyncai_watch.jsonrpc_framing`, the reader our client uses too): a 50 MB request is read in
about the time its parse takes, and the server goes on answering meanwhile (the SDK's reader
copies the partial line again for every 64 KiB read; a 50 MB request took 78 s). A stdin that
cannot block (a file, ``/dev/null``) is read the same way; it reaches its end by itself.

**Bad lines.** A line that is not a JSON-RPC message is answered here, with the JSON-RPC error
(-32700 parse error for text that is not JSON or is nested too deep to parse, -32600 for JSON
that is not a message) and the request's id when the line shows one. The SDK hands such a
line to the session as an exception, which drops it: the client waited forever for that id.

**Writing.** stdout is written on the event loop too, onto a private duplicate of fd 1:
``os.write`` as far as it goes, and on a full pipe (the client is not reading) wait until the
descriptor is writable and go on with the rest, so other tasks (``--also-http`` clients) keep
being served while a stdio client stalls. One message is written whole before the next begins.
A pipe or socket is set non-blocking for this; that flag lives on the open file description,
which the client's end does not share (stderr does, if it is the same pipe as stdout), and its
old value is restored on exit. A file or ``/dev/null`` never waits for a reader, and a terminal
is left blocking too: its open file description is the shell's and stdin's and stderr's as
well, and a terminal is read by its emulator.

Like the SDK, fd 0 points at the null device and fd 1 at stderr while serving, so handlers and
child processes (kubectl) never read the wire or write on it (a stray ``print`` lands on
stderr); both are restored on exit.

A server is a child of its client, and ends quietly when that client goes: a closed stdin ends
``server.run``; SIGTERM (a parent stopped by ``timeout``, or its whole process group signalled)
ends the input the same way, so the server shuts down as after a closed stdin and exits 0; a
broken stdout (the client exited while a response or notification was being written) ends the
transport without a traceback.
"""

from __future__ import annotations

import fcntl
import logging
import os
import stat
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, nullcontext, suppress
from typing import Final

import anyio
import anyio.lowlevel
from anyio.abc import ByteReceiveStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from asyncai_watch.jsonrpc_framing import (
    LineReader,
    MessageError,
    Overlong,
    encode_message,
    error_line,
    next_message,
)
from asyncai_watch.signals import on_sigterm

__all__ = ["stdio_server"]

_CHUNK: Final = 1 << 16
_log = logging.getLogger(__name__)

Streams = tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]
"""What :func:`stdio_server` yields: the session's read and write streams (``server.run``'s)."""


def _can_block(fd: int) -> bool:
    return _is_pipe_or_socket(fd) or os.isatty(fd)


def _is_pipe_or_socket(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


class _Input(ByteReceiveStream):
    """The bytes of a descriptor, read on the event loop (no thread); :meth:`end` ends them early."""

    def __init__(self, fd: int | None) -> None:
        self._fd = fd
        self.waits = fd is not None and _can_block(fd)  # a file or /dev/null never has to wait
        self._ended = fd is None
        self._waiting = anyio.CancelScope()

    def end(self) -> None:
        """End the input now, as if stdin had closed (lines already read are still served)."""
        self._ended = True
        self._waiting.cancel()

    async def receive(self, max_bytes: int = _CHUNK) -> bytes:
        if not self._ended and self._fd is not None:
            if self.waits:
                with self._waiting:  # end() cancels only this wait
                    await anyio.wait_readable(self._fd)
                self._waiting = anyio.CancelScope()
            else:
                await anyio.lowlevel.checkpoint()
            if not self._ended:
                try:
                    data = os.read(self._fd, max_bytes)  # readable: returns at once (data or EOF)
                except OSError:  # e.g. a stdin that is no file at all: nothing to read
                    data = b""
                if data:
                    return data
                self._ended = True
        raise anyio.EndOfStream

    async def aclose(self) -> None:
        self.end()


class _Writer:
    """``await write(data)`` onto a descriptor, on the event loop (no thread).

    On a non-blocking descriptor a full pipe (the client is not reading) parks only the
    writing task, in ``wait_writable``; the rest of the message follows once there is room.
    ``write`` returns when the kernel holds every byte of the message, and one write ends
    before the next begins (a lock: the session's messages and the transport's own error
    replies come from two tasks), so messages are never torn or reordered. A write cancelled
    part-way (the transport is ending) leaves the rest of its message unsent.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._lock = anyio.Lock(fast_acquire=True)

    async def write(self, data: bytes) -> None:
        async with self._lock:
            view = memoryview(data)
            while view:
                try:
                    written = os.write(self._fd, view)
                except BlockingIOError:  # the pipe is full: wait for the client to read
                    await anyio.wait_writable(self._fd)
                    continue
                view = view[written:]


@asynccontextmanager
async def stdio_server() -> AsyncIterator[Streams]:
    """Serve one MCP session over stdin and stdout (see the module): yields ``(read, write)``.

    SIGTERM ends the input like a closed stdin (``server.run`` then returns), and a client that
    went away mid-write (``BrokenPipeError``) ends the transport quietly instead of with a
    traceback.
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
def _stdout_wire() -> Iterator[_Writer]:
    """The wire on fd 1 as a ``_Writer`` over a private duplicate, fd 1 pointing at stderr meanwhile.

    A pipe or socket is made non-blocking (the flag is on the open file description that the
    duplicate shares with fd 1, so its old value is put back on exit); a file, ``/dev/null`` or
    a terminal is written blocking (see the module docstring).
    """
    _flush_sys_stdout()
    try:
        wire = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)  # above 0-2, not inherited by children
    except OSError as exc:
        raise RuntimeError(
            f"stdio_server: stdout (fd 1) is not open, so no client could be answered: {exc}"
        ) from exc
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


@contextmanager
def _stdin_wire() -> Iterator[int | None]:
    """The wire on fd 0 as a private duplicate, fd 0 pointing at the null device meanwhile;
    None when fd 0 is not open (the input is then empty)."""
    try:
        wire = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    except OSError:
        yield None
        return
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        yield wire
    finally:
        os.dup2(wire, 0)
        os.close(null)
        os.close(wire)


@asynccontextmanager
async def _transport() -> AsyncIterator[Streams]:
    with _stdout_wire() as writer, _stdin_wire() as wire:
        stdin = _Input(wire)
        read_send, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_stream, write_receive = anyio.create_memory_object_stream[SessionMessage](0)
        # A file or /dev/null ends by itself, and SIGTERM keeps its default action there.
        async with on_sigterm(stdin.end) if stdin.waits else nullcontext(), anyio.create_task_group() as tg:
            tg.start_soon(_read, LineReader(stdin), read_send, writer)
            tg.start_soon(_write, write_receive, writer)
            yield read_stream, write_stream


async def _read(
    lines: LineReader, read_send: MemoryObjectSendStream[SessionMessage | Exception], writer: _Writer
) -> None:
    """stdin -> the session, one message per line in order; a bad line is answered here."""
    async with read_send:
        while (message := await next_message(lines)) is not None:
            assert not isinstance(message, Overlong), "this reader has no max_line"
            if isinstance(message, MessageError):
                _log.debug("answered a line that is no JSON-RPC message with %d: %s", message.code, message)
                await writer.write(error_line(message))
                continue
            try:
                await read_send.send(message)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return  # the session is gone


async def _write(write_receive: MemoryObjectReceiveStream[SessionMessage], writer: _Writer) -> None:
    """The session -> stdout, one line per message."""
    async with write_receive:
        async for message in write_receive:
            await writer.write(encode_message(message))
