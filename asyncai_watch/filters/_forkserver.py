"""The filter fork server: loads the sandbox once and forks one worker per filter session.

Started by :mod:`asyncai_watch.filters.restricted` as ``python -I -c <boot>``: a fresh
interpreter, not a fork of the (asyncio, possibly threaded) agent process. It stays
single-threaded, imports only the sandbox and the worker (RestrictedPython, the policy,
the preloaded codecs and libseccomp), freezes the garbage collector's view of them, and
then forks. Each worker shares those pages with the server and with every other worker;
it locks itself down after the fork (rlimits, uid, seccomp), in the child, so the server
keeps the ability to fork.

fd 0 is an AF_UNIX stream socket to the parent (fd 1 is then pointed at /dev/null). One
request at a time::

    server -> parent  b"ready\\n"                   once, when it can fork
    parent -> server  b"fork\\n" + 2 descriptors     (SCM_RIGHTS) the worker's channel, the status socket
    server -> parent  b"pid <n>\\n" | b"err <why>\\n"

Per worker, the status socket carries what only the server, the worker's parent, knows::

    parent -> server  any byte: kill the worker (SIGKILL); EOF: the session let go, kill it
    server -> parent  b"<exit code>\\n" once the worker is reaped (negative: killed by that signal), then EOF

The server exits when the parent closes the control socket (the agent ended, even by
SIGKILL), killing its workers; a worker it forked dies with it (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import selectors
import signal
import socket
import sys
from typing import Any, Final

from asyncai_watch.filters import _worker

READY: Final = b"ready\n"
_REQUEST: Final = b"fork\n"


def _ignore(_signum: int, _frame: Any) -> None:
    """SIGCHLD's handler: the wakeup fd is what wakes the loop; nothing to do here."""


class Server:
    def __init__(self, ctl: socket.socket, wake: int, config: dict[str, Any], seccomp: Any) -> None:
        self.ctl = ctl
        self.wake = wake
        self.config = config
        self.seccomp = seccomp
        self.pid = os.getpid()
        self.selector = selectors.DefaultSelector()
        self.selector.register(ctl, selectors.EVENT_READ, None)
        self.selector.register(wake, selectors.EVENT_READ, 0)
        self.status: dict[int, socket.socket] = {}
        """Workers not reaped yet whose session still listens -> their status socket."""
        self.ended = False

    def serve(self) -> None:
        while not self.ended:
            for key, _ in self.selector.select():
                if key.data is None:
                    self.on_request()
                elif key.data == 0:
                    self.reap()
                else:
                    self.on_status(key.data)
                if self.ended:
                    break
        for pid in self.status:  # the agent is gone: so are its filters
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def on_request(self) -> None:
        try:
            data, fds, _flags, _addr = socket.recv_fds(self.ctl, 64, 2)
        except OSError:
            data, fds = b"", []
        if not data:
            for fd in fds:
                os.close(fd)
            self.ended = True
            return
        if data != _REQUEST or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            self.ctl.sendall(b"err malformed request\n")
            return
        channel, status = fds
        try:
            pid = os.fork()
        except OSError as exc:
            os.close(channel)
            os.close(status)
            self.ctl.sendall(f"err fork failed: {exc}\n".encode())
            return
        if pid == 0:
            self.become_worker(channel)  # never returns
        os.close(channel)
        sock = socket.socket(fileno=status)
        sock.setblocking(False)
        self.status[pid] = sock
        self.selector.register(sock, selectors.EVENT_READ, pid)
        self.ctl.sendall(f"pid {pid}\n".encode())

    def become_worker(self, channel: int) -> None:
        """In the child: keep only the channel (as fd 0 and 1) and /dev/null (fd 2), then
        run the worker. Always ends the process: the child never returns into the loop."""
        code = 70
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.dup2(channel, 0)
            os.dup2(channel, 1)
            # The control socket, the wakeup pipe, the selector, the other workers' status
            # sockets: none of it may reach filter code. Their Python objects stay referenced
            # (by this frame) until os._exit, so none closes a reused descriptor number.
            os.closerange(3, os.sysconf("SC_OPEN_MAX"))
            inp = open(0, "rb", closefd=False)  # noqa: SIM115 - lives as long as the process
            out = open(1, "wb", closefd=False)  # noqa: SIM115
            code = _worker.run(self.config, inp, out, seccomp=self.seccomp, parent=self.pid)
            with contextlib.suppress(OSError):
                out.flush()
        finally:
            os._exit(code)

    def reap(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self.wake, 512):
                pass
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            sock = self.status.pop(pid, None)
            if sock is None:
                continue  # its session let go already
            self.selector.unregister(sock)
            with contextlib.suppress(OSError):
                sock.send(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            sock.close()

    def on_status(self, pid: int) -> None:
        sock = self.status.get(pid)
        if sock is None:
            return  # reaped earlier in this round
        try:
            data = sock.recv(64)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        # Not reaped yet (it is still in self.status), so the pid cannot have been reused.
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        if not data:  # the session let go: nobody will ask for the exit code
            del self.status[pid]
            self.selector.unregister(sock)
            sock.close()


def main(config_json: str) -> None:
    ctl = socket.socket(fileno=0)
    try:
        os.dup2(2, 1)  # fd 1 was the control socket too: stray output must not reach it
        sys.stdout = sys.stderr
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent ends us by closing the socket
        config = json.loads(config_json)
        seccomp = _worker.preload()
        threads = _worker._threads()
        if threads is not None and threads != 1:
            raise RuntimeError(f"the fork server must be single-threaded, it has {threads} threads")
        wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, _ignore)
        server = Server(ctl, wake_r, config, seccomp)
        # Everything loaded so far is shared with every worker: keep the collector from
        # writing to those objects (which would copy their pages into each worker).
        gc.collect()
        gc.freeze()
        ctl.sendall(READY)
    except Exception as exc:
        with contextlib.suppress(OSError):
            ctl.sendall((json.dumps(["fatal", f"{type(exc).__name__}: {exc}"]) + "\n").encode())
        raise SystemExit(70) from None
    server.serve()
