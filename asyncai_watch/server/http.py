"""Serve an ASGI app (an MCP Streamable HTTP endpoint) on a socket we bind ourselves.

Binding first lets ``--http 127.0.0.1:0`` pick a free port, and lets us print
one ready line, ``READY http://HOST:PORT/mcp``, to stderr once the socket
accepts connections: tests and supervisors wait for that line (a signal) rather
than probing the port.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, TextIO

import anyio
import anyio.abc
import attrs
import uvicorn
from anyio.streams.buffered import BufferedByteReceiveStream

from asyncai_watch.exception_groups import leaves

from .guard import HttpGuard, guarded_protocol
from .policy import HttpPolicy, StaticTokens, parse_host_port

_log = logging.getLogger(__name__)

__all__ = [
    "ServerExitedError",
    "bind_error",
    "parse_host_port",
    "run_server",
    "running_http_server",
    "serve_http",
]


def bind_error(exc: BaseException) -> OSError | None:
    """The OSError behind ``exc`` (e.g. the port is taken), when that is all it is.

    A server that runs :func:`serve_http` inside a task group gets it wrapped in an exception group.
    """
    inside = leaves(exc)
    return inside[0] if len(inside) == 1 and isinstance(inside[0], OSError) else None


def run_server(prog: str, address: str, serve: Callable[..., Awaitable[None]], *args: object) -> int:
    """A server command's exit status for ``anyio.run(serve, *args)``: Ctrl-C is a clean 0, and a
    start-up OS error (a taken port, a runtime directory others can enter) one line and 2."""
    try:
        anyio.run(serve, *args)
    except KeyboardInterrupt:
        return 0
    except (OSError, BaseExceptionGroup) as exc:
        error = bind_error(exc)
        if error is None:
            raise
        print(f"{prog}: cannot serve HTTP on {address}: {error.strerror or error}", file=sys.stderr)
        return 2
    return 0


async def serve_http(
    app: Any,
    host: str,
    port: int,
    *,
    path: str = "/mcp",
    ready: TextIO | None = None,
    on_shutdown: Callable[[], None] | None = None,
    on_ready: Callable[[str], None] | None = None,
    stop: anyio.Event | None = None,
    send_buffer: int | None = None,
    policy: HttpPolicy | None = None,
) -> None:
    """Run ``app`` until cancelled, announcing ``READY <url>`` on ``ready`` (stderr by default).

    ``send_buffer`` caps each connection's kernel send buffer (SO_SNDBUF, inherited from the
    listening socket; the kernel doubles it): a server whose clients hold long-lived streams
    bounds what a client that stops reading can pin (Linux autotuning lets it grow to 4 MiB).

    ``on_shutdown`` runs when uvicorn starts shutting down (SIGTERM/SIGINT), before it waits for open
    connections: a server with long-lived listen streams ends them there, or shutdown would wait forever.
    ``on_ready`` is called with the URL right after the READY line, for in-process ordering.
    Setting ``stop`` shuts the server down gracefully (cancelling it instead skips uvicorn's
    lifespan shutdown).

    ``policy`` (default: :class:`HttpPolicy()`) is enforced in front of ``app``: Host/Origin,
    authentication, the header and idle timeouts and the connection cap (docs/http-security.md).
    A policy with no token verifier and no ``insecure_no_auth`` gets a token generated for this
    run, published for our clients in the runtime directory (:mod:`asyncai_watch.http_auth.local`)
    and named before the READY line (on stderr when it is a terminal, else in the log at INFO); the file is removed when the server stops. Refusing an unauthenticated non-loopback bind is the caller's
    (:func:`~asyncai_watch.server.policy.check_bind`), which prints its one line before anything starts.
    """
    policy = policy if policy is not None else HttpPolicy()
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP, not the default 0: asyncio sets TCP_NODELAY on an accepted connection only
    # when its socket says it is TCP (accepted sockets inherit the listener's proto). Without it,
    # Nagle holds the response body (h11 writes headers and body separately) until the client's
    # delayed ACK, 40 ms later, on every request of a kept-alive connection.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if send_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)
    sock.bind((host, port))
    sock.setblocking(False)
    bound_port = sock.getsockname()[1]
    with contextlib.ExitStack() as stack:
        if policy.verifier is None and not policy.insecure_no_auth:
            policy = _with_published_token(stack, policy, host, bound_port)
        # Listen only once the token is published: a client that connects at once finds it.
        sock.listen(128)
        await _serve_bound(app, sock, policy, host, bound_port, path, ready, on_shutdown, on_ready, stop)


def _with_published_token(
    stack: contextlib.ExitStack, policy: HttpPolicy, host: str, port: int
) -> HttpPolicy:
    """``policy`` requiring a token generated for this run, published in the runtime directory (until exit)."""
    from asyncai_watch.http_auth.local import published_token

    token, where = stack.enter_context(published_token(host, port))
    line = (
        f"HTTP bearer token in {where} (our clients read it by themselves; other clients send "
        "'Authorization: Bearer <its contents>')"
    )
    # For a person at a terminal; a program that started the server (an agent's stdio server
    # with --also-http, a test) reads it from the log, not from its stderr. Not ``ready``: a
    # ready file holds the READY line alone.
    if sys.stderr.isatty():
        print(line, file=sys.stderr, flush=True)
    else:
        _log.info("%s", line)
    return attrs.evolve(policy, verifier=StaticTokens([token], name="local"))


async def _serve_bound(
    app: Any,
    sock: socket.socket,
    policy: HttpPolicy,
    host: str,
    bound_port: int,
    path: str,
    ready: TextIO | None,
    on_shutdown: Callable[[], None] | None,
    on_ready: Callable[[str], None] | None,
    stop: anyio.Event | None,
) -> None:
    family = sock.family
    guarded = HttpGuard(app, policy, host=host, port=bound_port, path=path)
    config = uvicorn.Config(
        guarded,
        log_level="warning",
        lifespan="on",
        date_header=False,
        http=guarded_protocol(policy.limits),
        timeout_keep_alive=policy.limits.idle_timeout,
    )
    server = _AnnouncingServer(config)
    shown_host = f"[{host}]" if family == socket.AF_INET6 else host
    server.ready_line = f"READY http://{shown_host}:{bound_port}{path}"
    server.ready_out = ready if ready is not None else sys.stderr
    server.on_shutdown = on_shutdown
    server.on_ready = on_ready
    if stop is None:
        await server.serve([sock])
        return

    async def stop_when_set() -> None:
        await stop.wait()
        server.should_exit = True

    async with anyio.create_task_group() as tg:
        tg.start_soon(stop_when_set)
        await server.serve([sock])
        tg.cancel_scope.cancel()


class _AnnouncingServer(uvicorn.Server):
    """uvicorn has no started event; announce right after its startup returns.

    uvicorn's own main loop wakes every 100 ms to see whether it should exit (and to refresh the
    ``Date`` header): an idle server polling. Here the loop waits for the exit instead, set by
    uvicorn's own signal handler or :func:`serve_http`'s ``stop`` through :attr:`should_exit`,
    and no ``Date`` header is sent (``date_header=False``: without the tick it would go stale;
    HTTP lets an origin server without a clock it trusts omit it). An idle server wakes for
    nothing (``bench/scale.py`` measures the CPU over idle seconds).
    """

    ready_line: str = ""
    ready_out: TextIO = sys.stderr
    on_shutdown: Callable[[], None] | None = None
    on_ready: Callable[[str], None] | None = None
    _exit_requested: bool = False
    _exit_event: asyncio.Event | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    @property
    def should_exit(self) -> bool:
        return self._exit_requested

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        self._exit_requested = value
        if value and self._exit_event is not None and self._loop is not None:
            # uvicorn sets this from its SIGTERM/SIGINT handler (signal.signal, which does not
            # wake a loop parked in epoll): call_soon_threadsafe writes to the loop's self-pipe.
            self._loop.call_soon_threadsafe(self._exit_event.set)

    async def main_loop(self) -> None:
        self.server_state.default_headers = list(self.config.encoded_headers)  # what on_tick would set
        self._loop = asyncio.get_running_loop()  # uvicorn serves on asyncio
        self._exit_event = asyncio.Event()
        if not self._exit_requested:
            await self._exit_event.wait()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if not self.should_exit:
            print(self.ready_line, file=self.ready_out, flush=True)
            if self.on_ready is not None:
                self.on_ready(self.ready_line.split(" ", 1)[1])

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.on_shutdown is not None:
            self.on_shutdown()
        await super().shutdown(sockets=sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """uvicorn's, less its last step: once the graceful shutdown SIGTERM or SIGINT asked for is
        done, uvicorn raises the signal again, so the process died of it (exit 143 for SIGTERM)
        instead of returning; a server stopped on purpose exits 0."""
        if threading.current_thread() is not threading.main_thread():  # only it gets signals
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        original = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)


class ServerExitedError(RuntimeError):
    """An HTTP server process exited before printing its READY line."""


@asynccontextmanager
async def running_http_server(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, ready_timeout: float = 30.0
) -> AsyncIterator[tuple[str, anyio.abc.Process]]:
    """Run a server command that serves HTTP via :func:`serve_http`; yield ``(url, process)``.

    The URL comes from the server's ``READY <url>`` stderr line: awaiting that line is waiting
    on a signal, not probing a port. stderr is drained afterwards so a chatty server never
    blocks on a full pipe. On exit the process is terminated (killed if it lingers).
    """
    async with await anyio.open_process(
        list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
    ) as proc:
        assert proc.stderr is not None
        lines = BufferedByteReceiveStream(proc.stderr)
        seen: list[str] = []
        with anyio.fail_after(ready_timeout):
            while True:  # one awaited line at a time until READY
                try:
                    line = (await lines.receive_until(b"\n", 65536)).decode(errors="replace")
                except (anyio.IncompleteRead, anyio.EndOfStream):
                    raise ServerExitedError(
                        f"{' '.join(argv)} exited before READY; stderr: {''.join(seen)[-2000:]}"
                    ) from None
                seen.append(line + "\n")
                if line.startswith("READY "):
                    url = line.split(" ", 1)[1].strip()
                    break

        async def drain() -> None:
            with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                while True:
                    await lines.receive()

        async with anyio.create_task_group() as tg:
            tg.start_soon(drain)
            try:
                yield url, proc
            finally:
                with anyio.CancelScope(shield=True):
                    if proc.returncode is None:
                        proc.terminate()
                    with anyio.move_on_after(10):
                        await proc.wait()
                    if proc.returncode is None:
                        proc.kill()
                        await proc.wait()
                tg.cancel_scope.cancel()
