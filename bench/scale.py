"""Scale: N watches on N distinct URIs of one server, this tree beside the one before it.

    python bench/scale.py            # N = 1, 100, 1,000, 10,000 (memo and files)
    python bench/scale.py --quick    # N = 1, 100, 1,000

Each measurement runs in its own process (bench/_scale_client.py) against one server over stdio:
memo (``memo://notes/kI``; a writer in another process changes one key over HTTP) and the files
server (``file://ROOT/fI.txt``; a writer process rewrites one file). Per N it prints:
``watch_start``/s one after another (what a model does) and 256 at a time (a batch, a restore),
client and server RSS per watch, the listens the client holds open, change -> notice p50, and the
CPU both processes used over 10 idle seconds; for the files server also its inotify instances and
the watches in them (one instance with one watch, the directory, however many files).

Baseline, measured in the same run: the same client script against the tree before this change
(``--baseline-ref``, default the commit before subscriptions were grouped per connection), checked
out into a temporary worktree; it stops at the first N it cannot start.

Targets (issue 20): 10,000 watches work; ``watch_start`` >= 2,000/s; <= 10 KiB client memory per
watch; notice p50 at 10,000 <= 1.5x the p50 at 1; idle CPU 0; a handful of listens, not N.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BASELINE_REF = "a61b4b9"  # the last commit with one subscriptions/listen per watched URI
CHANGES = {1: 40, 100: 40, 1000: 40, 10_000: 40}


@contextmanager
def tree(ref: str | None) -> Iterator[Path | None]:
    """``ref`` checked out in a temporary worktree (``None``: this tree), removed afterwards."""
    if ref is None:
        yield ROOT
        return
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp) / "tree"
        made = subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(where), ref],
            capture_output=True,
            text=True,
        )
        if made.returncode != 0:
            print(f"  (no baseline: git worktree add {ref} failed: {made.stderr.strip()[:200]})")
            yield None
            return
        try:
            yield where
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(where)], check=False)


def measure(where: Path, kind: str, n: int, burst: bool) -> dict[str, Any]:
    """One run of the client script with ``where``'s packages first on the path."""
    env = {**os.environ, "PYTHONPATH": str(where)}
    argv = [sys.executable, str(HERE / "_scale_client.py"), kind, str(n), str(CHANGES[n])]
    # Run in ``where``: the server starts as ``python -m``, which puts the working directory
    # first on its path, so from this checkout it would run this tree's server, not ``where``'s.
    done = subprocess.run(
        [*argv, *(["burst"] if burst else [])], env=env, capture_output=True, text=True, cwd=where
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"n": n, "error": (done.stderr.strip().splitlines() or ["no output"])[-1][:300]}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def p50(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def line(label: str, result: dict[str, Any], burst_rate: float | None) -> str:
    if "error" in result or "failed_at" in result:
        where = f" at watch {result['failed_at']:,}" if "failed_at" in result else ""
        return f"  {label:<10} FAILED{where}: {result.get('error', '')}"
    lat = result["latencies_ms"]
    instances = result.get("server_inotify")
    inotify = f"  inotify: {len(instances)} instance(s), {sum(instances)} watch(es)" if instances else ""
    burst = f"{burst_rate:8.0f}" if burst_rate is not None else "       -"
    return (
        f"  {label:<10} {result['starts_per_s']:8.0f} {burst}  {result['client_kib_per_watch']:8.2f}"
        f" {result['server_kib_per_watch']:8.2f}  {result['listens']!s:>7}  {p50(lat):8.2f}"
        f"  {result['idle_cpu_client_s']:6.2f} {result['idle_cpu_server_s']:6.2f}{inotify}"
    )


def main(quick: bool, baseline_ref: str) -> int:
    sizes = [1, 100, 1000] if quick else [1, 100, 1000, 10_000]
    print(f"scale: N watches on N URIs of one server over stdio (load {os.getloadavg()[0]:.1f})")
    header = (
        "  tree       starts/s  burst/s  client    server    listens  p50 ms   idle CPU s\n"
        "             one by one 256 at once KiB/watch KiB/watch              client server"
    )
    figures: dict[tuple[str, str, int], dict[str, Any]] = {}
    with tree(baseline_ref) as before:
        for kind in ("memo", "files"):
            for n in sizes:
                print(f"\n{kind}, N = {n:,}\n{header}")
                for label, where in (("this", ROOT), ("before", before)):
                    if where is None:
                        continue
                    if label == "before" and figures.get(("before", kind, -1)):
                        print(f"  {label:<10} not run: it failed at a smaller N")
                        continue
                    one = measure(where, kind, n, burst=False) if n <= 1000 or label == "this" else {}
                    burst = measure(where, kind, n, burst=True)
                    shown = one if one and "starts_per_s" in one else burst
                    rate = burst.get("starts_per_s")
                    print(line(label, shown, rate), flush=True)
                    figures[(label, kind, n)] = shown
                    if "starts_per_s" not in shown:
                        figures[(label, kind, -1)] = shown
    for kind in ("memo", "files"):
        this1, this_top = figures.get(("this", kind, 1)), figures.get(("this", kind, sizes[-1]))
        if this1 and this_top and "latencies_ms" in this1 and "latencies_ms" in this_top:
            ratio = p50(this_top["latencies_ms"]) / p50(this1["latencies_ms"])
            print(f"\n{kind} notice p50 at N = {sizes[-1]:,} / at N = 1: {ratio:.2f}x (target <= 1.5x)")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="N up to 1,000 only")
    parser.add_argument("--baseline-ref", default=BASELINE_REF, help="the git ref to compare with")
    args = parser.parse_args()
    raise SystemExit(main(args.quick, args.baseline_ref))
