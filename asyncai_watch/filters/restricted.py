"""The RestrictedPython filter engine: each session is one reused, locked-down worker process.

The parent (this module) never runs filter code. It sends a batch of events over the
worker's stdin and reads one outcome line per event from its stdout, serving the worker's
catalog calls in between (the read-only rule and the per-event call limit are enforced
here, not in the worker). A worker that crashes or stops answering is killed and restarted;
its scope is lost, and the outcome says so.
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
from collections import deque
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager, suppress
from pathlib import Path
from typing import Any, Final

import anyio
import attrs
from anyio.abc import Process

from asyncai_watch.errors import FilterEngineError, FilterError
from asyncai_watch.filters import _wire
from asyncai_watch.filters._check import FILENAME, check_source
from asyncai_watch.filters.engine import Catalog, FilterOutcome, FilterSession, check_dry_run, open_session
from asyncai_watch.limits import Limits

__all__ = ["FILENAME", "RestrictedFilterSession", "RestrictedPythonEngine", "check_source"]

MAX_DEATHS_PER_BATCH: Final = 3
_CHUNK: Final = 256 * 1024
_STARTUP_TIMEOUT: Final = 30.0
"""Seconds a new worker may take to start and compile the source (a loaded machine is slow)."""

# The package root goes at the *end* of sys.path: an installed asyncai_watch wins, and a
# plain checkout still works under -I (which leaves the current directory out).
_BOOT: Final = """\
import sys
sys.path.append(sys.argv[1])
try:
    from asyncai_watch.filters._worker import main
except BaseException as exc:
    import json
    sys.stdout.write(json.dumps(["fatal", "cannot start: %s: %s" % (type(exc).__name__, exc)]) + "\\n")
    sys.stdout.flush()
    raise SystemExit(70)
