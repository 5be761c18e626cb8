"""SIGTERM and SIGINT end every server and the bridge over HTTP with exit 0, after a graceful
shutdown: an open listen stream is ended by the server, not cut.

Their stdio modes are tested in tests/server/test_stdio_interrupt.py. Before, ``--http`` died of the
SIGTERM that uvicorn re-raises once it has shut down (exit 143) while SIGINT exited 0.
"""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import httpx2
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.http_servers import SERVERS, server_command
from tests.support.local_token import local_auth

pytestmark = pytest.mark.anyio

WAIT = 60  # seconds: a bound, never a sleep
MEMO = f"{shlex.quote(sys.executable)} -m asyncai_servers.memo"


def command(name: str, work: Path) -> tuple[list[str], dict[str, str] | None, dict[str, str]]:
    if name == "bridge":
        argv = [sys.executable, "-m", "asyncai_watch", "serve", "--server", MEMO, "--http", "127.0.0.1:0"]
        return argv, None, {}
    return server_command(name, work)


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("name", [*SERVERS, "bridge"])
async def test_http_mode_exits_0_after_a_graceful_shutdown(name: str, how: str, tmp_path: Path) -> None:
    argv, env, headers = command(name, tmp_path)
    async with await anyio.open_process(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
    ) as proc:
        assert proc.stderr is not None
        err = BufferedByteReceiveStream(proc.stderr)
        seen = b""
        try:
            with anyio.fail_after(WAIT):
                while not seen.endswith(b"\n") or b"READY " not in seen:
                    seen += await err.receive_until(b"\n", 65536) + b"\n"
            url = seen.split(b"READY ", 1)[1].split(b"\n", 1)[0].decode()
            async with (
                httpx2.AsyncClient(headers=local_auth(url, headers), timeout=WAIT) as http,
                Client(streamable_http_client(url, http_client=http)) as client,
                client.listen(tools_list_changed=True) as sub,
            ):
                proc.send_signal(signal.Signals[how])
                with anyio.fail_after(WAIT):
                    async for _ in sub:  # the server ends the stream as it shuts down
                        pass
            with anyio.fail_after(WAIT):
                async for chunk in err:
                    seen += chunk
                code = await proc.wait()
        finally:
            if proc.returncode is None:
                proc.kill()
    text = seen.decode(errors="replace")
    assert code == 0, text
    assert "Traceback" not in text, text
