"""Agent core: notice-to-turn latency and model runs saved by coalescing.

    python bench/agent.py          # 2000 notices, bursts of 50
    python bench/agent.py --quick  # 200 notices, bursts of 20

Figures (in process, the orchestrator and runtime only; the model is a stand-in that
answers at once, or holds a run open until the burst has arrived):

- notice -> run start latency p50 / p99, one notice at a time, vs. a polling agent that
  checks every 1 s (expected wait 0.5 s, worst 1 s);
- model runs for a burst of N notices arriving during one run: coalesced (1 + 1) vs. one
  turn per notice (1 + N).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import anyio

from asyncai_agent.events import AgentEvent, NoticeReceived, RunCompleted, RunStarted
from asyncai_agent.orchestrator import Orchestrator
from asyncai_agent.runtime import Run
from asyncai_agent.thread import Message
from asyncai_watch.core.notice import SOURCE_WATCH, Notice

POLL_INTERVAL = 1.0


class Quiet:
    @property
    def name(self) -> str:
        return "bench"

    async def send(self, text: str) -> None:
        return None


def notice(i: int) -> Notice:
    return Notice(SOURCE_WATCH, f"MODIFIED item-{i}", meta={"name": "bench", "uri": "memo://notes"})


async def latency(n: int) -> list[float]:
    async def answer(run: Run, thread: list[Message], emit: Callable[[AgentEvent], None]) -> str:
        thread.clear()  # keep the thread small: this measures the core, not list growth
        return "NO_REPLY"

    out: list[float] = []
    async with Orchestrator(answer, default_channel=Quiet()) as orch:
        events = orch.subscribe()
        for i in range(n):
            t0 = time.perf_counter()
            await orch.notice_tx.send(notice(i))
            async for e in events:
                if isinstance(e, RunStarted):
                    out.append(time.perf_counter() - t0)
                if isinstance(e, RunCompleted):
                    break
    return out


async def burst_runs(burst: int) -> int:
    gate = anyio.Event()
    started = anyio.Event()

    async def held(run: Run, thread: list[Message], emit: Callable[[AgentEvent], None]) -> str:
        if run.id == 1:
            started.set()
            await gate.wait()
        return "NO_REPLY"

    async with Orchestrator(held, default_channel=Quiet()) as orch:
        events = orch.subscribe()
        orch.submit("watch it", Quiet())
        await started.wait()
        for i in range(burst):
            await orch.notice_tx.send(notice(i))
        taken = 0
        async for e in events:  # every notice is in the inbox before the run is released
            taken += isinstance(e, NoticeReceived)
            if taken == burst:
                break
        gate.set()
        await orch.wait_idle()
        return orch.runtime.runs_started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n, burst = (200, 20) if args.quick else (2000, 50)
    lat = anyio.run(latency, n)
    p50 = statistics.median(lat)
    p99 = sorted(lat)[int(len(lat) * 0.99) - 1]
    runs = anyio.run(burst_runs, burst)
    print(f"notices: {n}, burst: {burst}")
    print(
        f"notice -> run start p50: {p50 * 1e3:.3f} ms   baseline (poll every {POLL_INTERVAL:g} s): "
        f"{POLL_INTERVAL / 2 * 1e3:.0f} ms   ratio {p50 / (POLL_INTERVAL / 2):.5f}"
    )
    print(
        f"notice -> run start p99: {p99 * 1e3:.3f} ms   baseline: {POLL_INTERVAL * 1e3:.0f} ms   "
        f"ratio {p99 / POLL_INTERVAL:.5f}"
    )
    print(
        f"model runs for a burst of {burst} during one run: {runs}   baseline (one turn per notice): "
        f"{1 + burst}   ratio {runs / (1 + burst):.3f}"
    )


if __name__ == "__main__":
    main()
