"""kcp server benchmark: event throughput without silent loss, and reconnect-to-caught-up time.

Runs the real server (``python -m asyncai_servers.kcp``) over stdio with the fake kubectl
(``tests/bin/kubectl``) and a watching MCP client that re-reads on every notification:

1. throughput: N watch events appended at once to the fake kubectl's control file flow
   kubectl -> server ring (256) -> notification -> read. Every event is either delivered
   or reported in a GAP (seq jump); "silently lost" must be 0.
2. resume: with 1,000 objects, the stream drops and 100 change; the time from the drop to the
   client having read all 100 MODIFIED events, replayed by a watch from the last resourceVersion
   (no re-list).
3. re-list: the same, but the history of those changes is gone (compacted): the resumed watch
   gets 410 Expired and the server re-lists; until the client read the 100 synthetic MODIFIED.

``python bench/kcp.py [--quick]``; prints each figure beside its baseline and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from fake_kubectl import FakeCluster  # noqa: E402
from kcp_helpers import FAKE_KUBECTL, kcp_env, watch_starts, write_kubeconfig  # noqa: E402

URI = "kcp-events://watch/root:app/configmaps?namespace=default"
BASELINE_EVENTS_PER_S = 500.0  # a busy namespace's kubectl -w; the server must keep up with it
BASELINE_RECONNECT_S = 2.0  # client-go's first backoff step (0.8 s) plus a re-list, rounded up


def _obj(name: str, rv: int, v: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": str(rv)},
        "data": {"v": v},
    }


async def _session(tmp: Path, cluster: FakeCluster, starts: Any) -> Client:
    kc = write_kubeconfig(tmp / "kc.json", "https://kcp.test:6443")
    env = {**kcp_env(cluster, tmp), "FAKE_KUBECTL_NOTIFY": starts.path}
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "asyncai_servers.kcp",
            "--kubectl",
            FAKE_KUBECTL,
            "--kubeconfig",
            str(kc),
            "--backoff",
            "0:0",
        ],
        env=env,
        cwd=str(ROOT),
    )
    return Client(params)


async def throughput(n: int) -> tuple[float, int, int, int]:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        cluster = FakeCluster(tmp / "cluster")
        async with (
            watch_starts() as starts,
            await _session(tmp, cluster, starts) as client,
            client.listen(resource_subscriptions=[URI]) as sub,
        ):
            await client.read_resource(URI)
            await starts.next()
            lines = "".join(
                json.dumps(
                    {
                        "workspace": "root:app",
                        "resource": "configmaps",
                        "event": {"type": "ADDED", "object": _obj(f"o{i}", 1000 + i, "x")},
                    }
                )
                + "\n"
                for i in range(n)
            )
            t0 = time.perf_counter()
            with cluster.events_file.open("a") as f:
                f.write(lines)
            last, delivered, missed = 0, 0, 0
            with anyio.fail_after(120):
                while last < n:
                    await sub.__anext__()
                    body = json.loads((await client.read_resource(URI)).contents[0].text)  # type: ignore[union-attr]
                    new = [e for e in body["events"] if e["seq"] > last]
                    if new and new[0]["seq"] > last + 1:
                        missed += new[0]["seq"] - last - 1  # reported as a GAP by the reader
                    delivered += len(new)
                    if new:
                        last = new[-1]["seq"]
            elapsed = time.perf_counter() - t0
        return n / elapsed, delivered, missed, n - delivered - missed


async def reconnect(objects: int, changes: int, *, compacted: bool) -> float:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        cluster = FakeCluster(tmp / "cluster")
        data = cluster.load()
        data["workspaces"]["root:app"]["configmaps"] = [_obj(f"o{i}", 10 + i, "0") for i in range(objects)]
        cluster._save(data)
        async with (
            watch_starts() as starts,
            await _session(tmp, cluster, starts) as client,
            client.listen(resource_subscriptions=[URI]) as sub,
        ):
            await client.read_resource(URI)
            await starts.next()
            data = cluster.load()
            base = data["rv"] + 1
            changed = [_obj(f"o{i}", base + i, uuid.uuid4().hex) for i in range(changes)]
            t0 = time.perf_counter()
            cluster.drop_streams(0)
            if compacted:
                for i, obj in enumerate(changed):
                    data["workspaces"]["root:app"]["configmaps"][i] = obj
                data["rv"] = data["compacted"] = base + changes  # changed with no history: 410, re-list
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
            seen = 0
            with anyio.fail_after(60):
                while seen < changes:
                    await sub.__anext__()
                    body = json.loads((await client.read_resource(URI)).contents[0].text)  # type: ignore[union-attr]
                    seen = sum(1 for e in body["events"] if e["type"] == "MODIFIED")
            return time.perf_counter() - t0


def _row(name: str, value: float, baseline: float, unit: str, higher_is_better: bool) -> None:
    ratio = value / baseline if higher_is_better else baseline / value
    print(f"{name:<56} {value:10.2f} {unit:<9} baseline {baseline:8.2f} {unit:<9} ratio {ratio:5.2f}x")


async def main(quick: bool) -> None:
    n = 500 if quick else 2000
    rate, delivered, missed, lost = await throughput(n)
    _row(f"events/s kubectl->ring->read ({n} burst)", rate, BASELINE_EVENTS_PER_S, "events/s", True)
    print(f"{'':<56} delivered {delivered}, reported in GAPs {missed}, silently lost {lost} (must be 0)")
    objects = 200 if quick else 1000
    took = await reconnect(objects, 100, compacted=False)
    _row(f"resume to caught up ({objects} objects, 100 changed)", took, BASELINE_RECONNECT_S, "s", False)
    took = await reconnect(objects, 100, compacted=True)
    _row(f"410 re-list to caught up ({objects} objects, 100 changed)", took, BASELINE_RECONNECT_S, "s", False)
    if lost:
        raise SystemExit("silent loss detected")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    os.chdir(ROOT)
    anyio.run(main, parser.parse_args().quick)