main(sys.argv[2])
"""
_ROOT: Final = str(Path(__file__).resolve().parents[2])
_log = logging.getLogger(__name__)


@attrs.define(kw_only=True)
class RestrictedPythonEngine:
    """Runs ``on_event`` under RestrictedPython in one worker subprocess per session.

    ``memory_limit`` caps each worker's address space; ``cpu_budget`` is a worker's total
    CPU seconds before it is killed and restarted; ``watchdog`` is how long a worker may be
    silent while it owes an answer (default ``max(30, 10 * filter_timeout)``) before it is
    killed; ``catalog_timeout`` bounds one catalog call.
    """

    limits: Limits = attrs.field(factory=Limits)
    memory_limit: int = 256 * 2**20
    cpu_budget: float = 3600.0
    max_line_chars: int = 65_536
    catalog_timeout: float = 30.0
    watchdog: float | None = None
    drop_privileges: bool = True
    python: str = sys.executable
    seccomp: str | None = attrs.field(default=None, init=False)
    """The latest worker's seccomp state as it reported it: ``"on"`` or ``"off: <why>"``
    (None before the first worker started)."""
    _seccomp_warned: bool = attrs.field(default=False, init=False, repr=False)

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

    def validate(self, source: str) -> None:
        check_source(source)

    def command(self) -> list[str]:
        config = {
            "memory": self.memory_limit,
            "cpu_budget": self.cpu_budget,
            "max_line": self.max_line_chars,
            "drop_privileges": self.drop_privileges,
        }
        # -I: ignore PYTHON* variables and the user site; no cwd on sys.path.
        return [self.python, "-I", "-c", _BOOT, _ROOT, json.dumps(config)]

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


class _WorkerGone(Exception):
    """The worker died or stopped answering; ``reason`` says how."""

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
        self._proc: Process | None = None
        self._partial = bytearray()
        self._lines: deque[bytes | bytearray] = deque()
        self._fatal: str | None = None
        self._closed = False
        self._watchdog = (
            engine.watchdog if engine.watchdog is not None else max(30.0, 10 * limits.filter_timeout)
        )

    @property
    def pid(self) -> int | None:
        """The current worker's pid (None between a crash and the restart)."""
        return self._proc.pid if self._proc is not None else None

    async def __aenter__(self) -> RestrictedFilterSession:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    # -- process --------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the worker and compile the source in it. FilterError if either fails."""
        try:
            with anyio.fail_after(max(_STARTUP_TIMEOUT, self._watchdog) + 5):
                await self._spawn()
        except TimeoutError:
            await self._discard()
            raise FilterEngineError("the filter worker did not start in time") from None

    async def _spawn(self) -> None:
        try:
            proc = await anyio.open_process(
                self.engine.command(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env={},  # nothing inherited; the worker also clears what Python adds
                start_new_session=True,  # no terminal signals; we end it ourselves
            )
        except OSError as exc:
            raise FilterEngineError(f"cannot start the filter worker ({self.engine.python}): {exc}") from None
        assert proc.stdout is not None
        self._proc = proc
        self._partial.clear()
        self._lines.clear()
        self._fatal = None
        try:
            # Starting Python and importing RestrictedPython is not the filter's fault: init gets
            # the startup bound, not the (possibly short) watchdog.
            reply = await self._request(
                ["init", self.source, FILENAME, self._names], silence=max(_STARTUP_TIMEOUT, self._watchdog)
            )
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

    async def _request(self, message: list[Any], *, silence: float | None = None) -> Any:
        await self._send(message)
        return await self._recv(silence=silence)

    async def _send(self, message: list[Any]) -> None:
        assert self._proc is not None
        assert self._proc.stdin is not None
        try:
            await self._proc.stdin.send(_wire.encode(message))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            raise _WorkerGone(await self._exit_reason()) from None

    async def _recv(self, *, silence: float | None = None) -> Any:
        """The worker's next message. Lines already received are returned without waiting,
        so a batch's outcomes (usually one chunk) cost one wakeup, not one per line."""
        if not self._lines:
            await self._fill(self._watchdog if silence is None else silence)
        raw = self._lines.popleft()
        try:
            message = _wire.decode(raw)
        except ValueError:
            message = None
        # The worker is not trusted (a sandbox escape would run there): check every shape.
        if not (isinstance(message, list) and message and isinstance(message[0], str)):
            raise _WorkerGone(f"sent a malformed line {bytes(raw[:100])!r}")
        if message[0] == "fatal":
            self._fatal = str(message[1] if len(message) > 1 else "")[:500]
            raise _WorkerGone(await self._exit_reason())
        return message

    async def _fill(self, silence: float) -> None:
        """Read until a whole line arrives; a worker silent for ``silence`` s is killed."""
        assert self._proc is not None
        assert self._proc.stdout is not None
        stdout = self._proc.stdout
        with anyio.move_on_after(silence):
            while not self._lines:
                try:
                    chunk = await stdout.receive(_CHUNK)
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
        raise _WorkerGone(f"stopped answering for {silence:g} s and was killed")

    async def _exit_reason(self) -> str:
        proc = self._proc
        if proc is None:
            return "is not running"
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            await proc.wait()
        code = proc.returncode
        fatal = f": {self._fatal}" if self._fatal else ""
        if code is None:
            return f"stopped responding{fatal}"
        if code == -signal.SIGXCPU:
            return "exceeded its CPU limit (SIGXCPU) and was killed"
        if code < 0:
            return f"was killed by {_signal_name(-code)}{fatal}"
        return f"exited with code {code}{fatal}"

    async def _discard(self) -> None:
        """Kill the worker (if any) and forget it; the next run starts a new one."""
        proc, self._proc = self._proc, None
        self._partial.clear()
        self._lines.clear()
        if proc is None:
            return
        with anyio.CancelScope(shield=True):
            if proc.returncode is None:
                with suppress(ProcessLookupError):
                    proc.kill()
            with anyio.move_on_after(5):
                await proc.wait()
            await proc.aclose()

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
        if self._proc is None:
            return
        try:
            # Starting Python and importing RestrictedPython is not the filter's fault: init gets
            # the startup bound, not the (possibly short) watchdog.
            reply = await self._request(
                ["init", self.source, FILENAME, self._names], silence=max(_STARTUP_TIMEOUT, self._watchdog)
            )
        except _WorkerGone:
            await self._discard()
            return
        if reply[0] != "ok":
            await self._discard()

    async def _run_batch(self, events: list[Mapping[str, Any]]) -> list[FilterOutcome]:
        outcomes: list[FilterOutcome] = []
        pending = events
        deaths = 0
        while pending:
            if self._proc is None:
                try:
                    await self.start()
                except FilterError as exc:
                    note = f"the filter worker could not be restarted: {exc}"
                    outcomes.extend(FilterOutcome(error=note, error_type="worker") for _ in pending)
                    break
            try:
                outcomes.extend(await self._exchange(pending))
                break
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
                deaths += 1
                self.restarts += 1
                if deaths >= MAX_DEATHS_PER_BATCH and pending:
                    note = f"skipped: the filter worker died {deaths} times in this batch"
                    outcomes.extend(FilterOutcome(error=note, error_type="worker") for _ in pending)
                    break
        return outcomes

    async def _exchange(self, events: list[Mapping[str, Any]]) -> list[FilterOutcome]:
        done: list[FilterOutcome] = []
        finished = False
        try:
            await self._send(["run", events, self.limits.filter_timeout])
            calls = 0
            while len(done) < len(events):
                message = await self._recv()
                kind = message[0]
                if kind == "o":
                    done.append(self._outcome(message))
                    calls = 0
                elif kind == "call" and _is_call(message):
                    calls += 1
                    await self._send(await self._serve(message, calls))
                else:
                    raise _WorkerGone(f"sent an unexpected message {str(message)[:100]}")
            finished = True
            return done
        except _WorkerGone as gone:
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

    async def _serve(self, message: list[Any], calls: int) -> list[Any]:
        _, call_id, name, kwargs = message
        limit = self.limits.filter_tool_calls
        if name not in self.catalog.names:
            allowed = ", ".join(self._names) or "(none)"
            return [
                "ret",
                call_id,
                False,
                f"{name!r} is not in the filter's read-only catalog (allowed: {allowed})",
            ]
        if calls > limit:
            return [
                "ret",
                call_id,
                False,
                f"tool-call limit: on_event may make at most {limit} catalog calls per event "
                f"(Limits.filter_tool_calls); {name}() was call {calls}",
            ]
        try:
            with anyio.fail_after(self.engine.catalog_timeout):
                value = await self.catalog.call(name, dict(kwargs))
        except TimeoutError:
            return ["ret", call_id, False, f"{name}() timed out after {self.engine.catalog_timeout:g} s"]
        except Exception as exc:
            text = str(exc)
            return [
                "ret",
                call_id,
                False,
                f"{name}(): {type(exc).__name__}: {text}" if text else f"{name}(): {type(exc).__name__}",
            ]
        return ["ret", call_id, True, value]

    async def probe(self) -> dict[str, Any]:
        """The worker's own view of its environment and limits (diagnostics and tests)."""
        async with self._lock:
            if self._proc is None:
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
        """End the worker: close its stdin (it exits on EOF), kill it if it lingers."""
        self._closed = True
        proc = self._proc
        if proc is None:
            return
        with anyio.CancelScope(shield=True):
            if proc.stdin is not None:
                with suppress(anyio.BrokenResourceError, OSError):
                    await proc.stdin.aclose()
            with anyio.move_on_after(2):
                await proc.wait()
        await self._discard()
