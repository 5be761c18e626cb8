"""The RestrictedPython filter engine: each session is one reused, locked-down worker process.

The parent (this module) never runs filter code. Workers are forked by one fork server per
engine (``fork_server=True``, the default: the sandbox is loaded once and its pages are
shared), or each started as its own interpreter. The parent sends a batch of events over
the worker's channel and reads one outcome line per event, serving the worker's catalog
calls in between (the read-only rule, the per-event call limit and the per-event deadline
are enforced here, not in the worker). A worker that crashes or overruns is killed and
restarted; its scope is lost, and the outcome says so.
"""

from __future__ import annotations

import logging
import signal
import socket
import sys
from collections import deque
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Final

import anyio
import attrs

from asyncai_watch.clock import Clock, SystemClock
from asyncai_watch.core.echo import clip, quoted
from asyncai_watch.core.limits import Limits
from asyncai_watch.errors import FilterEngineError, FilterError
from asyncai_watch.filters import _wire
from asyncai_watch.filters._check import FILENAME, check_source
from asyncai_watch.filters._launch import (
    FORK_TIMEOUT,
    STARTUP_TIMEOUT,
    ForkServer,
    ServerGone,
    WorkerProcess,
    boot_command,
    spawn_worker,
)
from asyncai_watch.filters.engine import Catalog, FilterOutcome, FilterSession, check_dry_run, open_session

__all__ = ["FILENAME", "RestrictedFilterSession", "RestrictedPythonEngine", "check_source"]

MAX_DEATHS_PER_BATCH: Final = 3
_UNSENDABLE_EVENT: Final = (
    "the event is nested too deeply to hand to the filter (its JSON recursion would overflow); it was not run"
)
_CHUNK: Final = 256 * 1024
_log = logging.getLogger(__name__)


