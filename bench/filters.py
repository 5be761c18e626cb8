"""Filter throughput: events/s through a RestrictedPython filter in its warm worker process.

Beside it, the baseline the design rejected: a fork per event (each event runs the same
compiled filter in a freshly forked child, with the same rlimits, and sends its outcome
back over a pipe). Target: >= 10,000 events/s in batches of 100.

    python bench/filters.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from typing import Any

import anyio

from asyncai_watch import sandbox
from asyncai_watch.core.limits import Limits
from asyncai_watch.filters import EmptyCatalog, RestrictedPythonEngine

# The ADR's example filter (ADDED/DELETED of a ConfigMap -> one line, else dropped).
FILTER = """\
m = event["object"]["metadata"]
f'{event["type"].lower()} {m["namespace"]}/{m["name"]}' if event["type"] in ("ADDED", "DELETED") else None
"""
TARGET = 10_000.0
BATCH = 100


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


async def warm_worker(total: int) -> tuple[float, int]:
    engine = RestrictedPythonEngine(limits=Limits(events_per_update=BATCH))
    events = make_events(BATCH)
    kept = 0
    async with await engine.open(FILTER, catalog=EmptyCatalog()) as session:
        await session.run(events)  # warm-up: first batch pays for imports and caches
        start = time.perf_counter()
        for _ in range(total // BATCH):
            kept += sum(o.line is not None for o in await session.run(events))
        elapsed = time.perf_counter() - start
    return (total // BATCH * BATCH) / elapsed, kept


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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a short run (a few seconds)")
    args = parser.parse_args()
    warm_n, fork_n = (5_000, 100) if args.quick else (50_000, 400)

    rate, kept = anyio.run(warm_worker, warm_n)
    baseline = fork_per_event(fork_n)
    print(f"filter throughput, {warm_n} events in batches of {BATCH} ({kept} kept, the rest dropped)")
    print(f"  warm worker      {rate:10,.0f} events/s   (target >= {TARGET:,.0f})")
    print(f"  fork per event   {baseline:10,.0f} events/s   ({fork_n} events, baseline)")
    print(f"  ratio            {rate / baseline:10,.1f} x")
    print(f"  target           {'met' if rate >= TARGET else 'NOT met'}")
    sys.exit(0)


if __name__ == "__main__":
    main()
