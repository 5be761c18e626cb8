"""Ctrl-C, SIGTERM or a broken pipe on a stdio server whose client still holds stdin: it ends at once, quietly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import termios
from collections.abc import Mapping, Sequence

import anyio

WAIT = 30  # seconds: a bound, never a sleep

_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    },
}


async def assert_ctrl_c_ends(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    terminal: bool = False,
    how: str = "SIGINT",
) -> None:
    """Start ``argv`` on pipes, wait for its initialize answer, then end it with stdin still open.

    ``how``: ``SIGINT`` (Ctrl-C), ``SIGTERM`` (a parent stopped by ``timeout``), or
    ``broken-pipe`` (the client stops reading: its end of stdout is closed, then a ping makes
    the server write). ``terminal``: stdin is a pseudo-terminal, as when a person runs the
    server by hand. It must exit 0 without a traceback (Ctrl-C used to wait for stdin to
    close, a thread read it; SIGTERM killed it; a broken pipe printed an ExceptionGroup).
    """
    master = tty = None
    if terminal:
        master, tty = os.openpty()
        attrs = termios.tcgetattr(tty)
        attrs[3] &= ~termios.ECHO  # the echo would fill the unread master side
        termios.tcsetattr(tty, termios.TCSANOW, attrs)
    # stdout is a plain pipe whose read end this side owns, so "broken-pipe" can really close it.
    out_r, out_w = os.pipe()
    try:
        process = await anyio.open_process(
            list(argv),
            env=dict(env) if env is not None else None,
            stdin=tty if terminal else subprocess.PIPE,
            stdout=out_w,
        )
    finally:
        os.close(out_w)
        if tty is not None:
            os.close(tty)
    assert process.stderr is not None
    stderr = bytearray()
    try:
        async with anyio.create_task_group() as tg:

            async def drain() -> None:
                assert process.stderr is not None
                async for chunk in process.stderr:
                    stderr.extend(chunk)

            tg.start_soon(drain)
            with anyio.fail_after(WAIT):
                line = json.dumps(_INITIALIZE).encode() + b"\n"
                if master is not None:
                    os.write(master, line)  # a short write to a terminal does not block
                else:
                    assert process.stdin is not None
                    await process.stdin.send(line)
                answer = json.loads(await _read_line(out_r))
            assert answer["id"] == 1, answer
            assert "result" in answer, answer
            if how == "broken-pipe":
                os.close(out_r)
                out_r = -1
                ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
                assert process.stdin is not None
                await process.stdin.send(json.dumps(ping).encode() + b"\n")
            else:
                process.send_signal(signal.Signals[how])
            with anyio.fail_after(WAIT):
                returncode = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
        with anyio.CancelScope(shield=True):
            await process.aclose()
        if master is not None:
            os.close(master)
        if out_r >= 0:
            os.close(out_r)
    text = stderr.decode(errors="replace")
    assert returncode == 0, text
    assert "Traceback" not in text, text


async def _read_line(fd: int) -> bytes:
    """One line from ``fd``, waiting for readability on the event loop."""
    buf = b""
    while b"\n" not in buf:
        await anyio.wait_readable(fd)
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            raise EOFError(f"the server closed stdout before a whole line: {buf!r}")
        buf += chunk
    return buf.split(b"\n", 1)[0]
