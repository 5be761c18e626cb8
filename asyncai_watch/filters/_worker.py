"""The filter worker process: one per filter session, reused for every event.

Forked by the fork server (:mod:`asyncai_watch.filters._forkserver`), or started on its own
by :mod:`asyncai_watch.filters.restricted` (``fork_server=False``), with an empty
environment and no descriptors beyond its channel to the parent (a Unix socket on fd 0 and
1) and /dev/null on fd 2. It locks itself down here, in the worker, before it reads any
filter code: no core files, an address-space cap, no file writes, no new descriptors, no
new processes, a CPU budget, (when started as root) the uid/gid of ``nobody``, and last a
seccomp filter that refuses (EPERM) the syscalls a filter worker never needs: opening
files, sockets, exec, fork/clone, io_uring, touching other processes, changing the file
system, mounts and namespaces. If libseccomp cannot be loaded the worker still runs; the
probe and the init reply say seccomp is off and why.

Per event, the limit is wall-clock time, catalog calls included: a CPU timer (SIGPROF)
raises a timeout inside the filter code once the event's deadline has passed, and a
catalog call still unanswered at the deadline is answered "timeout" by the parent, which
raises the same timeout here. A per-event RLIMIT_CPU soft limit kills the worker (SIGXCPU)
if the code swallows that timeout or sits in one long C call; the parent kills a worker
that overruns the deadline by its grace time, and restarts it.
"""

from __future__ import annotations

import codecs
import contextlib
import ctypes
import errno
import importlib
import json
import math
import os
import resource
import signal
import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import IO, Any, Final

from asyncai_watch.filters import _wire, sandbox

NOBODY: Final = 65534
MAX_CALL_BYTES: Final = 1024 * 1024
TICK: Final = 0.005
"""CPU seconds between SIGPROF checks while an event runs."""

_PRELOADED_CODECS: Final = (
    "ascii", "latin-1", "cp1252", "utf-16", "utf-32", "utf-8-sig", "idna", "punycode",
    "unicode_escape", "raw_unicode_escape", "base64", "hex",
)  # fmt: skip
"""Codecs a filter may use (``s.encode("cp1252")``); the rest fail as unknown encodings."""

_PR_SET_PDEATHSIG: Final = 1
_PR_SET_NO_NEW_PRIVS: Final = 38
_PR_GET_NO_NEW_PRIVS: Final = 39

DENIED_SYSCALLS: Final = (
    # New descriptors on files or the network: RLIMIT_NOFILE alone is sidestepped by
    # closing fd 2 first.
    "open",
    "openat",
    "openat2",
    "creat",
    "open_by_handle_at",
    "socket",
    "socketpair",
    "connect",
    "bind",
    "listen",
    "accept",
    "accept4",
    # io_uring runs openat/connect/... inside the kernel, where seccomp never sees them.
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    # New programs and processes. The worker is single-threaded (the probe's "threads"),
    # so it needs no clone at all, not even for threads.
    "execve",
    "execveat",
    "fork",
    "vfork",
    "clone",
    "clone3",
    # Other processes' memory and descriptors.
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_open",
    "pidfd_getfd",
    "pidfd_send_signal",
    # The file system (RLIMIT_FSIZE=0 stops writes, not these).
    "unlink",
    "unlinkat",
    "rename",
    "renameat",
    "renameat2",
    "mkdir",
    "mkdirat",
    "rmdir",
    "link",
    "linkat",
    "symlink",
    "symlinkat",
    "mknod",
    "mknodat",
    "truncate",
    "chmod",
    "fchmod",
    "fchmodat",
    "fchmodat2",
    "chown",
    "fchown",
    "lchown",
    "fchownat",
    "setxattr",
    "lsetxattr",
    "removexattr",
    "lremovexattr",
    "utime",
    "utimes",
    "utimensat",
    "futimesat",
    # Mounts and namespaces.
    "mount",
    "umount2",
    "chroot",
    "pivot_root",
    "setns",
    "unshare",
    "fsopen",
    "fsmount",
    "move_mount",
    "open_tree",
)
"""Refused with EPERM once the worker is locked down; everything else is allowed."""

SIGNAL_SYSCALLS: Final = ("kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")
"""Refused with EPERM unless their first argument (pid, tid or tgid) is the worker itself."""


class FilterTimeout(BaseException):
    """Raised into the filter code when its time for one event runs out.

    A BaseException, so ``except Exception`` in a filter does not swallow it.
    """


class CatalogError(Exception):
    """A catalog call from the filter failed or was refused (the parent's message)."""


class _Fatal(BaseException):
    """The protocol cannot continue (parent gone, garbled reply): the worker exits."""


