"""kcp server benchmark, as a user of the library sees it: every figure goes through ``WatchManager``.

The real server (``python -m asyncai_servers.kcp``) runs over stdio with the fake kubectl
(``tests/support/bin/kubectl``: kubectl's output format, tailing the fake API server's history with
inotify); a ``WatchManager`` watches ``kcp-events://watch/root:app/configmaps?namespace=default``
and the bench reads ``m.notices`` as an agent would. Limits: ``debounce_quiet=0`` and
``debounce_max_wait=0`` (a notice as soon as a read's lines are in; no debounce merges lines),
``events_per_update=1_000_000`` (no per-read cap turns a burst into a GAP) and
``lines_per_notice=1_000_000`` (no ``+N more`` hides a line), so every delivered event is one
notice line. Delivered events are counted from those lines (cross-checked with ``watch_list()``'s
event count), and events reported missed from the ``GAP: missed N events`` lines, separately.

1. sustained throughput: a load generator in its own process (``bench/_kcp_load.py``) modifies
   500 configmaps round-robin at a fixed rate (2k, 5k, 10k, 20k changes/s) for several seconds.
   Figures: delivered events/s (delivered, over the time from the first change to the notice with
   the last one), events reported in GAPs, events neither delivered nor reported 30 s after the
   load ended (silently lost, or still queued that long: must be 0), the
   lag from the last change to its notice, and the CPU each process spent per change. Target:
   >= 10,000 events/s with no GAP. Baseline, measured at the same rate in the same run: a user
   without watches polling ``kubectl get configmaps -o json`` every 1 s, which sees at most one
   state per object per poll; its figure is the changes it observed per second.
2. resume: with 1,000 objects, the stream drops and 100 change; the time from the drop to the
   notice with the last of the 100 MODIFIED, replayed by a watch from the last resourceVersion
   (no re-list).
3. re-list: the same, but the history of those changes is gone (compacted): the resumed watch
   gets 410 Expired and the server re-lists; until the 100 synthetic MODIFIED were noticed.
   Baseline for 2 and 3: a 1 s ``kubectl get`` poll, the change landing at a random phase of its
   period, timed from the change to the poll that shows all 100 changes.

``python bench/kcp.py [--quick]``; prints each figure beside its baseline and the ratio, and the
load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from asyncai_watch.core.limits import Limits  # noqa: E402
from asyncai_watch.mcp.client import McpResourceSource  # noqa: E402
from asyncai_watch.runtime.manager import WatchManager  # noqa: E402
from tests.support.fake_kubectl import FakeCluster  # noqa: E402
from tests.support.kcp_helpers import FAKE_KUBECTL, kcp_argv, kcp_env, watch_starts, write_kubeconfig  # noqa: E402

URI = "kcp-events://watch/root:app/configmaps?namespace=default"
SERVER = "https://kcp.test:6443/clusters/root:app"
LOAD = str(ROOT / "bench" / "_kcp_load.py")
LIMITS = Limits(
    debounce_quiet=0.0, debounce_max_wait=0.0, events_per_update=1_000_000, lines_per_notice=1_000_000
)
OBJECTS = 500
SERVER_ARGS: list[str] = []  # --server-arg: extra server flags, to explore (e.g. --ring-events=1024)


def _obj(name: str, rv: int, v: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "resourceVersion": str(rv),
            "creationTimestamp": "2026-12-02T14:00:00Z",
            "labels": {"app": "bench", "tier": "web"},
        },
        "data": {"v": v, "config.yaml": "replicas: 3\nimage: registry.example/app:1.2.3\n"},
    }


def _seed(tmp: Path, objects: int) -> FakeCluster:
    cluster = FakeCluster(tmp / "cluster")
    data = cluster.load()
    data["workspaces"]["root:app"]["configmaps"] = [_obj(f"o{i}", 10 + i, "0") for i in range(objects)]
    data["rv"] = 10 + objects
    cluster._save(data)
    return cluster


def _source(tmp: Path, cluster: FakeCluster, notify: str) -> McpResourceSource:
    kc = write_kubeconfig(tmp / "kc.json", "https://kcp.test:6443")
    env = {**kcp_env(cluster, tmp), "FAKE_KUBECTL_NOTIFY": notify}
    return McpResourceSource.stdio(
        [sys.executable, *kcp_argv(kc, "--backoff", "0:0", *SERVER_ARGS)], name="kcp", env=env, cwd=ROOT
    )


class _Tally:
    """What the notices said: delivered event lines, GAP lines and the events they report missed."""

    def __init__(self, m: WatchManager) -> None:
        self.m = m
        self.delivered = 0
        self.modified = 0
        self.gaps = 0
        self.missed = 0
        self.notices = 0
        self.last = 0.0  # time.monotonic() of the last notice with an event line
        self.target = 0  # delivered + missed to reach, or modified lines when counting MODIFIED
        self.count_modified = False
        self.done = anyio.Event()

    def add(self, text: str) -> None:
        self.notices += 1
        for line in text.split("\n"):
            times = 1
            head, sep, n = line.rpartition(" ×")
            if sep and n.isdigit():
                line, times = head, int(n)
            if line.startswith("GAP: "):
                self.gaps += times
                words = line.split()  # "GAP: missed N events (seq a-b)"; a reset GAP gives no count
                if len(words) > 2 and words[1] == "missed" and words[2].isdigit():
                    self.missed += int(words[2]) * times
            else:
                self.delivered += times
                if line.startswith("MODIFIED "):
                    self.modified += times
                self.last = time.monotonic()
        reached = self.modified if self.count_modified else self.delivered + self.missed
        if self.target and reached >= self.target:
            self.done.set()

    async def run(self) -> None:
        async for notice in self.m.notices:
            self.add(notice.text)

    def events(self) -> int:
        """The manager's own count (``watch_list``), GAP events included."""
        return sum(w.events for w in self.m.watch_list())


