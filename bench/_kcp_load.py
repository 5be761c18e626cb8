"""Load generator for bench/kcp.py: changes to a fake cluster at a fixed rate, from its own process.

``python bench/_kcp_load.py CLUSTER_DIR RATE SECONDS`` modifies the cluster's configmaps
round-robin, RATE changes per second for SECONDS: each change is appended to the fake API
server's history (``events.ndjson``, which every fake ``kubectl`` watch tails) and the
cluster file is rewritten 10 times a second, so a polling ``kubectl get`` sees the state.
The lines are built before the clock starts; the pacing writes what is due every 5 ms
(a fixed-rate load, the thing being measured, not a wait for a condition). It prints one
JSON line: ``{"start": t, "end": t, "changes": n}`` on ``time.monotonic()`` (system-wide on
Linux, so the bench compares it with its own readings).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

TICK = 0.005
SAVE_EVERY = 0.1


def _changed(obj: dict[str, Any], rv: int, n: int) -> dict[str, Any]:
    meta = {**obj["metadata"], "resourceVersion": str(rv)}
    return {**obj, "metadata": meta, "data": {**obj["data"], "counter": str(n), "rv": str(rv)}}


def main(cluster_dir: str, rate: float, seconds: float) -> None:
    root = Path(cluster_dir)
    cluster_file, events_file = root / "cluster.json", root / "events.ndjson"
    data = json.loads(cluster_file.read_text())
    objs: list[dict[str, Any]] = data["workspaces"]["root:app"]["configmaps"]
    total = int(rate * seconds)
    rv = int(data["rv"])
    lines: list[bytes] = []
    states: list[tuple[int, dict[str, Any]]] = []  # (index, new object) per change
    for n in range(total):
        i = n % len(objs)
        rv += 1
        new = _changed(objs[i], rv, n)
        line = {
            "workspace": "root:app",
            "resource": "configmaps",
            "event": {"type": "MODIFIED", "object": new},
        }
        lines.append(msgspec.json.encode(line) + b"\n")
        states.append((i, new))
        objs[i] = new
    objs[:] = json.loads(cluster_file.read_text())["workspaces"]["root:app"]["configmaps"]

    def save(upto: int) -> None:
        data["rv"] = int(data["rv"]) if upto == 0 else int(states[upto - 1][1]["metadata"]["resourceVersion"])
        tmp = cluster_file.with_suffix(".tmp")
        tmp.write_bytes(msgspec.json.encode(data))
        tmp.replace(cluster_file)

    written = applied = 0
    start = time.monotonic()
    next_save = start + SAVE_EVERY
    with events_file.open("ab", buffering=0) as out:
        while written < total:
            now = time.monotonic()
            due = min(total, int((now - start) * rate) + 1)
            if due > written:
                out.write(b"".join(lines[written:due]))
                written = due
            if now >= next_save or written == total:
                for i, new in states[applied:written]:
                    objs[i] = new
                applied = written
                save(written)
                next_save += SAVE_EVERY
            time.sleep(max(0.0, start + (written / rate) + TICK - time.monotonic()))
    end = time.monotonic()
    print(json.dumps({"start": start, "end": end, "changes": total}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]))
