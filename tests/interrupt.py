"""Ctrl-C on a stdio server whose client still holds stdin: the server must end at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import termios
from collections.abc import Mapping, Sequence

import anyio
from anyio.streams.buffered import BufferedByteReceiveStream

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
    argv: Sequence[str], env: Mapping[str, str] | None = None, *, terminal: bool = False
) -> None:
    """Start ``argv`` on pipes, wait for its initialize answer, send SIGINT with stdin still open.

    ``terminal``: stdin is a pseudo-terminal, as when a person runs the server by hand.
    It must exit 0 without a traceback (it used to wait for stdin to close, a thread read it).
    """
    master = tty = None
    if terminal:
        master, tty = os.openpty()
        attrs = termios.tcgetattr(tty)
        attrs[3] &= ~termios.ECHO  # the echo would fill the unread master side
        termios.tcsetattr(tty, termios.TCSANOW, attrs)
    process = await anyio.open_process(
        list(argv), env=dict(env) if env is not None else None, stdin=tty if terminal else subprocess.PIPE
    )
    if tty is not None:
        os.close(tty)
    assert process.stdout is not None
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
                answer = json.loads(
                    await BufferedByteReceiveStream(process.stdout).receive_until(b"\n", 1 << 20)
                )
            assert answer["id"] == 1, answer
            assert "result" in answer, answer
            process.send_signal(signal.SIGINT)
            with anyio.fail_after(WAIT):
                returncode = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
        with anyio.CancelScope(shield=True):
            await process.aclose()
        if master is not None:
            os.close(master)
    text = stderr.decode(errors="replace")
    assert returncode == 0, text
    assert "Traceback" not in text, text