@attrs.define(kw_only=True)
class RestrictedPythonEngine:
    """Runs ``on_event`` under RestrictedPython in one worker process per session.

    ``fork_server`` (default) forks the workers from one fork server process per engine,
    started with the first session and ended with the last, so the sandbox is loaded once
    and shared; ``False`` starts a separate interpreter per session (more memory, no
    shared process). ``memory_limit`` caps each worker's address space; ``cpu_budget`` is
    a worker's total CPU seconds before it is killed and restarted; ``watchdog`` is the
    grace after an event's ``Limits.filter_timeout`` before a worker that has not answered
    is killed (default ``max(2, filter_timeout)``); ``catalog_timeout`` bounds one catalog
    call (within the event's own deadline). ``fork_timeout`` bounds a fork request to a running
    fork server, on ``clock``: a server that does not answer in time (stopped, hung) is killed
    and replaced, and the sessions whose workers it took start new ones at their next event.
    """

    limits: Limits = attrs.field(factory=Limits)
    memory_limit: int = 256 * 2**20
    cpu_budget: float = 3600.0
    max_line_chars: int = 65_536
    catalog_timeout: float = 30.0
    watchdog: float | None = None
    drop_privileges: bool = True
    python: str = sys.executable
    fork_server: bool = True
    fork_timeout: float = FORK_TIMEOUT
    clock: Clock = attrs.field(factory=SystemClock)
    seccomp: str | None = attrs.field(default=None, init=False)
    """The latest worker's seccomp state as it reported it: ``"on"`` or ``"off: <why>"``
    (None before the first worker started)."""
    _seccomp_warned: bool = attrs.field(default=False, init=False, repr=False)
    _server: ForkServer | None = attrs.field(default=None, init=False, repr=False)
    _server_lock: anyio.Lock | None = attrs.field(default=None, init=False, repr=False)
    _sessions: int = attrs.field(default=0, init=False, repr=False)
    """Open sessions; the fork server lives while there is one."""

    def _note_seccomp(self, state: str) -> None:
        # Running without seccomp is allowed (not every host has libseccomp.so.2), but
        # never silent: one warning per engine, and the probe says it too.
        self.seccomp = state
        if state != "on" and not self._seccomp_warned:
            self._seccomp_warned = True
            _log.warning("filter workers run without their seccomp filter (%s); see docs/filters.md", state)

    @property
    def name(self) -> str:
        return "restricted-python"

    @property
    def fork_server_pid(self) -> int | None:
        """The running fork server's pid (None when there is none, or with ``fork_server=False``)."""
        server = self._server
        return server.pid if server is not None and not server.broken else None

    def validate(self, source: str) -> None:
        check_source(source)

    def command(self) -> list[str]:
        """The process the engine starts: the fork server, or (``fork_server=False``) a worker."""
        config = {
            "memory": self.memory_limit,
            "cpu_budget": self.cpu_budget,
            "max_line": self.max_line_chars,
            "drop_privileges": self.drop_privileges,
        }
        return boot_command(self.python, "_forkserver" if self.fork_server else "_worker", config)

    def open_session(
        self, source: str, catalog: Catalog, limits: Limits | None = None
    ) -> AbstractAsyncContextManager[FilterSession]:
        """``async with engine.open_session(source, catalog) as session:``"""
        return open_session(self, source, catalog=catalog, limits=limits)

    async def open(
        self, source: str, *, catalog: Catalog, limits: Limits | None = None
    ) -> RestrictedFilterSession:
        session = RestrictedFilterSession(self, source, catalog, limits or self.limits)
        try:
            await session.start()
        except BaseException:
            await session.aclose()
            raise
        return session

    # -- workers ----------------------------------------------------------------------------
    def _lock(self) -> anyio.Lock:
        if self._server_lock is None:
            self._server_lock = anyio.Lock()
        return self._server_lock

    async def _launch(self) -> WorkerProcess:
        """A new worker for a session. FilterEngineError if none can be started."""
        if not self.fork_server:
            return await spawn_worker(self.command())
        # A dead, stopped or hung server is noticed by its first failed request (bounded by
        # fork_timeout), killed, and replaced once. The engine lock covers only finding or
        # starting the server, never a fork request: sessions waiting on a stopped server all
        # learn it within the bound, instead of one after another.
        for attempt in (1, 2):
            server = await self._running_server()
            try:
                return await server.fork(bound=self.fork_timeout, clock=self.clock)
            except ServerGone as gone:
                if self._server is server:
                    self._server = None
                await server.kill()  # its workers die with it; their sessions start new ones
                if attempt == 2:
                    raise FilterEngineError(f"the filter worker fork server {gone.reason}") from None
        raise AssertionError("unreachable")

    async def _running_server(self) -> ForkServer:
        async with self._lock():
            server = self._server
            if server is None or server.broken:
                if server is not None:
                    self._server = None
                    await server.kill()
                server = self._server = await ForkServer.start(self.command())
            return server

    def _retain(self) -> None:
        self._sessions += 1

    async def _release(self) -> None:
        self._sessions -= 1
        if self._sessions > 0 or self._server is None:
            return
        with anyio.CancelScope(shield=True):
            async with self._lock():
                server = self._server
                if self._sessions == 0 and server is not None:
                    self._server = None
                    await server.aclose()


class _WorkerGone(Exception):
    """The worker died or stopped answering; ``reason`` says how."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _NotStarted(Exception):
    """The worker died before it started the batch: none of it ran."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Died(Exception):
    def __init__(self, done: list[FilterOutcome], reason: str) -> None:
        super().__init__(reason)
        self.done = done
        self.reason = reason


def _is_call(message: list[Any]) -> bool:
    return (
        len(message) == 4
        and isinstance(message[1], int)
        and isinstance(message[2], str)
        and isinstance(message[3], dict)
    )


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _pending(worker: WorkerProcess) -> bool:
    """Whether the worker has sent bytes not read yet (or closed its end)."""
    sock = worker.channel.extra(anyio.abc.SocketAttribute.raw_socket)
    try:
        sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return False
    except OSError:
        return True  # the next receive reports it
    return True


