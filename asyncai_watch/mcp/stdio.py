"""Our stdio client transport: an MCP server run as a subprocess, spoken to over its stdin/stdout.

:class:`StdioTransport` implements the SDK's public ``mcp.client.Transport`` protocol (an async
context manager yielding the read and write streams), so ``mcp.Client`` takes it as it takes
its own. :class:`~asyncai_watch.mcp.client.McpResourceSource` connects through it; nothing of
the SDK is patched, and another user of the SDK in the same process keeps the SDK's reader.

What differs from the SDK's ``stdio_client`` (mcp 2.3) is how stdout is read: lines are split
as bytes and a large one is decoded in steps with the event loop running between them
(:mod:`asyncai_watch.jsonrpc_framing`), where the SDK's reader is quadratic in a line's length.
Process handling follows the SDK's, with no polling:

- the server runs in a new session (its own process group), with the SDK's safe default
  environment (``PATH``, ``HOME``, ...) and ``env`` merged over it, in ``cwd``, its stderr
  forwarded line by line to ``errlog`` (default: ours), less the pydantic dump a Python SDK 1.x
  server logs about our ``server/discover`` probe (:mod:`asyncai_watch.mcp.probe_noise`);
- shutdown, shielded from cancellation and bounded at every step: stop reading (the rest of
  stdout is drained, so a server blocked writing can exit), give the writer 0.5 s to flush,
  close stdin and give the server 2 s to exit, then SIGTERM its process group and give every
  member 2 s, then SIGKILL the group. The SDK probes for the exit every 10 ms; here the wait is
  on the process's pidfd (Linux), which becomes readable when it exits.

Each connection needs a new transport (``McpResourceSource`` makes one per connect, so a
reconnect respawns the server).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from pathlib import Path
from types import TracebackType
from typing import Final, TextIO

import anyio
import anyio.abc
import anyio.lowlevel
import mcp_types as types
from anyio.streams.buffered import BufferedByteReceiveStream
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage

from asyncai_watch.jsonrpc_framing import LineReader, MessageError, Overlong, encode_message, next_message
from asyncai_watch.mcp.body_cap import MESSAGE_TOO_LARGE, too_large
from asyncai_watch.mcp.probe_noise import ProbeNoise

__all__ = ["EXIT_GRACE", "StdioTransport"]

_log = logging.getLogger(__name__)

EXIT_GRACE: Final = 2.0
"""Seconds a server gets to exit once its stdin is closed, and again after SIGTERM."""
_FLUSH_GRACE: Final = 0.5  # for the writer to send messages already accepted
_REAP_GRACE: Final = 2.0  # for a SIGKILLed process to be seen gone
_STDERR_LINE: Final = 65536  # bytes of a stderr line held at most; a longer one is passed on in pieces


class StdioTransport:
    """``command`` with ``args`` as an MCP server over stdio (``mcp.client.Transport``).

    ``env`` is merged over the SDK's default environment; ``errlog`` gets the server's stderr
    (default: ``sys.stderr`` when the server starts). A line longer than ``max_line`` bytes is
    dropped as it arrives (memory stays bounded by the cap): the request it answered gets an
    error naming the cap (:data:`~asyncai_watch.mcp.body_cap.MESSAGE_TOO_LARGE`), or, when its id
    cannot be seen in its first 64 KiB or last 256 bytes, the connection ends (:attr:`refused`
    says why) and the next one respawns the server. ``on_exit`` is called when the server's
    stdout ends while the connection is in use (the server exited): a session with no request
    in flight would not learn it otherwise, and its 2025-era subscriptions would stay silent.
    Enter it once.
    """

    def __init__(
        self,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        errlog: TextIO | None = None,
        max_line: int | None = None,
        on_exit: Callable[[], None] | None = None,
    ) -> None:
        self.command = command
        self.max_line = max_line
        self.args = list(args)
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.errlog = errlog
        self.refused: str | None = None
        """Why the connection ended early, when a line over ``max_line`` without an id ended it."""
        self.on_exit = on_exit
        self._session: AbstractAsyncContextManager[_Streams] | None = None

    async def __aenter__(self) -> _Streams:
        if self._session is not None:
            raise RuntimeError("a StdioTransport is entered once; make a new one for each connection")
        self._session = self._run()
        return await self._session.__aenter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        assert self._session is not None, "StdioTransport exited without being entered"
        return await self._session.__aexit__(exc_type, exc, tb)

    def __repr__(self) -> str:
        return f"<StdioTransport {[self.command, *self.args]!r}>"

    @asynccontextmanager
    async def _run(self) -> AsyncIterator[_Streams]:
        target = _stderr_for(self.errlog)
        process = await anyio.open_process(
            [self.command, *self.args],
            env=get_default_environment() | (self.env or {}),
            stderr=subprocess.PIPE,  # forwarded to `target`, less the probe's noise (probe_noise.py)
            cwd=self.cwd,
            start_new_session=True,  # its own process group: the whole tree can be ended
        )
        # Spawned: no await until the task group is entered, or a cancellation landing in
        # between would leak the live process.
        exit_fd = _pidfd(process.pid)
        read_send, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
        write_stream, write_receive = anyio.create_memory_object_stream[SessionMessage](0)
        connection = _PipeBridge(
            process, exit_fd, read_send, write_receive, self.max_line, self, self.on_exit
        )
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(connection.read)
                tg.start_soon(connection.write)
                tg.start_soon(connection.forward_stderr, target.fileno() if target is not None else 2)
                try:
                    yield read_stream, write_stream
                finally:
                    connection.shutting_down = True
                    # Shutdown completes even when the caller is cancelled (every wait in it is
                    # bounded), or the server process would outlive the connection.
                    with anyio.CancelScope(shield=True):
                        read_stream.close()  # the reader drains stdout from here on
                        write_stream.close()
                        with anyio.move_on_after(_FLUSH_GRACE):
                            await connection.writer_done.wait()
                        await connection.stop()
                        with anyio.move_on_after(_FLUSH_GRACE):  # its last words, e.g. why it exited
                            await connection.stderr_done.wait()
                        await anyio.lowlevel.checkpoint()  # the unblocked tasks leave on their own
                    tg.cancel_scope.cancel()  # a kill survivor holding a pipe open cannot stall them
        finally:
            if exit_fd is not None:
                os.close(exit_fd)


_Streams = tuple[
    MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]
]


class _PipeBridge:
    """One server process and the two tasks that bridge its pipes to the session's streams."""

    def __init__(
        self,
        process: anyio.abc.Process,
        exit_fd: int | None,
        read_send: MemoryObjectSendStream[SessionMessage | Exception],
        write_receive: MemoryObjectReceiveStream[SessionMessage],
        max_line: int | None = None,
        owner: StdioTransport | None = None,
        on_exit: Callable[[], None] | None = None,
    ) -> None:
        assert process.stdin is not None, "spawned with pipes"
        assert process.stdout is not None, "spawned with pipes"
        self.process = process
        self.stdin = process.stdin
        self.stdout = process.stdout
        self.exit_fd = exit_fd
        self.read_send = read_send
        self.write_receive = write_receive
        self.writer_done = anyio.Event()
        self.stderr_done = anyio.Event()
        self.shutting_down = False
        self.max_line = max_line
        self.owner = owner
        self.on_exit = on_exit

    async def read(self) -> None:
        """Server stdout -> session, one message per line, in order; the rest drained at the end."""
        lines = LineReader(self.stdout, max_line=self.max_line)
        try:
            async with self.read_send:
                try:
                    while (item := await next_message(lines)) is not None:
                        if isinstance(item, Overlong):
                            answer = self._too_large(item)
                            if answer is None:
                                # Its request cannot be told: end the session now (the drain
                                # below runs until shutdown), and the next call respawns.
                                await self.read_send.aclose()
                                return
                            item = answer
                        if isinstance(item, MessageError):
                            _log.warning("MCP server sent a line that is not a JSON-RPC message: %s", item)
                        try:
                            await self.read_send.send(item)
                        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                            return  # the session is gone; only the drain below remains
                    if not self.shutting_down and self.on_exit is not None:
                        self.on_exit()  # stdout ended under a live session: the server is gone
                finally:
                    await self._drain()
        except anyio.ClosedResourceError:
            pass  # our own shutdown closed stdout under the read
        except (anyio.BrokenResourceError, ConnectionError):
            if not self.shutting_down:
                _log.exception("reading the MCP server's stdout failed mid-session")

    def _too_large(self, line: Overlong) -> SessionMessage | None:
        """The error answer to the request whose answer ``line`` was (it was dropped unread), or
        ``None`` when the kept bytes do not show its id (the connection then ends)."""
        assert self.max_line is not None, "only a capped reader makes an Overlong"
        message = too_large(line.size, self.max_line)
        request_id = line.request_id()
        _log.warning(
            "MCP server sent a line of %d bytes, over the %d-byte cap (max_message_bytes)%s",
            line.size,
            self.max_line,
            "" if request_id is not None else "; no request id in it, so the connection ends",
        )
        if request_id is None:
            if self.owner is not None:
                self.owner.refused = f"the server sent a message without a readable id: {message}"
            return None
        error = types.ErrorData(code=MESSAGE_TOO_LARGE, message=message)
        return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))

    async def forward_stderr(self, fd: int) -> None:
        """Server stderr -> ``fd``, line by line, less the complaint about our probe."""
        assert self.process.stderr is not None, "spawned with a stderr pipe"
        stream = BufferedByteReceiveStream(self.process.stderr)
        noise = ProbeNoise()
        try:
            while True:
                try:
                    line = await stream.receive_until(b"\n", _STDERR_LINE) + b"\n"
                except anyio.DelimiterNotFound:
                    _write_all(fd, await stream.receive_exactly(_STDERR_LINE))  # a long line, as it is
                    continue
                except (anyio.IncompleteRead, anyio.EndOfStream):
                    for rest in [*noise.end(), bytes(stream.buffer)]:
                        _write_all(fd, rest)
                    return
                for out in noise.feed(line):
                    _write_all(fd, out)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            pass  # our own shutdown closed the pipe
        finally:
            if noise.dropped:
                _log.debug(
                    "dropped the %d-line complaint the server logged about server/discover", noise.dropped
                )
            self.stderr_done.set()

    async def _drain(self) -> None:
        """Read and drop stdout until it ends or shutdown closes it: a server blocked writing a
        full pipe could not read its closed stdin, nor exit."""
        with (
            anyio.CancelScope(shield=True),
            suppress(
                anyio.EndOfStream,
                anyio.ClosedResourceError,
                anyio.BrokenResourceError,
                ConnectionError,
                OSError,
            ),
        ):
            while True:
                await self.stdout.receive()

    async def write(self) -> None:
        """Session -> server stdin, one line per message."""
        try:
            async with self.write_receive:
                async for message in self.write_receive:
                    await self.stdin.send(encode_message(message))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            # The server stopped reading, maybe still alive: end the session's reads too, so no
            # request waits forever for an answer.
            await self.read_send.aclose()
        finally:
            self.writer_done.set()

    async def stop(self) -> None:
        """Close stdin, let the server exit, else end its process group; then release the pipes."""
        await _close(self.stdin)
        if not await self._exited(EXIT_GRACE):
            await self._end_group()
            if not await self._exited(_REAP_GRACE):
                _log.warning(
                    "MCP server process %d is still alive after SIGKILL; leaving it", self.process.pid
                )
        await _close(self.stdout)  # a kill survivor may hold the pipe open: end the reader anyway
        transport = _SubprocessTransport(self.process)
        transport.close_pipes()  # so that the wait below never waits on a pipe a kill survivor holds
        # The exit was seen on the pidfd; the runtime learns of it from its child watcher a moment
        # later. Closing the transport before that would reap the process under the watcher
        # (which then warns of an "unknown child process" once the loop is gone).
        with anyio.move_on_after(_REAP_GRACE):
            await self.process.wait()
        transport.close()

    async def _exited(self, grace: float) -> bool:
        """Whether the server process exits within ``grace`` seconds (a wait, not a probe)."""
        with anyio.move_on_after(grace):
            if self.exit_fd is not None:
                await anyio.wait_readable(self.exit_fd)
            else:  # no pidfd: the runtime's wait (on asyncio it waits for the pipes to close too)
                await self.process.wait()
            return True
        return self.process.returncode is not None

    async def _end_group(self) -> None:
        """SIGTERM the server's process group, give every member :data:`EXIT_GRACE`, SIGKILL the rest."""
        group = self.process.pid  # the leader of its own session: its pid is the group id
        try:
            os.killpg(group, signal.SIGTERM)
        except ProcessLookupError:
            return
        except PermissionError:  # not proof the group is gone: go on and wait
            _log.warning("no permission to signal all of process group %d", group, exc_info=True)
        members = _group_pidfds(group, leader=self.process.pid)
        try:
            with anyio.move_on_after(EXIT_GRACE):
                if self.exit_fd is not None:
                    await anyio.wait_readable(self.exit_fd)
                for fd in members:
                    await anyio.wait_readable(fd)
        finally:
            for fd in members:
                os.close(fd)
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(group, 0)  # anyone left (a member that started late, or ignores SIGTERM)?
            os.killpg(group, signal.SIGKILL)


