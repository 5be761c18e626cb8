"""Benchmark: the cost of resuming (``--watch-state``) on one busy event-log watch.

    python bench/resume.py            # 200 reads of 100 events (20,000 events) each way
    python bench/resume.py --quick    # 50 reads, for CI smoke

One watch on an in-memory event log (:class:`asyncai_watch.testing.FakeSource`), fed reads of
100 new events (``Limits.events_per_update``), each waited for as its notice, which the agent
then takes (``notice_taken``). The debounce is off, so every read is a notice: the worst case for
the store, one commit when the notice is handed (its checkpoint and the outbox row) and one
when it is taken. A real watch at 10,000 events/s sends a notice per debounce (3 to 15 s), so
its store costs far less. Measured the same way, in the same run, without a state file
(the baseline) and with one; the figure is events/s with it, the target 10,000 events/s.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio

from asyncai_watch.core.events import EVENTS_MIME_TYPE
from asyncai_watch.core.limits import Limits
from asyncai_watch.runtime.manager import WatchManager
from asyncai_watch.testing import FakeClock, FakeSource, ListedResource

TARGET = 10_000.0  # events/s on one watch
BATCH = 100
RING = 2 * BATCH
LOG = "kcp://pods"


def body(last: int) -> dict[str, Any]:
    first = max(1, last - RING + 1)
    return {
        "log_id": "L1",
        "events": [
            {"seq": s, "type": "ADDED", "object": {"metadata": {"name": f"pod-{s}", "uid": f"u{s}"}}}
            for s in range(first, last + 1)
        ],
    }


async def one_run(reads: int, state: Path | None) -> float:
    """Events per second through one watch, ``reads`` reads of :data:`BATCH` events."""
    fake = FakeSource(
        "kcp", resources=[ListedResource(uri=LOG, name="pods", description="", mime_type=EVENTS_MIME_TYPE)]
    )
    fake.set(LOG, body(BATCH), mime_type=EVENTS_MIME_TYPE)
    limits = Limits(debounce_quiet=0, debounce_max_wait=0)
    # Bodies made before timing: the loop only hands them over.
    bodies = [body(BATCH * (i + 2)) for i in range(reads)]
    async with WatchManager([fake], limits=limits, clock=FakeClock(), watch_state=state) as m:
        await m.watch_start("pods", LOG)
        start = time.perf_counter()
        for b in bodies:
            fake.set(LOG, b, mime_type=EVENTS_MIME_TYPE)
            fake.push(LOG)
            notice = await m.notices.receive()
            m.notice_taken(notice)
        elapsed = time.perf_counter() - start
    return reads * BATCH / elapsed


async def main_async(reads: int, repeats: int) -> None:
    without: list[float] = []
    with_state: list[float] = []
    for _ in range(repeats):
        without.append(await one_run(reads, None))
        with tempfile.TemporaryDirectory() as d:
            state = Path(d) / "state.json"
            state.write_text('{"version": 2, "watches": []}')
            with_state.append(await one_run(reads, state))
    best_without, best_with = max(without), max(with_state)
    print(
        f"resume: one event-log watch, {reads} reads of {BATCH} events, a notice per read, best of {repeats}"
    )
    print(f"  without --watch-state (baseline): {best_without:,.0f} events/s")
    print(
        f"  with --watch-state:               {best_with:,.0f} events/s "
        f"(target {TARGET:,.0f}: {'met' if best_with >= TARGET else 'MISSED'})"
    )
    print(f"  ratio with/without: {best_with / best_without:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a smaller run (CI smoke)")
    args, _ = parser.parse_known_args()
    anyio.run(main_async, 50 if args.quick else 200, 2 if args.quick else 3)


if __name__ == "__main__":
    main()
