"""Server-side subscriptions: memory per subscribed URI, and what one change costs.

    python bench/subscriptions.py           # about a minute
    python bench/subscriptions.py --quick   # fewer repetitions

1. **Server RSS per subscribed URI.** memo over stdio (a real subprocess), the stock ``mcp``
   client opens ONE ``subscriptions/listen`` naming N = 10,000 and then 100,000 URIs
   (``memo://notes/k0`` ...). The server's RSS (``/proc/PID/status``) after the ack minus before
   the listen, divided by N; the listen is checked to deliver a change. Baseline, same run: the same
   listen served by the SDK's own ``ListenHandler`` (``bench/_sdk_memo.py``).
2. **Publish cost with 1 vs 10,000 unrelated subscriptions**, in process:
   ``SubscriptionRegistry.publish`` of a URI that has one listener, when nothing else is subscribed
   (the baseline) and when 10,000 other listeners hold one other URI each: time per publish (the
   median of interleaved rounds, so machine noise hits both alike), and listener invocations per
   publish (the structural figure: it must stay 1). Also shown: the SDK's
   ``InMemorySubscriptionBus`` with ``ListenHandler``'s per-listen matching, same two cases (its
   cost grows with every open listen).
3. **Change -> notification over stdio** (p50): two memo processes, one whose listen holds the
   changed URI alone (baseline) and one whose listen holds it with 10,000 other URIs; ``memo_set``
   alternates between them, each timed to its stamped ``notifications/resources/updated``.

Targets: memory <= 400 B per URI at 100,000; publish with 10,000 unrelated subscriptions <= 1.5x
the publish with none, 1 listener invocation; the stdio p50 with 10,000 others <= 1.5x alone.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.shared.subscriptions import ResourceUpdated, ServerEvent, event_matches
from mcp_types import SubscriptionFilter

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parent.parent))

from _memo import pct, row

from asyncai_watch.server import SubscriptionRegistry
from tests.support.procfs import child_pid

HERE = Path(__file__).resolve().parent
MEMO = [sys.executable, "-m", "asyncai_servers.memo"]
SDK_MEMO = [sys.executable, str(HERE / "_sdk_memo.py")]


def rss_kib(pid: int) -> int:
    match = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
    assert match is not None
    return int(match.group(1))


@asynccontextmanager
async def stdio_client(argv: list[str], marker: str) -> AsyncIterator[tuple[Client, int]]:
    async with Client(StdioServerParameters(command=argv[0], args=argv[1:]), cache=None) as client:
        yield client, child_pid(marker)


# -- 1. memory ------------------------------------------------------------------------------------


async def bytes_per_uri(argv: list[str], marker: str, n: int) -> float:
    uris = [f"memo://notes/k{i}" for i in range(n)]
    async with stdio_client(argv, marker) as (client, pid):
        await client.call_tool("memo_set", {"key": "warm", "value": 0})  # the first call's imports
        before = rss_kib(pid)
        async with client.listen(resource_subscriptions=uris) as sub:
            after = rss_kib(pid)
            await client.call_tool("memo_set", {"key": f"k{n - 1}", "value": 1})
            with anyio.fail_after(60):
                event = await sub.__anext__()
            assert event == ResourceUpdated(uri=f"memo://notes/k{n - 1}"), event
    return (after - before) * 1024 / n


# -- 2. publish, in process -----------------------------------------------------------------------


class Counting:
    """A listener that only counts (what a stream's deliver costs is not the index's)."""

    def __init__(self) -> None:
        self.calls = 0

    def deliver(self, event: ServerEvent) -> None:
        self.calls += 1


@contextmanager
def registry_with(unrelated: int) -> Iterator[tuple[SubscriptionRegistry, list[Counting]]]:
    """A registry where ``memo://notes/target`` has one listener and ``unrelated`` others hold one URI each."""
    registry = SubscriptionRegistry("bench")
    listeners = [Counting() for _ in range(unrelated + 1)]
    with ExitStack() as stack:
        stack.enter_context(registry.attach(listeners[0], ["memo://notes/target"]))
        for i, other in enumerate(listeners[1:]):
            stack.enter_context(registry.attach(other, [f"memo://notes/o{i}"]))
        yield registry, listeners


async def ours(rounds: int, per_round: int) -> tuple[float, float, float, float]:
    """Seconds per publish alone and with 10,000 unrelated subscriptions (medians of interleaved
    rounds, so machine noise hits both alike), and listener invocations per publish in each."""
    with registry_with(0) as (alone, alone_listeners), registry_with(10_000) as (crowded, crowded_listeners):
        times: dict[str, list[float]] = {"alone": [], "crowded": []}
        for _ in range(rounds):
            for label, registry in (("alone", alone), ("crowded", crowded)):
                start = time.perf_counter()
                for _ in range(per_round):
                    await registry.publish("memo://notes/target")
                times[label].append((time.perf_counter() - start) / per_round)
        publishes = rounds * per_round
        return (
            statistics.median(times["alone"]),
            statistics.median(times["crowded"]),
            sum(c.calls for c in alone_listeners) / publishes,
            sum(c.calls for c in crowded_listeners) / publishes,
        )