def _cpu(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _descendants(pid: int) -> dict[int, str]:
    """Every descendant process of ``pid``: its command line."""
    parents: dict[int, int] = {}
    cmds: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmds[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    out: dict[int, str] = {}
    frontier = [pid]
    while frontier:
        p = frontier.pop()
        for child, parent in parents.items():
            if parent == p and child not in out:
                out[child] = cmds.get(child, "")
                frontier.append(child)
    return out


class _CpuMeter:
    """CPU used by this process (the client), the kcp server and its kubectl watch, over a window."""

    def __init__(self) -> None:
        procs = _descendants(os.getpid())
        self.pids = {
            "server": next((p for p, c in procs.items() if "asyncai_servers.kcp" in c), None),
            "kubectl": next((p for p, c in procs.items() if "watch=true" in c), None),
        }
        self.start = {name: _cpu(p) for name, p in self.pids.items() if p is not None}
        self.start["client"] = time.process_time()

    def used(self) -> dict[str, float]:
        out = {name: _cpu(p) - self.start[name] for name, p in self.pids.items() if p is not None}
        out["client"] = time.process_time() - self.start["client"]
        return out


async def _load(cluster: FakeCluster, rate: float, seconds: float) -> dict[str, float]:
    result = await anyio.run_process(
        [sys.executable, LOAD, str(cluster.root), str(rate), str(seconds)], check=True
    )
    loaded: dict[str, float] = json.loads(result.stdout)
    return loaded


async def sustained(rate: float, seconds: float) -> dict[str, Any]:
    """Delivered events/s through WatchManager at a fixed change rate."""
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        cluster = _seed(tmp, OBJECTS)
        async with watch_starts() as starts:
            source = _source(tmp, cluster, starts.path)
            async with source, WatchManager([source], limits=LIMITS) as m, anyio.create_task_group() as tg:
                tally = _Tally(m)
                tg.start_soon(tally.run)
                await m.watch_start(name="cm", uri=URI)
                await starts.next()  # kubectl's watch is streaming
                tally.target = int(rate * seconds)
                meter = _CpuMeter()
                load = await _load(cluster, rate, seconds)
                with anyio.move_on_after(
                    30 + seconds
                ):  # the drain: what is not accounted for by then is missing
                    await tally.done.wait()
                cpu = meter.used()
                events = tally.events()
                tg.cancel_scope.cancel()
    changes = int(load["changes"])
    delivered = tally.delivered
    return {
        "offered": changes / (load["end"] - load["start"]),
        "delivered": delivered,
        "per_s": delivered / (tally.last - load["start"]) if delivered else 0.0,
        "gaps": tally.gaps,
        "missed": tally.missed,
        "lost": changes - delivered - tally.missed,
        "lag": tally.last - load["end"] if delivered else float("nan"),
        "consistent": events == delivered + tally.gaps,
        "cpu_us": {name: used * 1e6 / changes for name, used in cpu.items()},
    }


async def _kubectl_get(tmp: Path, cluster: FakeCluster) -> dict[str, str]:
    """One poll: ``kubectl get configmaps -o json`` as a user's script runs it; uid -> resourceVersion."""
    kc = write_kubeconfig(tmp / "poll.json", SERVER)
    out = await anyio.run_process(
        [
            FAKE_KUBECTL,
            "--kubeconfig",
            str(kc),
            "--server",
            SERVER,
            "get",
            "configmaps",
            "-n",
            "default",
            "-o",
            "json",
        ],
        env=kcp_env(cluster, tmp),
        check=True,
    )
    return {o["metadata"]["uid"]: o["metadata"]["resourceVersion"] for o in json.loads(out.stdout)["items"]}


async def poll_baseline(rate: float, seconds: float) -> dict[str, float]:
    """Changes/s a 1 s ``kubectl get`` poll observes under the same load (one state per object per poll)."""
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        cluster = _seed(tmp, OBJECTS)
        seen = await _kubectl_get(tmp, cluster)
        observed = 0
        done = anyio.Event()

        async def run_load() -> None:
            await _load(cluster, rate, seconds)
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_load)
            t0 = time.monotonic()
            polls = 0
            while True:
                polls += 1
                now = await _kubectl_get(tmp, cluster)
                observed += sum(1 for uid, rv in now.items() if seen.get(uid) != rv)
                seen = now
                if done.is_set():
                    break
                # The baseline is a poll: it waits out its 1 s period, as a user's script would.
                await anyio.sleep(max(0.0, t0 + polls - time.monotonic()))
            elapsed = time.monotonic() - t0
    return {"observed": observed, "per_s": observed / elapsed, "polls": polls}


def _changed(data: dict[str, Any], changes: int) -> list[dict[str, Any]]:
    base = data["rv"] + 1
    return [_obj(f"o{i}", base + i, uuid.uuid4().hex) for i in range(changes)]


async def reconnect(objects: int, changes: int, *, compacted: bool) -> float:
    """Seconds from a dropped watch stream (100 changes made meanwhile) to the notice with the last one."""
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        cluster = _seed(tmp, objects)
        async with watch_starts() as starts:
            source = _source(tmp, cluster, starts.path)
            async with source, WatchManager([source], limits=LIMITS) as m, anyio.create_task_group() as tg:
                tally = _Tally(m)
                tally.count_modified, tally.target = True, changes
                tg.start_soon(tally.run)
                await m.watch_start(name="cm", uri=URI)
                await starts.next()
                data = cluster.load()
                changed = _changed(data, changes)
                t0 = time.monotonic()
                cluster.drop_streams(0)
                if compacted:
                    for i, obj in enumerate(changed):
                        data["workspaces"]["root:app"]["configmaps"][i] = obj
                    # Changed with no history: the resumed watch gets 410 and the server re-lists.
                    data["rv"] = data["compacted"] = int(changed[-1]["metadata"]["resourceVersion"])
                    cluster._save(data)
                else:
                    with cluster.events_file.open("a") as f:  # in the history: the resumed watch replays it
                        for obj in changed:
                            line = {
                                "workspace": "root:app",
                                "resource": "configmaps",
                                "event": {"type": "MODIFIED", "object": obj},
                            }
                            f.write(json.dumps(line) + "\n")
                with anyio.fail_after(60):
                    await tally.done.wait()
                took = tally.last - t0
                tg.cancel_scope.cancel()
    return took


async def poll_reconnect_baseline(objects: int, changes: int) -> float:
    """Seconds from a change of ``changes`` objects, at a random phase of a 1 s poll, to the poll showing all."""
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        cluster = _seed(tmp, objects)
        seen = await _kubectl_get(tmp, cluster)
        t_poll = time.monotonic()
        await anyio.sleep(random.random())  # the change lands at a random phase of the poll's period
        data = cluster.load()
        changed = _changed(data, changes)
        for i, obj in enumerate(changed):
            data["workspaces"]["root:app"]["configmaps"][i] = obj
        data["rv"] = int(changed[-1]["metadata"]["resourceVersion"])
        t0 = time.monotonic()
        cluster._save(data)
        wanted = {o["metadata"]["uid"]: o["metadata"]["resourceVersion"] for o in changed}
        polls = 1
        while True:
            await anyio.sleep(max(0.0, t_poll + polls - time.monotonic()))  # the poll's fixed period
            polls += 1
            seen = await _kubectl_get(tmp, cluster)
            if all(seen.get(uid) == rv for uid, rv in wanted.items()):
                return time.monotonic() - t0


def _row(name: str, value: float, baseline: float, unit: str, higher_is_better: bool) -> None:
    ratio = value / baseline if higher_is_better else baseline / value
    print(f"{name:<58} {value:10,.2f} {unit:<9} baseline {baseline:9,.2f} {unit:<9} ratio {ratio:7.2f}x")


def _load_avg() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


async def main(rates: list[float], seconds: float, trials: int, poll: bool) -> None:
    print(_load_avg(), f"({os.cpu_count()} CPUs)")
    lost_any = False
    for rate in rates:
        s = await sustained(rate, seconds)
        base = await poll_baseline(rate, seconds) if poll else {"per_s": float("nan"), "observed": 0}
        _row(
            f"delivered events/s, {rate:,.0f}/s offered for {seconds:g} s",
            s["per_s"],
            base["per_s"],
            "events/s",
            True,
        )
        cpu = ", ".join(f"{name} {us:.0f}" for name, us in s["cpu_us"].items())
        print(
            f"{'':<4}offered {s['offered']:,.0f}/s; delivered {s['delivered']:,}, reported in GAPs {s['missed']:,} "
            f"({s['gaps']} GAPs), neither after a 30 s drain {s['lost']:,} (must be 0); last notice {s['lag'] * 1000:,.0f} ms "
            f"after the last change; CPU per change (us): {cpu}; the poll saw {base['observed']:,} changes"
            + ("" if s["consistent"] else "; NOTE: watch_list's count differs from the notice lines")
        )
        lost_any |= s["lost"] != 0
    for compacted, what in ((False, "resume from the last resourceVersion"), (True, "410 Gone, re-list")):
        ours = [await reconnect(1000, 100, compacted=compacted) for _ in range(trials)]
        polled = [await poll_reconnect_baseline(1000, 100) for _ in range(trials)]
        _row(
            f"drop -> {what} -> 100 changes noticed (mean of {trials})",
            sum(ours) / trials,
            sum(polled) / trials,
            "s",
            False,
        )
    print(_load_avg())
    if lost_any:
        raise SystemExit("events neither delivered nor reported in a GAP 30 s after the load ended")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2k and 10k/s for 2 s, one reconnect trial")
    parser.add_argument("--rates", help="comma-separated change rates (default 2000,5000,10000,20000)")
    parser.add_argument("--seconds", type=float, help="seconds of load per rate (default 5)")
    parser.add_argument("--no-poll", action="store_true", help="skip the poll baselines of the rates")
    parser.add_argument("--server-arg", action="append", default=[], help="an extra kcp server flag")
    args = parser.parse_args()
    SERVER_ARGS[:] = args.server_arg
    os.chdir(ROOT)
    rates = [float(r) for r in args.rates.split(",")] if args.rates else None
    anyio.run(
        main,
        rates or ([2000, 10000] if args.quick else [2000, 5000, 10000, 20000]),
        args.seconds or (2.0 if args.quick else 5.0),
        1 if args.quick else 3,
        not args.no_poll,
    )
