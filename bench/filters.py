"""Filters: throughput through a warm worker, and memory per filter watch.

Throughput: events/s through a RestrictedPython filter in its warm worker (forked by the
fork server, seccomp on), in batches of 100. Beside it, the baseline the design rejected:
a fork per event (each event runs the same compiled filter in a freshly forked child, with
the same rlimits, and sends its outcome back over a pipe). Target: >= 10,000 events/s.

Memory: 1 and 10 filter sessions (a watch with ``on_event`` holds one), each having run a
batch of 100 events; PSS (and RSS) from /proc/PID/smaps_rollup summed over every process
the filters need: the workers, plus the fork server when there is one. PSS splits a
shared page among the processes sharing it, so the sum is what the filters really cost.
Three ways, in the same run:

- fork server (the default): the sandbox is loaded once, each worker is a fork of it;
- a process per watch (``fork_server=False``): one fresh interpreter per session;
- a process per watch importing the whole library, as the worker did before the fork
  server (its bootstrap imported ``asyncai_watch``, and with it mcp, httpx, pydantic...).

Target: <= 10 MiB PSS per additional filter watch (the slope from 1 to 10 watches).

    python bench/filters.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from asyncai_watch.core.limits import Limits
from asyncai_watch.filters import EmptyCatalog, RestrictedFilterSession, RestrictedPythonEngine, sandbox

# The ADR's example filter (ADDED/DELETED of a ConfigMap -> one line, else dropped).
FILTER = """\
m = event["object"]["metadata"]
f'{event["type"].lower()} {m["namespace"]}/{m["name"]}' if event["type"] in ("ADDED", "DELETED") else None
"""
TARGET = 10_000.0
MEMORY_TARGET_MIB = 10.0
BATCH = 100
MIB = 2**20

# Stands in for `python` and runs the engine's bootstrap after importing the whole library,
# which is what the previous worker's bootstrap did (`from asyncai_watch.filters._worker ...`
# ran the package's __init__ first).
OLD_WORKER_PYTHON = f"""\
#!{sys.executable}
import sys
assert sys.argv[1:3] == ["-I", "-c"], sys.argv
code, sys.argv = sys.argv[3], ["-c", *sys.argv[4:]]
sys.path.append(sys.argv[1])
import asyncai_watch
exec(compile(code, "<boot>", "exec"), {{"__name__": "__main__"}})
"""


def make_events(n: int) -> list[dict[str, Any]]:
    kinds = ("ADDED", "MODIFIED", "DELETED", "MODIFIED")
    return [
        {
            "watch": "cm",
            "uri": "kcp-events://watch/root:app/configmaps?namespace=*",
            "type": kinds[i % 4],
            "seq": i,
            "object": {
                "metadata": {"namespace": "default", "name": f"cm-{i}", "uid": f"u{i}"},
                "data": {"k": "v"},
            },
            "old": None,
            "changed": [],
        }
        for i in range(n)
    ]


async def warm_worker(total: int) -> tuple[float, int, str | None]:
    engine = RestrictedPythonEngine(limits=Limits(events_per_update=BATCH))
    events = make_events(BATCH)
    kept = 0
    async with await engine.open(FILTER, catalog=EmptyCatalog()) as session:
        await session.run(events)  # warm-up: first batch pays for imports and caches
        start = time.perf_counter()
        for _ in range(total // BATCH):
            kept += sum(o.line is not None for o in await session.run(events))
        elapsed = time.perf_counter() - start
    return (total // BATCH * BATCH) / elapsed, kept, engine.seccomp


def fork_per_event(total: int) -> float:
    code = sandbox.compile_repl(FILTER)
    events = make_events(total)
    start = time.perf_counter()
    for event in events:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: lock down like the worker, run once, report, exit
            try:
                os.close(r)
                resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
                resource.setrlimit(resource.RLIMIT_CPU, (3, 3))
                scope = sandbox.new_scope()
                scope["event"] = event
                result = sandbox.run_sync(code, scope)
                os.write(w, json.dumps([result.value, result.printed]).encode())
            finally:
                os._exit(0)
        os.close(w)
        with os.fdopen(r, "rb") as f:
            json.loads(f.read())
        os.waitpid(pid, 0)
    return total / (time.perf_counter() - start)


def rollup(pid: int) -> tuple[int, int]:
    """(PSS, RSS) in bytes, from /proc/PID/smaps_rollup."""
    values = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("Pss", "Rss"):
            values[key] = int(rest.split()[0]) * 1024
    return values["Pss"], values["Rss"]


async def footprint(engine: RestrictedPythonEngine, watches: int) -> tuple[int, int]:
    """Summed (PSS, RSS) of the processes behind ``watches`` warm filter sessions."""
    events = make_events(BATCH)
    sessions: list[RestrictedFilterSession] = []
    try:
        for _ in range(watches):
            sessions.append(await engine.open(FILTER, catalog=EmptyCatalog()))
        for session in sessions:
            await session.run(events)
        pids = [s.pid for s in sessions if s.pid is not None]
        assert len(pids) == watches
        if engine.fork_server_pid is not None:
            pids.append(engine.fork_server_pid)
        pss = rss = 0
        for pid in pids:
            p, r = rollup(pid)
            pss, rss = pss + p, rss + r
        return pss, rss
    finally:
        for session in sessions:
            await session.aclose()


async def memory(old_python: str) -> list[tuple[str, dict[int, tuple[int, int]]]]:
    ways = [
        ("fork server (default)", RestrictedPythonEngine()),
        ("process per watch", RestrictedPythonEngine(fork_server=False)),
        (
            "process per watch, whole library (before)",
            RestrictedPythonEngine(fork_server=False, python=old_python),
        ),
    ]
    results = []
    for label, engine in ways:
        results.append((label, {n: await footprint(engine, n) for n in (1, 10)}))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a short run (a few seconds)")
    args = parser.parse_args()
    warm_n, fork_n = (5_000, 100) if args.quick else (50_000, 400)

    rate, kept, seccomp = anyio.run(warm_worker, warm_n)
    baseline = fork_per_event(fork_n)
    print(f"filter throughput, {warm_n} events in batches of {BATCH} ({kept} kept, the rest dropped)")
    print(f"  warm worker      {rate:10,.0f} events/s   (fork-server worker, seccomp {seccomp})")
    print(f"  fork per event   {baseline:10,.0f} events/s   ({fork_n} events, baseline)")
    print(f"  ratio            {rate / baseline:10,.1f} x")
    print(f"  target           >= {TARGET:,.0f} events/s: {'met' if rate >= TARGET else 'NOT met'}")

    with tempfile.TemporaryDirectory() as tmp:
        old_python = Path(tmp) / "python-importing-the-library"
        old_python.write_text(OLD_WORKER_PYTHON)
        old_python.chmod(0o755)
        results = anyio.run(memory, str(old_python))
    print("filter memory, PSS summed over the workers (+ the fork server), after 100 events each")
    print(f"  {'':44} {'1 watch':>9} {'10 watches':>11} {'per added':>10} {'RSS, 10':>9}")
    slopes = {}
    for label, by_n in results:
        (pss1, _), (pss10, rss10) = by_n[1], by_n[10]
        slopes[label] = (pss10 - pss1) / 9
        print(
            f"  {label:44} {pss1 / MIB:7.1f} MiB {pss10 / MIB:8.1f} MiB "
            f"{slopes[label] / MIB:6.1f} MiB {rss10 / MIB:6.0f} MiB"
        )
    ours, before = slopes[results[0][0]], slopes[results[2][0]]
    print(f"  ratio (before / fork server, per added watch) {before / ours:5.1f} x")
    met = ours / MIB <= MEMORY_TARGET_MIB
    print(
        f"  target           <= {MEMORY_TARGET_MIB:g} MiB PSS per added watch: {'met' if met else 'NOT met'}"
    )
    sys.exit(0)


if __name__ == "__main__":
    main()