def _rlimits() -> dict[str, list[int]]:
    names = ("RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_CORE", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_NPROC")
    return {n: list(resource.getrlimit(getattr(resource, n))) for n in names}


def _open_fds(limit: int = 256) -> list[int]:
    found = []
    for fd in range(limit):
        try:
            os.fstat(fd)
        except OSError:
            continue
        found.append(fd)
    return found


def _threads() -> int | None:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


def _load_seccomp() -> ModuleType | str:
    """pyseccomp, or why it cannot be used. Loaded before the rlimits: finding
    libseccomp.so.2 runs ``ldconfig -p``, and that needs a process and descriptors."""
    try:
        return importlib.import_module("pyseccomp")  # untyped: used as a plain module
    except Exception as exc:  # ImportError, or RuntimeError/OSError: no libseccomp.so.2
        return f"cannot load libseccomp ({type(exc).__name__}: {exc})"


def preload() -> ModuleType | str:
    """Load what a locked-down worker can no longer load (codecs are looked up lazily, from
    files; libseccomp is found with ``ldconfig -p``). The fork server calls it once, so
    every worker it forks shares the loaded pages; returns :func:`_load_seccomp`'s result."""
    for codec in _PRELOADED_CODECS:
        codecs.lookup(codec)
    return _load_seccomp()


def _die_with(parent: int) -> bool:
    """Have the kernel SIGKILL this worker when ``parent`` (the fork server) ends, so no
    worker outlives it; False if it has already ended (then the worker exits at once)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # it ended between the fork and the prctl
        os._exit(0)
    return True


def _no_new_privs() -> bool:
    """Set PR_SET_NO_NEW_PRIVS (needed for seccomp without CAP_SYS_ADMIN; also no setuid
    binary can gain privileges); True if it is set."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    return bool(libc.prctl(_PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1)


def _apply_seccomp(seccomp: ModuleType) -> list[str]:
    """Load the filter; return the names this libseccomp does not know (skipped)."""
    deny = seccomp.ERRNO(errno.EPERM)
    flt = seccomp.SyscallFilter(seccomp.ALLOW)
    flt.set_attr(seccomp.Attr.ACT_BADARCH, seccomp.KILL_PROCESS)  # i386/x32 entry points
    flt.set_attr(seccomp.Attr.CTL_TSYNC, 1)  # every thread, should one ever exist
    unknown = []
    for name in DENIED_SYSCALLS:
        if seccomp.resolve_syscall(seccomp.Arch.NATIVE, name) == -1:
            unknown.append(name)  # e.g. fchmodat2 with an older libseccomp
            continue
        flt.add_rule(deny, name)
    me = os.getpid()
    for name in SIGNAL_SYSCALLS:
        flt.add_rule(deny, name, seccomp.Arg(0, seccomp.NE, me))
    flt.load()
    return unknown


def _lock_down(
    config: dict[str, Any], *, seccomp: ModuleType | str | None = None, parent: int | None = None
) -> dict[str, Any]:
    """Apply the OS limits; return what was done (for the probe). ``seccomp`` is what
    :func:`preload` returned, if it already ran (in the fork server); ``parent`` is the fork
    server's pid, which this worker must not outlive."""
    notes: dict[str, Any] = {"inherited_fds": _open_fds(), "threads": _threads()}
    loaded = preload() if seccomp is None else seccomp
    os.environ.clear()  # the parent passes env={}; Python itself may add LC_CTYPE
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    memory = int(config["memory"])
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    if config.get("drop_privileges", True) and os.geteuid() == 0:
        # As root the rlimits below could be raised again; as nobody they cannot.
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            notes["dropped_to"] = NOBODY
        except OSError as exc:
            notes["drop_failed"] = str(exc)
    if parent is not None:
        # After the uid change: the kernel clears the parent-death signal when credentials change.
        notes["dies_with_fork_server"] = _die_with(parent)
    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))  # no fork (root is exempt)
    except (OSError, ValueError) as exc:
        notes["nproc_failed"] = str(exc)
    resource.setrlimit(resource.RLIMIT_NOFILE, (3, 3))  # stdin, stdout, stderr: nothing new
    budget = int(config["cpu_budget"])
    resource.setrlimit(resource.RLIMIT_CPU, (budget, budget))
    notes["cpu_hard"] = budget
    notes["no_new_privs"] = _no_new_privs()
    # Last: everything the worker needs is imported by now, and the rlimits and the uid
    # change above use syscalls that stay allowed anyway.
    if isinstance(loaded, str):
        notes["seccomp"] = f"off: {loaded}"
    elif not notes["no_new_privs"]:
        notes["seccomp"] = "off: PR_SET_NO_NEW_PRIVS could not be set"
    else:
        try:
            notes["seccomp_unknown"] = _apply_seccomp(loaded)
        except (OSError, ValueError) as exc:  # e.g. a kernel built without seccomp
            notes["seccomp"] = f"off: the filter could not be loaded ({type(exc).__name__}: {exc})"
        else:
            notes["seccomp"] = "on"
    return notes