async def sdk(unrelated: int, publishes: int) -> tuple[float, float]:
    """The same with the SDK's bus: one closure per open listen, matching as ``ListenHandler`` does."""
    bus = InMemorySubscriptionBus()
    calls = [0]

    def listen(uri: str) -> Callable[[ServerEvent], None]:
        honored = SubscriptionFilter(resource_subscriptions=[uri])
        uris = frozenset([uri])

        def deliver(event: ServerEvent) -> None:
            calls[0] += 1
            if event_matches(honored, uris, event):
                pass

        return deliver

    bus.subscribe(listen("memo://notes/target"))
    for i in range(unrelated):
        bus.subscribe(listen(f"memo://notes/o{i}"))
    start = time.perf_counter()
    for _ in range(publishes):
        await bus.publish(ResourceUpdated(uri="memo://notes/target"))
    return (time.perf_counter() - start) / publishes, calls[0] / publishes


# -- 3. end to end --------------------------------------------------------------------------------


async def change_p50s(changes: int) -> tuple[float, float]:
    """p50 of memo_set -> update on two memo processes, one listen holding the URI alone and one
    holding it with 10,000 others; the changes alternate between them (noise hits both alike)."""
    crowd = [f"memo://notes/o{i}" for i in range(10_000)]
    params = StdioServerParameters(command=MEMO[0], args=MEMO[1:])
    async with (
        Client(params, cache=None) as alone,
        Client(params, cache=None) as crowded,
        alone.listen(resource_subscriptions=["memo://notes/target"]) as alone_sub,
        crowded.listen(resource_subscriptions=["memo://notes/target", *crowd]) as crowded_sub,
    ):
        latencies: dict[str, list[float]] = {"alone": [], "crowded": []}
        for i in range(changes):
            for label, client, sub in (("alone", alone, alone_sub), ("crowded", crowded, crowded_sub)):
                start = time.perf_counter()
                await client.call_tool("memo_set", {"key": "target", "value": i})
                with anyio.fail_after(30):
                    event = await sub.__anext__()
                latencies[label].append(time.perf_counter() - start)
                assert event == ResourceUpdated(uri="memo://notes/target"), event
    return pct(latencies["alone"], 50), pct(latencies["crowded"], 50)


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} cores"


async def main(quick: bool) -> None:
    print(f"bench/subscriptions.py: {load()}", flush=True)
    print("1. server RSS per subscribed URI (memo over stdio, one listen)", flush=True)
    for n in (10_000, 100_000):
        value = await bytes_per_uri(MEMO, "asyncai_servers.memo", n)
        baseline = await bytes_per_uri(SDK_MEMO, "_sdk_memo.py", n)
        target = "target <= 400 B: " + ("met" if value <= 400 or n < 100_000 else "MISSED")
        row(f"{n:,} URIs: bytes per URI (SDK baseline)", value, baseline, "B", target if n == 100_000 else "")

    print("2. publish of a URI with 1 listener, in process", flush=True)
    rounds, per_round = (20, 500) if quick else (40, 2_000)
    alone, crowded, alone_calls, crowded_calls = await ours(rounds, per_round)
    ratio = crowded / alone
    row("ours: 10,000 unrelated (vs none) us", crowded * 1e6, alone * 1e6, "us")
    print(
        f"    ratio {ratio:.2f} (target <= 1.5: {'met' if ratio <= 1.5 else 'MISSED'}); listener invocations "
        f"per publish: {alone_calls:g} alone, {crowded_calls:g} with 10,000 others (target 1)",
        flush=True,
    )
    sdk_alone, sdk_alone_calls = await sdk(0, rounds * per_round)
    sdk_crowded, sdk_crowded_calls = await sdk(10_000, 50)
    row("SDK bus: 10,000 unrelated (vs none) us", sdk_crowded * 1e6, sdk_alone * 1e6, "us")
    print(
        f"    SDK listener invocations per publish: {sdk_alone_calls:g} alone, {sdk_crowded_calls:g} with "
        f"10,000 others; ours is {sdk_crowded / crowded:.0f}x cheaper with 10,000",
        flush=True,
    )

    print("3. memo_set -> notifications/resources/updated over stdio, p50", flush=True)
    alone_p50, crowded_p50 = await change_p50s(100 if quick else 400)
    ratio = crowded_p50 / alone_p50
    row("10,000 other URIs in the listen (vs alone)", crowded_p50 * 1e3, alone_p50 * 1e3, "ms")
    print(f"    ratio {ratio:.2f} (target <= 1.5: {'met' if ratio <= 1.5 else 'MISSED'})", flush=True)
    print(f"  {load()}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    anyio.run(main, parser.parse_args().quick)
