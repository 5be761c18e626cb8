"""One scale measurement in its own process: N watches on N URIs of one server, through the
public API only, so the same script measures this tree and an earlier one (bench/scale.py).

    python bench/_scale_client.py memo N CHANGES [burst]
    python bench/_scale_client.py files N CHANGES [burst]

The watches start one after another (what a model calling ``watch_start`` does), or with
``burst`` 256 at a time (a batch; what a restore of saved watches does). Prints one JSON line: watch_start/s, client and
server RSS per watch, listens open, the
server's inotify instances (the watches in each), the change -> notice latencies (a writer in another process: memo over HTTP, or a file write), and
the CPU both processes used over 10 idle seconds. A start that fails prints the error instead.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

from asyncai_watch import Limits, McpResourceSource, WatchManager

sys.path.append(str(Path(__file__).resolve().parent.parent))
from _memo import LineProcess, line_process

from tests.support.procfs import child_pid, inotify_watches

IDLE_SECONDS = 10.0
HERE = Path(__file__).resolve().parent


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def listens(m: WatchManager) -> int | None:
    """Listens the manager holds open (its internals: this tree's runners, or an older tree's feeds)."""
    runners = getattr(m, "_runners", None)
    if runners is not None:
        return sum(r.feed.listens for r in runners.values())
    feeds = getattr(m, "_feeds", None)
    return len(feeds) if feeds is not None else None


async def measure(kind: str, n: int, changes: int, burst: bool) -> dict[str, Any]:
    limits = Limits(debounce_quiet=0, debounce_max_wait=0, max_watches=max(5, n))
    with tempfile.TemporaryDirectory() as tmp:
        if kind == "memo":
            ready = Path(tmp) / "ready"
            argv = [sys.executable, "-m", "asyncai_servers.memo", "--also-http", "127.0.0.1:0"]
            argv += ["--ready-file", str(ready)]
            uris = [f"memo://notes/k{i}" for i in range(n)]
        else:
            root = Path(tmp) / "root"
            root.mkdir()
            for i in range(n):
                (root / f"f{i}.txt").write_text("0")
            argv = [sys.executable, "-m", "asyncai_servers.files", str(root)]
            uris = [f"file://{root}/f{i}.txt" for i in range(n)]
        # The server runs the same tree as this client (bench/scale.py sets PYTHONPATH for it).
        env = {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else None
        async with McpResourceSource.stdio(argv, name=kind, env=env) as source:
            server = child_pid(f"asyncai_servers.{kind}")
            client_before, server_before = rss_kib(os.getpid()), rss_kib(server)
            async with WatchManager([source], limits=limits) as m:
                start = time.perf_counter()
                failures: list[tuple[int, str]] = []

                async def one(i: int, uri: str) -> None:
                    try:
                        await m.watch_start(f"w{i}", uri)
                    except Exception as exc:
                        failures.append((i, f"{type(exc).__name__}: {exc}"[:300]))

                if burst:
                    todo = iter(enumerate(uris))

                    async def worker() -> None:
                        for i, uri in todo:  # 256 workers share one iterator: each start once
                            await one(i, uri)

                    async with anyio.create_task_group() as tg:
                        for _ in range(256):
                            tg.start_soon(worker)
                else:
                    for i, uri in enumerate(uris):
                        await one(i, uri)
                        if failures:
                            break
                if failures:
                    first = min(failures)
                    return {"n": n, "failed_at": first[0], "failed": len(failures), "error": first[1]}
                started = time.perf_counter() - start
                client_after, server_after = rss_kib(os.getpid()), rss_kib(server)
                server_inotify = inotify_watches(server)
                writer_argv = (
                    [str(HERE / "_writer.py"), ready.read_text().split()[1]]
                    if kind == "memo"
                    else [str(HERE / "_file_writer.py")]
                )
                latencies: list[float] = []
                async with line_process([sys.executable, *writer_argv], LineProcess) as writer:
                    for i in range(changes):
                        target = i * 7919 % n  # spread over the URIs
                        if kind == "memo":
                            t0 = float((await writer.ask(f'set k{target} "v{i}"')).split()[0])
                        else:
                            t0 = float(await writer.ask(f"{root}/f{target}.txt v{i}"))
                        with anyio.fail_after(30):
                            await m.notices.receive()
                        latencies.append(time.monotonic() - t0)
                    open_listens = listens(m)
                    idle_client, idle_server = cpu_seconds(os.getpid()), cpu_seconds(server)
                    await anyio.sleep(IDLE_SECONDS)  # measuring idleness: nothing should run meanwhile
                    idle_client = cpu_seconds(os.getpid()) - idle_client
                    idle_server = cpu_seconds(server) - idle_server
    return {
        "n": n,
        "starts_per_s": n / started,
        "client_kib_per_watch": (client_after - client_before) / n,
        "server_kib_per_watch": (server_after - server_before) / n,
        "listens": open_listens,
        "server_inotify": server_inotify,
        "latencies_ms": [x * 1000 for x in latencies],
        "idle_cpu_client_s": idle_client,
        "idle_cpu_server_s": idle_server,
    }


if __name__ == "__main__":
    kind, n, changes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print(json.dumps(anyio.run(measure, kind, n, changes, sys.argv[4:] == ["burst"])), flush=True)
