"""Starting filter workers: forked by a fork server (the default), or one interpreter each.

A worker is reached through a :class:`WorkerProcess`: its channel (a Unix stream socket
whose other end is the worker's fd 0 and 1), and how to kill it and learn how it ended.
The session in :mod:`asyncai_watch.filters.restricted` does not care which kind it has.
"""

from __future__ import annotations

import json
import socket
import subprocess
from contextlib import suppress
from pathlib import Path
from typing import Any, Final, Protocol

import anyio
from anyio.abc import Process, UNIXSocketStream

from asyncai_watch.clock import Clock, SystemClock, move_on_at
from asyncai_watch.errors import FilterEngineError

__all__ = ["FORK_TIMEOUT", "ForkServer", "ServerGone", "WorkerProcess", "boot_command", "spawn_worker"]

STARTUP_TIMEOUT: Final = 30.0
"""Seconds a fork server or worker may take to start (a loaded machine is slow)."""
FORK_TIMEOUT: Final = 2.0
"""Seconds a running fork server may take to answer a fork request (a fork takes milliseconds):
past it the server is taken as stopped or hung, and replaced."""
_CLOSE_TIMEOUT: Final = 5.0

# The package root goes at the *end* of sys.path: an installed asyncai_watch wins, and a
# plain checkout still works under -I (which leaves the current directory out). The two
# packages are bound as bare shells so that importing the worker runs neither __init__:
# those import the whole library (mcp, httpx, pydantic, ...: about 40 MiB a process),
# and a worker needs only the sandbox.
_BOOT: Final = """\
import sys
sys.path.append(sys.argv[1])
try:
    if "asyncai_watch" not in sys.modules:
        import importlib.util, os, types
        spec = importlib.util.find_spec("asyncai_watch")
        for name, sub in (("asyncai_watch", None), ("asyncai_watch.filters", "filters")):
            shell = types.ModuleType(name)
            shell.__path__ = [p if sub is None else os.path.join(p, sub) for p in spec.submodule_search_locations]
            sys.modules[name] = shell
    from asyncai_watch.filters.%s import main
except BaseException as exc:
    import json
    sys.stdout.write(json.dumps(["fatal", "cannot start: %%s: %%s" %% (type(exc).__name__, exc)]) + "\\n")
    sys.stdout.flush()
    raise SystemExit(70)
main(sys.argv[2])
"""
_ROOT: Final = str(Path(__file__).resolve().parents[2])


def boot_command(python: str, module: str, config: dict[str, Any]) -> list[str]:
    """``python -I -c <boot> <root> <config>`` running ``asyncai_watch.filters.<module>.main``."""
    # -I: ignore PYTHON* variables and the user site; no cwd on sys.path.
    return [python, "-I", "-c", _BOOT % module, _ROOT, json.dumps(config)]


class ServerGone(Exception):
    """The fork server died or broke the protocol; ``reason`` says how."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class WorkerProcess(Protocol):
    pid: int
    channel: UNIXSocketStream

    async def kill(self) -> None: ...

    async def wait(self) -> int | None:
        """Wait for the worker's end: its exit code (negative: killed by that signal), or
        None if that cannot be known (its fork server ended first, which kills it)."""
        ...

    async def aclose(self) -> None: ...


_GONE: Final = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError)


async def _start_process(command: list[str], what: str) -> tuple[Process, socket.socket]:
    """Start ``command`` with fd 0 and 1 on one end of a new socket pair; return the other."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        proc = await anyio.open_process(
            command,
            stdin=theirs.fileno(),
            stdout=theirs.fileno(),
            stderr=subprocess.DEVNULL,
            env={},  # nothing inherited; the worker also clears what Python adds
            start_new_session=True,  # no terminal signals; we end it ourselves
        )
    except OSError as exc:
        ours.close()
        raise FilterEngineError(f"cannot start the filter {what} ({command[0]}): {exc}") from None
    finally:
        theirs.close()
    return proc, ours


async def _end_process(proc: Process) -> None:
    with anyio.CancelScope(shield=True):
        with anyio.move_on_after(_CLOSE_TIMEOUT):
            await proc.wait()
        if proc.returncode is None:
            with suppress(ProcessLookupError):
                proc.kill()
        await proc.aclose()


class SpawnedWorker:
    """A worker that is its own ``python -I`` process (``fork_server=False``)."""

    def __init__(self, proc: Process, channel: UNIXSocketStream) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.channel = channel

    async def kill(self) -> None:
        if self.proc.returncode is None:
            with suppress(ProcessLookupError):
                self.proc.kill()

    async def wait(self) -> int | None:
        return await self.proc.wait()

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            await self.channel.aclose()
            await self.kill()
            await _end_process(self.proc)


async def spawn_worker(command: list[str]) -> SpawnedWorker:
    proc, ours = await _start_process(command, "worker")
    return SpawnedWorker(proc, await UNIXSocketStream.from_socket(ours))