def timeout_message(timeout: float, waiting_for: str | None = None) -> str:
    """The error of an event that ran out of time (``waiting_for``: the unanswered call)."""
    why = f"; {waiting_for}() had not answered and was abandoned" if waiting_for else "; it was stopped"
    return (
        f"timeout: on_event ran for more than {timeout:g} s on this event "
        f"(Limits.filter_timeout, wall-clock, catalog calls included){why}"
    )


class Worker:
    def __init__(self, config: dict[str, Any], inp: IO[bytes], out: IO[bytes]) -> None:
        self.inp = inp
        self.out = out
        self.memory = int(config["memory"])
        self.max_line = int(config["max_line"])
        self.armed = False
        self.call_id = 0
        self.code: sandbox.ReplCode | None = None
        self.scope: dict[str, Any] = {}
        self.filename = "<on_event>"
        self.notes: dict[str, Any] = {}
        self.aimed_at = float("-inf")
        self.room = 0.0
        self.timeout = 2.0
        self.deadline = float("inf")  # time.monotonic() at which the running event's time is up
        self.expired: str | None = None  # the running event's timeout, once raised

    # -- protocol -------------------------------------------------------------------------
    def send(self, message: Any) -> None:
        self.out.write(_wire.encode(message))
        self.out.flush()

    def recv(self) -> Any:
        line = self.inp.readline()
        if not line:
            raise _Fatal("the parent closed the pipe")
        return _wire.decode(line)

    def on_sigprof(self, _signum: int, _frame: Any) -> None:
        # Fires every TICK of CPU during a batch (armed once per batch, so fast events pay
        # no timer syscalls). It measures nothing itself: the limit is the event's wall-clock
        # deadline, and a tick is simply when running code can be interrupted.
        if self.armed and time.monotonic() >= self.deadline:
            raise self._expire(timeout_message(self.timeout))

    def _expire(self, message: str) -> FilterTimeout:
        # Remembered: code that swallows the timeout (``except BaseException``) still gets
        # the timeout as its outcome, whatever it returns afterwards.
        if self.expired is None:
            self.expired = message
        return FilterTimeout(self.expired)

    def serve(self) -> None:
        while True:
            try:
                message = self.recv()
            except _Fatal:
                return
            op = message[0]
            if op == "run":
                self.run(message[1], float(message[2]))
            elif op == "init":
                self.init(message[1], message[2], message[3])
            elif op == "probe":
                self.send(["probe", self.probe()])
            else:
                self.send(["fatal", f"unknown request {op!r}"])
                return

    def probe(self) -> dict[str, Any]:
        return {
            "environ": dict(os.environ),
            "pid": os.getpid(),
            "uid": os.getuid(),
            "gid": os.getgid(),
            "rlimits": _rlimits(),
            **self.notes,
        }

    # -- filters --------------------------------------------------------------------------
    def init(self, source: str, filename: str, names: list[str]) -> None:
        self.filename = filename
        try:
            code = sandbox.compile_repl(source, filename=filename)
        except SyntaxError as exc:
            self.code = None
            self.send(["err", sandbox.describe_error(exc, filename), "SyntaxError"])
            return
        self.code = code
        self.scope = sandbox.new_scope({n: self._catalog_function(n) for n in names}, label=filename)
        self.scope["CatalogError"] = CatalogError
        self.send(["ok", {"seccomp": self.notes.get("seccomp", "off: not locked down")}])

    def _catalog_function(self, name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if args:
                raise TypeError(f"{name}() takes keyword arguments only, e.g. {name}(uri=...)")
            return self.rpc(name, kwargs)

        call.__name__ = call.__qualname__ = name
        return call

    def rpc(self, name: str, kwargs: dict[str, Any]) -> Any:
        # The parent checks again (this process runs untrusted code); checking here first
        # gives the filter a CatalogError it can catch instead of a dead worker.
        if _wire.nested_deeper_than(kwargs, _wire.MAX_CALL_DEPTH):
            raise CatalogError(
                f"{name}(): arguments are nested more than {_wire.MAX_CALL_DEPTH} levels deep; pass flatter data"
            )
        try:
            payload = json.dumps(kwargs)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"{name}(): arguments must be JSON data (str, number, list, dict): {exc}"
            ) from None
        if len(payload) > MAX_CALL_BYTES:
            raise CatalogError(f"{name}(): arguments are {len(payload):,} bytes; at most {MAX_CALL_BYTES:,}")
        # No tick may raise while the request or its reply is half-sent: the stream would be
        # unusable. The wait still counts against the event's deadline: the parent answers
        # "timeout" when it passes, and the check below applies it.
        armed, self.armed = self.armed, False
        try:
            self.call_id += 1
            call_id = self.call_id
            self.send(["call", call_id, name, kwargs])
            try:
                reply = self.recv()
            except BaseException as exc:  # a half-read reply: the stream is unusable
                raise _Fatal(f"reading the reply to {name}(): {exc!r}") from None
        finally:
            self.armed = armed
        if not (
            isinstance(reply, list) and len(reply) in (4, 5) and reply[0] == "ret" and reply[1] == call_id
        ):
            raise _Fatal(f"unexpected reply to call {call_id}: {str(reply)[:200]}")
        if (len(reply) == 5 and reply[4] == "timeout") or (armed and time.monotonic() >= self.deadline):
            raise self._expire(timeout_message(self.timeout, name))
        if not reply[2]:
            raise CatalogError(reply[3])
        return reply[3]

    def _cpu_guard(self, timeout: float) -> None:
        # RLIMIT_CPU counts the process's whole life; keep its soft limit between "now +
        # budget + 0.5 s" and "+ 1.5 s" (it has 1 s granularity) so SIGXCPU ends an event
        # that ignores SIGPROF or sits in one long C call. CPU time <= wall time here, so
        # the wall clock tells when to re-aim without a syscall per event.
        now = time.monotonic()
        if now - self.aimed_at < self.room - timeout - 0.5:
            return
        usage = resource.getrusage(resource.RUSAGE_SELF)
        used = usage.ru_utime + usage.ru_stime
        soft = math.ceil(used + timeout + 0.5)
        hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
        self.aimed_at, self.room = now, soft - used

    def run(self, events: list[Any], timeout: float) -> None:
        # Each outcome is flushed as soon as it exists: if the next event kills the
        # worker, the parent knows exactly which event did.
        self.timeout = timeout
        self.out.write(_wire.STARTED)
        self.out.flush()
        signal.setitimer(signal.ITIMER_PROF, TICK, TICK)
        try:
            for event in events:
                self.out.write(_wire.outcome(*self.run_one(event, timeout)))
                self.out.flush()
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0, 0)

    def run_one(self, event: Any, timeout: float) -> list[str | None]:
        if self.code is None:
            return [None, "on_event did not compile", "SyntaxError"]
        scope = self.scope
        scope["event"] = event
        self._cpu_guard(timeout)
        self.expired = None
        try:
            self.deadline = time.monotonic() + timeout
            self.armed = True
            try:
                result = sandbox.run_sync(self.code, scope)
                line = self.render(result)
            finally:
                self.armed = False
        except _Fatal:
            raise
        except FilterTimeout as exc:
            return [None, str(exc) or timeout_message(timeout), "timeout"]
        except BaseException as exc:
            if self.expired is not None:
                return [None, self.expired, "timeout"]
            if isinstance(exc, MemoryError):
                return [
                    None,
                    f"MemoryError: on_event exceeded the filter memory limit ({self.memory // 2**20} MiB)",
                    "MemoryError",
                ]
            return [None, sandbox.describe_error(exc, self.filename, scope), type(exc).__name__]
        if self.expired is not None:
            return [None, self.expired, "timeout"]
        return [line, None, None]

    def render(self, result: sandbox.ReplResult) -> str | None:
        value = result.value
        text = None if value is None else value if isinstance(value, str) else _wire.compact_json(value)
        parts = [p for p in (result.printed.rstrip("\n"), text) if p]
        if not parts:
            return None  # None (or "") and nothing printed: the event is dropped
        line = "\n".join(parts)
        if len(line) > self.max_line:
            line = line[: self.max_line] + f" ... [truncated, {len(line)} characters]"
        return line


def run(
    config: dict[str, Any],
    inp: IO[bytes],
    out: IO[bytes],
    *,
    seccomp: ModuleType | str | None = None,
    parent: int | None = None,
) -> int:
    """Lock down, then serve the parent on ``inp``/``out`` until it closes the channel.
    Returns the exit code (0: the parent closed; 3: the protocol broke)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent ends us by closing the channel
    worker = Worker(config, inp, out)
    try:
        worker.notes = _lock_down(config, seccomp=seccomp, parent=parent)
        signal.signal(signal.SIGPROF, worker.on_sigprof)
        worker.serve()
    except BrokenPipeError:
        return 0
    except (_Fatal, Exception) as exc:
        with contextlib.suppress(OSError):
            worker.send(["fatal", f"{type(exc).__name__}: {exc}"])
        return 3
    return 0


def main(config_json: str) -> None:
    """A worker started on its own (``fork_server=False``): the channel is its stdin/stdout."""
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # stdout carries protocol lines only
    raise SystemExit(run(json.loads(config_json), inp, out))