class RestrictedFilterSession:
    """One watch's filter: a worker process and the persistent scope inside it."""

    def __init__(self, engine: RestrictedPythonEngine, source: str, catalog: Catalog, limits: Limits) -> None:
        self.engine = engine
        self.source = source
        self.catalog = catalog
        self.limits = limits
        self.restarts = 0
        """How many times the worker was replaced (each time the scope started empty)."""
        self._names = sorted(catalog.names)
        self._lock = anyio.Lock()
        self._worker: WorkerProcess | None = None
        self._partial = bytearray()
        self._lines: deque[bytes | bytearray] = deque()
        self._fatal: str | None = None
        self._closed = False
        self._retained = False
        self._grace = engine.watchdog if engine.watchdog is not None else max(2.0, limits.filter_timeout)

    @property
    def pid(self) -> int | None:
        """The current worker's pid (None between a crash and the restart)."""
        return self._worker.pid if self._worker is not None else None

    async def __aenter__(self) -> RestrictedFilterSession:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    # -- process --------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the worker and compile the source in it. FilterError if either fails."""
        if not self._retained:  # the engine's fork server lives while a session is open
            self._retained = True
            self.engine._retain()
        try:
            with anyio.fail_after(2 * STARTUP_TIMEOUT + 5):
                await self._spawn()
        except TimeoutError:
            await self._discard()
            raise FilterEngineError("the filter worker did not start in time") from None

    async def _spawn(self) -> None:
        self._worker = await self.engine._launch()
        self._partial.clear()
        self._lines.clear()
        self._fatal = None
        try:
            # Starting a worker and compiling is not the filter's fault: init gets the startup bound.
            reply = await self._request(["init", self.source, FILENAME, self._names])
        except _WorkerGone as gone:
            await self._discard()
            raise FilterEngineError(f"the filter worker {gone.reason}") from None
        if reply[0] == "err":
            await self._discard()
            raise FilterError(f"on_event does not compile: {reply[1]}")
        if reply[0] != "ok":
            await self._discard()
            raise FilterEngineError(f"the filter worker answered {str(reply)[:200]} to init")
        details = reply[1] if len(reply) > 1 and isinstance(reply[1], dict) else {}
        state = details.get("seccomp")
        self.engine._note_seccomp(
            state[:300] if isinstance(state, str) else "off: the worker did not report its seccomp state"
        )

    async def _request(self, message: list[Any]) -> Any:
        await self._send(message)
        deadline = anyio.current_time() + STARTUP_TIMEOUT
        return await self._recv(deadline, f"did not answer for {STARTUP_TIMEOUT:g} s and was killed")

    async def _send(self, message: list[Any] | bytes) -> None:
        assert self._worker is not None
        line = message if isinstance(message, bytes) else _wire.encode(message)
        try:
            await self._worker.channel.send(line)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            raise _WorkerGone(await self._exit_reason()) from None

    async def _recv(self, deadline: float, overdue: str) -> Any:
        """The worker's next message. Lines already received are returned without waiting,
        so a batch's outcomes (usually one chunk) cost one wakeup, not one per line. A
        worker that sends nothing by ``deadline`` is killed (``overdue`` says why)."""
        if not self._lines:
            await self._fill(deadline, overdue)
        raw = self._lines.popleft()
        try:
            message = _wire.decode(raw)
        except _wire.DECODE_ERRORS:  # not JSON, or nested too deeply to read: never raised on
            message = None
        # The worker is not trusted (a sandbox escape would run there): check every shape.
        if not (isinstance(message, list) and message and isinstance(message[0], str)):
            raise _WorkerGone(f"sent a malformed line {bytes(raw[:100])!r}")
        if message[0] == "fatal":
            self._fatal = str(message[1] if len(message) > 1 else "")[:500]
            raise _WorkerGone(await self._exit_reason())
        return message

    async def _fill(self, deadline: float, overdue: str) -> None:
        """Read until a whole line arrives or ``deadline`` passes with nothing sent."""
        assert self._worker is not None
        channel = self._worker.channel
        extended = False
        while not self._lines:
            with anyio.move_on_at(deadline):
                try:
                    chunk = await channel.receive(_CHUNK)
                except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    raise _WorkerGone(await self._exit_reason()) from None
                self._partial += chunk
                if b"\n" not in chunk:
                    if len(self._partial) > _wire.MAX_LINE_BYTES:
                        raise _WorkerGone(f"sent a protocol line over {_wire.MAX_LINE_BYTES} bytes")
                    continue
                *complete, rest = self._partial.split(b"\n")
                self._partial = bytearray(rest)
                self._lines.extend(complete)
                return
            # The deadline passed. If bytes are waiting, the worker did answer and this loop
            # was late (a busy event loop): read them, once, before judging.
            if extended or not _pending(self._worker):
                raise _WorkerGone(overdue)
            extended = True
            deadline = anyio.current_time() + self._grace

    async def _exit_reason(self) -> str:
        worker = self._worker
        if worker is None:
            return "is not running"
        code: int | None = None
        with anyio.CancelScope(shield=True), anyio.move_on_after(5) as waited:
            code = await worker.wait()
        fatal = f": {self._fatal}" if self._fatal else ""
        if waited.cancelled_caught:
            return f"stopped responding{fatal}"
        if code is None:
            return f"was killed: its fork server ended{fatal}"
        if code == -signal.SIGXCPU:
            return "exceeded its CPU limit (SIGXCPU) and was killed"
        if code < 0:
            return f"was killed by {_signal_name(-code)}{fatal}"
        return f"exited with code {code}{fatal}"

    async def _discard(self) -> None:
        """Kill the worker (if any) and forget it; the next run starts a new one."""
        worker, self._worker = self._worker, None
        self._partial.clear()
        self._lines.clear()
        if worker is None:
            return
        with anyio.CancelScope(shield=True):
            await worker.kill()
            with anyio.move_on_after(5):
                await worker.wait()
            await worker.aclose()

    # -- running --------------------------------------------------------------------------
    async def run(self, events: Sequence[Mapping[str, Any]]) -> list[FilterOutcome]:
        if self._closed:
            raise FilterError("this filter session is closed")
        events = list(events)
        size = self.limits.events_per_update
        out: list[FilterOutcome] = []
        async with self._lock:
            for i in range(0, len(events), size):
                out.extend(await self._run_batch(events[i : i + size]))
        return out

    async def dry_run(self, event: Mapping[str, Any]) -> FilterOutcome:
        if self._closed:
            raise FilterError("this filter session is closed")
        async with self._lock:
            [outcome] = await self._run_batch([event])
            await self._reset()
        return check_dry_run(outcome)

    async def _reset(self) -> None:
        """A fresh scope in the same worker (after a dry run)."""
        if self._worker is None:
            return
        try:
            reply = await self._request(["init", self.source, FILENAME, self._names])
        except _WorkerGone:
            await self._discard()
            return
        if reply[0] != "ok":
            await self._discard()

    async def _run_batch(self, events: list[Mapping[str, Any]]) -> list[FilterOutcome]:
        outcomes: list[FilterOutcome] = []
        pending = events
        deaths = 0
        retried = False  # a batch whose worker died before starting it runs once more
        while pending:
            if self._worker is None:
                try:
                    await self.start()
                except FilterError as exc:
                    note = f"the filter worker could not be restarted: {exc}"
                    outcomes.extend(FilterOutcome(error=note, error_type="worker") for _ in pending)
                    break
            batch, line = self._sendable(pending)
            if line is None:  # the first event cannot be handed over; the rest may
                outcomes.append(FilterOutcome(error=_UNSENDABLE_EVENT, error_type="event"))
                pending = pending[1:]
                continue
            try:
                outcomes.extend(await self._exchange(batch, line))
                pending = pending[len(batch) :]
                retried = False
            except _NotStarted as gone:
                # None of the batch ran (the worker died idle, e.g. with its fork server): that is
                # no event's fault. Run it once more on a new worker; report it only if that fails too.
                self.restarts += 1
                if retried:
                    note = (
                        f"the filter worker {gone.reason} before on_event could run on this event, "
                        "twice; the event was not run"
                    )
                    outcomes.extend(FilterOutcome(error=note, error_type="worker") for _ in batch)
                    pending = pending[len(batch) :]
                    retried = False
                else:
                    _log.warning(
                        "a filter worker %s while idle; its events run on a new worker (its variables are gone)",
                        gone.reason,
                    )
                    retried = True
            except _Died as died:
                outcomes.extend(died.done)
                outcomes.append(
                    FilterOutcome(
                        error=(
                            f"the filter worker {died.reason} while running on_event on this event; "
                            "it is restarted, so variables set by earlier events are gone"
                        ),
                        error_type="worker",
                    )
                )
                pending = pending[len(died.done) + 1 :]
                retried = False
                deaths += 1
                self.restarts += 1
                if deaths >= MAX_DEATHS_PER_BATCH and pending:
                    note = f"skipped: the filter worker died {deaths} times in this batch"
                    outcomes.extend(FilterOutcome(error=note, error_type="worker") for _ in pending)
                    break
        return outcomes

    def _sendable(self, events: list[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], bytes | None]:
        """The longest prefix of ``events`` that can be written for the worker (usually all of
        them) and its ``run`` line; no line when the first event cannot be (nested too deeply)."""
        line = self._run_line(events)
        if line is not None:
            return events, line
        # Rare: find the first event that cannot be written (if each can alone, go one by one).
        bad = next((i for i, event in enumerate(events) if self._run_line([event]) is None), 1)
        batch = events[: max(bad, 1)]
        line = self._run_line(batch)
        return (batch, line) if line is not None else ([], None)

    def _run_line(self, events: list[Mapping[str, Any]]) -> bytes | None:
        try:
            return _wire.encode(["run", events, self.limits.filter_timeout])
        except _wire.ENCODE_ERRORS:
            return None

    async def _exchange(self, events: list[Mapping[str, Any]], line: bytes) -> list[FilterOutcome]:
        done: list[FilterOutcome] = []
        finished = begun = False
        timeout = self.limits.filter_timeout
        overdue = (
            f"had not finished the event {timeout + self._grace:g} s after it started "
            f"(Limits.filter_timeout {timeout:g} s + {self._grace:g} s grace) and was killed"
        )
        try:
            await self._send(line)
            calls = 0
            # The event's wall-clock time starts when the parent hands it over (the batch
            # is sent, or the previous outcome arrives); the worker's own clock starts no
            # earlier, so it stops the event first and this deadline is only a backstop.
            started = anyio.current_time()
            while len(done) < len(events):
                message = await self._recv(started + timeout + self._grace, overdue)
                kind = message[0]
                if not begun:
                    begun = True  # it is alive and speaking: what went wrong now is on this batch
                    if message != ["s"]:
                        raise _WorkerGone(f"sent {str(message)[:100]} before starting the batch")
                elif kind == "o":
                    done.append(self._outcome(message))
                    calls = 0
                    started = anyio.current_time()
                elif kind == "call" and _is_call(message):
                    calls += 1
                    await self._send(await self._serve(message, calls, started + timeout))
                else:
                    raise _WorkerGone(f"sent an unexpected message {str(message)[:100]}")
            finished = True
            return done
        except _WorkerGone as gone:
            if not begun:
                raise _NotStarted(gone.reason) from None
            raise _Died(done, gone.reason) from None
        finally:
            if not finished:
                # Dead, garbled, or cancelled mid-batch: the worker's state is unknown.
                await self._discard()

    def _outcome(self, message: list[Any]) -> FilterOutcome:
        fields = message[1:]
        if len(fields) != 3 or not all(f is None or isinstance(f, str) for f in fields):
            raise _WorkerGone(f"sent a malformed outcome {str(message)[:100]}")
        line, error, error_type = fields
        cap = self.engine.max_line_chars
        if line is not None and len(line) > cap:
            line = line[:cap] + f" ... [truncated, {len(line)} characters]"
        return FilterOutcome(
            line=line, error=error and error[:cap], error_type=error_type and error_type[:100]
        )

    async def _serve(self, message: list[Any], calls: int, deadline: float) -> list[Any] | bytes:
        """The reply to a catalog call made by the event whose time is up at ``deadline``."""
        _, call_id, name, kwargs = message
        limit = self.limits.filter_tool_calls
        if name not in self.catalog.names:
            allowed = ", ".join(self._names) or "(none)"
            return [
                "ret",
                call_id,
                False,
                f"{quoted(name)} is not in the filter's read-only catalog (allowed: {allowed})",
            ]
        if calls > limit:
            return [
                "ret",
                call_id,
                False,
                f"tool-call limit: on_event may make at most {limit} catalog calls per event "
                f"(Limits.filter_tool_calls); {name}() was call {calls}",
            ]
        # The event's deadline bounds the call (the worker then stops the event with a
        # timeout); catalog_timeout bounds it too, as a CatalogError the filter may catch.
        own_limit = anyio.current_time() + self.engine.catalog_timeout
        try:
            with anyio.move_on_at(min(deadline, own_limit)) as waited:
                value = await self.catalog.call(name, dict(kwargs))
        except Exception as exc:
            text = clip(str(exc), 1000)
            return [
                "ret",
                call_id,
                False,
                f"{name}(): {type(exc).__name__}: {text}" if text else f"{name}(): {type(exc).__name__}",
            ]
        if waited.cancelled_caught:
            if deadline <= own_limit:
                return ["ret", call_id, False, f"{name}() did not answer in time", "timeout"]
            return ["ret", call_id, False, f"{name}() timed out after {self.engine.catalog_timeout:g} s"]
        return self._answer(call_id, name, value)

    def _answer(self, call_id: int, name: str, value: Any) -> list[Any] | bytes:
        """The reply carrying a catalog call's answer, or an error the filter can catch when the
        answer cannot be handed over (the worker would fail reading it, and die)."""
        if _wire.nested_deeper_than(value, _wire.MAX_CALL_DEPTH):
            why = f"its answer is nested more than {_wire.MAX_CALL_DEPTH} levels deep"
        else:
            try:
                line = _wire.encode(["ret", call_id, True, value])
            except _wire.ENCODE_ERRORS as exc:
                why = f"its answer cannot be handed to the filter ({type(exc).__name__})"
            else:
                if len(line) <= _wire.MAX_LINE_BYTES:
                    return line
                why = f"its answer is {len(line):,} bytes; at most {_wire.MAX_LINE_BYTES:,}"
        return ["ret", call_id, False, f"{name}(): {why}"]

    async def probe(self) -> dict[str, Any]:
        """The worker's own view of its environment and limits (diagnostics and tests)."""
        async with self._lock:
            if self._worker is None:
                await self.start()
            try:
                reply = await self._request(["probe"])
            except _WorkerGone as gone:
                await self._discard()
                raise FilterEngineError(f"the filter worker {gone.reason}") from None
        assert reply[0] == "probe"
        result: dict[str, Any] = reply[1]
        return result

    async def aclose(self) -> None:
        """End the worker: close the channel's sending side (it exits on EOF), kill it if it
        lingers; the last session of an engine also ends its fork server."""
        if self._closed and not self._retained:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            worker = self._worker
            if worker is not None:
                try:
                    await worker.channel.send_eof()
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    pass
                else:
                    with anyio.move_on_after(2):
                        await worker.wait()
                await self._discard()
            if self._retained:
                self._retained = False
                await self.engine._release()