class ForkedWorker:
    """A worker forked by the fork server; its end is learnt from the status socket."""

    def __init__(self, pid: int, channel: UNIXSocketStream, status: UNIXSocketStream) -> None:
        self.pid = pid
        self.channel = channel
        self.status = status
        self._ended = False
        self._code: int | None = None

    async def kill(self) -> None:
        if not self._ended:
            with suppress(*_GONE):
                await self.status.send(b"k")

    async def wait(self) -> int | None:
        if not self._ended:
            text = bytearray()
            with suppress(*_GONE):
                while not text.endswith(b"\n"):
                    text += await self.status.receive(64)
            self._ended = True
            try:
                self._code = int(text)
            except ValueError:  # EOF without a code: the fork server ended (and took the worker)
                self._code = None
        return self._code

    async def aclose(self) -> None:
        # Closing the status socket also tells the fork server to kill the worker if it lives.
        with anyio.CancelScope(shield=True):
            await self.channel.aclose()
            await self.status.aclose()


class ForkServer:
    """The engine's fork server process and its control socket (one request at a time)."""

    def __init__(self, proc: Process, ctl: UNIXSocketStream) -> None:
        self.proc = proc
        self.ctl = ctl
        self.broken = False
        """Set once a request failed: the next launch starts a new server."""
        self._lock = anyio.Lock()
        self._buffer = bytearray()
        self._closed = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    @classmethod
    async def start(cls, command: list[str]) -> ForkServer:
        """Start a fork server and wait until it can fork; FilterEngineError if it cannot."""
        proc, ours = await _start_process(command, "worker fork server")
        server = cls(proc, await UNIXSocketStream.from_socket(ours))
        try:
            with anyio.fail_after(STARTUP_TIMEOUT):
                line = await server._line()
        except (TimeoutError, ServerGone) as exc:
            await server.aclose()
            why = "did not start in time" if isinstance(exc, TimeoutError) else exc.reason
            raise FilterEngineError(f"the filter worker fork server {why}") from None
        except BaseException:
            await server.aclose()
            raise
        if line != b"ready":
            await server.aclose()
            raise FilterEngineError(f"the filter worker fork server could not start: {_fatal_text(line)}")
        return server

    async def _line(self) -> bytes:
        while b"\n" not in self._buffer:
            try:
                chunk = await self.ctl.receive(4096)
            except _GONE:
                code = self.proc.returncode
                raise ServerGone("ended" if code is None else f"ended with code {code}") from None
            self._buffer += chunk
            if len(self._buffer) > 65536:
                raise ServerGone("sent an over-long line")
        line, _, rest = self._buffer.partition(b"\n")
        self._buffer = bytearray(rest)
        return bytes(line)

    async def fork(self, *, bound: float = FORK_TIMEOUT, clock: Clock | None = None) -> ForkedWorker:
        """A new worker. ServerGone if this server is dead, broken, or does not answer within
        ``bound`` seconds on ``clock`` (waiting behind other requests included): start another."""
        if self.broken:
            raise ServerGone("is broken")
        clock = clock if clock is not None else SystemClock()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        status_ours, status_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        worker: ForkedWorker | None = None
        try:
            # Shielded: a request abandoned halfway would leave its reply for the next one
            # (after a timeout the server is broken and never asked again).
            with anyio.CancelScope(shield=True):
                async with move_on_at(clock, clock.now() + bound) as waited:
                    async with self._lock:
                        if self.broken:  # the request before this one found it dead or hung
                            raise ServerGone("is broken")
                        try:
                            await self.ctl.send_fds(b"fork\n", [theirs.fileno(), status_theirs.fileno()])
                            line = await self._line()
                        finally:
                            theirs.close()
                            status_theirs.close()
                    if line.startswith(b"pid ") and line[4:].isdigit():
                        channel = await UNIXSocketStream.from_socket(ours)
                        status = await UNIXSocketStream.from_socket(status_ours)
                        worker = ForkedWorker(int(line[4:]), channel, status)
                        return worker
            if waited.cancelled_caught:
                raise ServerGone(f"did not answer a fork request within {bound:g} s")
        except ServerGone:
            self.broken = True
            raise
        except _GONE as exc:
            self.broken = True
            raise ServerGone(f"cannot be reached ({type(exc).__name__})") from None
        finally:
            if worker is None:
                ours.close()
                status_ours.close()
        if line.startswith(b"err "):  # e.g. EAGAIN: the server is fine, this fork failed
            raise FilterEngineError(f"the filter worker fork server could not fork: {_fatal_text(line[4:])}")
        self.broken = True
        raise ServerGone(f"answered {line[:100]!r} to a fork request")

    async def aclose(self) -> None:
        """Close the control socket (the server then kills its workers and exits)."""
        self.broken = True
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            await self.ctl.aclose()
            await _end_process(self.proc)

    async def kill(self) -> None:
        """End a server that failed a request at once: a stopped or hung one would not exit on
        its own. Its workers die with it (``PR_SET_PDEATHSIG``). Safe to call more than once."""
        self.broken = True
        if self.proc.returncode is None:
            with suppress(ProcessLookupError):
                self.proc.kill()
        await self.aclose()


def _fatal_text(line: bytes) -> str:
    """The message of a ``["fatal", message]`` line, else the line itself (both capped)."""
    try:
        message = json.loads(line)
    except ValueError:
        message = None
    if isinstance(message, list) and len(message) == 2 and message[0] == "fatal":
        return str(message[1])[:300]
    return line.decode("utf-8", "replace")[:300] or "it ended without a word"