def _write_all(fd: int, data: bytes) -> None:
    with suppress(OSError):  # a closed or full stderr must not end the connection
        while data:
            data = data[os.write(fd, data) :]


def _stderr_for(errlog: TextIO | None) -> TextIO | None:
    """Where the server's stderr goes: ``errlog``, else ours (``sys.stderr`` now, or fd 2 when
    ``sys.stderr`` has no descriptor, e.g. replaced by a test's capture)."""
    target = errlog if errlog is not None else sys.stderr
    try:
        target.fileno()
    except (AttributeError, OSError, ValueError) as exc:
        if errlog is not None:
            raise ValueError(
                f"errlog must be a file with a descriptor (an open file, sys.stderr), got {errlog!r}"
            ) from exc
        return None  # inherit our fd 2
    return target


def _pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when process ``pid`` exits (Linux 5.3+), else None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _group_pidfds(group: int, *, leader: int) -> list[int]:
    """pidfds of the members of process group ``group`` other than ``leader``, from ``/proc``."""
    found: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for name in entries:
        if not name.isdigit() or int(name) == leader:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                fields = stat.read().rpartition(b")")[2].split()
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if len(fields) > 2 and fields[2] == str(group).encode():  # state, ppid, pgrp, ...
            fd = _pidfd(int(name))
            if fd is not None:
                found.append(fd)
    return found


async def _close(stream: anyio.abc.AsyncResource) -> None:
    with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await stream.aclose()


class _SubprocessTransport:
    """asyncio's transport under an anyio process, closed here as the SDK closes it: while a
    surviving descendant holds a pipe end it would stay open (and warn when collected). Nothing
    public exposes it, hence the attribute walk; duck-typed (uvloop's is no
    ``asyncio.SubprocessTransport``); nothing to do on another backend."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self._transport = getattr(getattr(process, "_process", None), "_transport", None)

    def close_pipes(self) -> None:
        pipe_transport = getattr(self._transport, "get_pipe_transport", None)
        if callable(pipe_transport):
            for fd in (0, 1):
                pipe = pipe_transport(fd)
                if pipe is not None:
                    pipe.close()

    def close(self) -> None:
        close = getattr(self._transport, "close", None)
        if callable(close):
            with suppress(PermissionError):  # re-killing a setuid child on Python <= 3.12
                close()
