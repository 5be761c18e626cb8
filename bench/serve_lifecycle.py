"""``asyncai-watch serve`` as Claude Code starts and stops it: how soon it answers, how fast it exits.

    python bench/serve_lifecycle.py           # 10 runs of each
    python bench/serve_lifecycle.py --quick   # 3 runs of each

Each run is a fresh process on pipes, spoken to in JSON-RPC lines as a host does.

- initialize: serve with three upstreams, the files server, one whose command never answers
  (a process that sleeps) and a URL where nothing listens. "after start" is from the moment
  serve says it serves (its ``serve.start`` log line, so Python's imports are not counted) to
  the ``initialize`` answer: target <= 200 ms, whatever the upstreams do. "from spawn" is from
  the process's start, beside the baseline: the files server alone (the same interpreter and
  MCP SDK imports, no upstream), from spawn to its answer.
- exit: after the handshake and a ``watch_start`` (``--watch-state`` set), SIGINT or SIGTERM,
  and the time until the process has exited. Claude Code sends SIGINT, SIGTERM 100 ms later,
  SIGKILL 400 ms after that: target <= 100 ms. Baseline: the files server's own exit on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _memo import pct, row

PY = sys.executable
FILES = [PY, "-m", "asyncai_servers.files"]
SERVE = [PY, "-m", "asyncai_watch", "serve"]
HANG = [PY, "-c", "import time; time.sleep(3600)"]
INITIALIZE = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "bench", "version": "0"},
}


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


class Wire:
    def __init__(self, proc: anyio.abc.Process) -> None:
        assert proc.stdin is not None
        assert proc.stdout is not None
        self._stdin = proc.stdin
        self._stdout = BufferedByteReceiveStream(proc.stdout)
        self._ids = 0

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        self._ids += 1
        line = json.dumps({"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params})
        await self._stdin.send(line.encode() + b"\n")
        with anyio.fail_after(60):
            while True:
                reply = json.loads(await self._stdout.receive_until(b"\n", 1 << 20))
                if reply.get("id") == self._ids:
                    return reply["result"]

    async def notify(self, method: str) -> None:
        await self._stdin.send(json.dumps({"jsonrpc": "2.0", "method": method}).encode() + b"\n")


async def _started(proc: anyio.abc.Process) -> None:
    """Wait for serve's ``serve.start`` line on stderr (``--verbose``)."""
    assert proc.stderr is not None
    err = BufferedByteReceiveStream(proc.stderr)
    with anyio.fail_after(60):
        while b'"serve.start"' not in await err.receive_until(b"\n", 1 << 20):
            pass


async def _drain(stream: anyio.abc.ByteReceiveStream | None) -> None:
    if stream is not None:
        async for _ in stream:
            pass


async def initialize_once(root: Path, *, serve: bool) -> tuple[float, float]:
    """(from spawn, after serve.start) in seconds; the second is 0 for the baseline."""
    if serve:
        argv = [
            *SERVE,
            "--server",
            "files=" + shlex.join([*FILES, str(root)]),
            "--server",
            "hang=" + shlex.join(HANG),
            "--server",
            f"dead=http://127.0.0.1:{closed_port()}/mcp",
            "--verbose",
        ]
    else:
        argv = [*FILES, str(root)]
    t0 = time.monotonic()
    async with await anyio.open_process(argv) as proc:
        wire = Wire(proc)
        after = 0.0
        if serve:
            await _started(proc)
            t1 = time.monotonic()
            await wire.request("initialize", INITIALIZE)
            after = time.monotonic() - t1
        else:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_drain, proc.stderr)
                await wire.request("initialize", INITIALIZE)
                tg.cancel_scope.cancel()
        spawn = time.monotonic() - t0
        proc.terminate()  # serve stops its upstreams (the one that never answers too)
        await proc.wait()
    return spawn, after


async def exit_once(root: Path, sig: signal.Signals, *, serve: bool) -> float:
    state = root / "state" / f"{os.getpid()}-{time.monotonic_ns()}.json"
    if serve:
        argv = [*SERVE, "--server", "files=" + shlex.join([*FILES, str(root)]), "--watch-state", str(state)]
    else:
        argv = [*FILES, str(root)]
    async with await anyio.open_process(argv, stderr=subprocess.DEVNULL) as proc:
        wire = Wire(proc)
        await wire.request("initialize", INITIALIZE)
        await wire.notify("notifications/initialized")
        if serve:
            uri = f"file://{root / 'doc.json'}"
            await wire.request(
                "tools/call", {"name": "watch_start", "arguments": {"name": "doc", "uri": uri}}
            )
        else:
            await wire.request("resources/list", {})
        t0 = time.monotonic()
        proc.send_signal(sig)
        with anyio.fail_after(30):
            await proc.wait()
        took = time.monotonic() - t0
    if serve:
        assert json.loads(state.read_text())["watches"][0]["name"] == "doc", "the state file was not saved"
    return took


async def main(quick: bool) -> int:
    runs = 3 if quick else 10
    print(f"serve lifecycle bench: {runs} runs of each; every run a fresh process on pipes")
    print("load average at the start: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "doc.json").write_text('{"a": 1}')
        (root / "state").mkdir()
        spawn, after, base = [], [], []
        for _ in range(runs):
            s, a = await initialize_once(root, serve=True)
            b, _ = await initialize_once(root, serve=False)
            spawn.append(s)
            after.append(a)
            base.append(b)
        print("initialize, with one upstream that never answers and one where nothing listens:")
        row("after start, p50", pct(after, 50) * 1e3, None, "ms")
        row("after start, max", max(after) * 1e3, None, "ms", "(target <= 200 ms)")
        row("from spawn, p50 (baseline: files server alone)", pct(spawn, 50) * 1e3, pct(base, 50) * 1e3, "ms")
        ok = ok and max(after) <= 0.2
        for sig in (signal.SIGINT, signal.SIGTERM):
            took = [await exit_once(root, sig, serve=True) for _ in range(runs)]
            baseline = [await exit_once(root, signal.SIGTERM, serve=False) for _ in range(runs)]
            print(f"exit on {sig.name}, state file saved (baseline: the files server's own exit on SIGTERM):")
            row("p50", pct(took, 50) * 1e3, pct(baseline, 50) * 1e3, "ms")
            row("p90", pct(took, 90) * 1e3, pct(baseline, 90) * 1e3, "ms")
            row("max", max(took) * 1e3, max(baseline) * 1e3, "ms", "(target <= 100 ms)")
            ok = ok and max(took) <= 0.1
    print("load average at the end: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))
    print("all targets met" if ok else "some targets missed (see above)")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a short run")
    sys.exit(anyio.run(main, parser.parse_args().quick))
