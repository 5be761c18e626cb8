"""The pure feed's CPU per watch lifecycle, against the feed before its sub-machines (same run).

    python bench/feed.py            # 20,000 lifecycles per repeat, 5 repeats, 3 populations
    python bench/feed.py --quick    # 2,000 lifecycles, 3 repeats

One lifecycle, on a :class:`~asyncai_watch.core.feed.Feed` that already holds ``standing`` other
watches (0, 100, 1,000): a watch joins (its listen is sent and acknowledged, its baseline read),
two updates are each read and delivered, and it leaves; every action is carried out at once by a
synchronous driver (a listen sent and acknowledged, a read done), so only the feed's own code is
timed (``time.process_time``, best of the repeats, repeats interleaved with the baseline's).

Baseline: ``core/feed.py`` as it was before it became a coordinator over ``reads``, ``coverage``,
``watched`` and ``resubscribe`` (commit 4f0b0de's parent, one self-contained module with six
flags per URI), loaded from git history; without the history (a shallow clone) the bench says so
and exits 0. No target is set: the named states cost calls, and the ratio shows how many (about
1.35 when the coordinator landed, 1.1-1.2 since; docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from asyncai_watch.core import feed as current  # noqa: E402

BASELINE_COMMIT = "4f0b0de^"


def baseline_module(tmp: Path) -> ModuleType | None:
    """The pre-split feed from git history, or ``None`` when the history is not there."""
    got = subprocess.run(
        ["git", "show", f"{BASELINE_COMMIT}:asyncai_watch/core/feed.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if got.returncode != 0:
        return None
    path = tmp / "feed_before_split.py"
    path.write_text(got.stdout)
    spec = importlib.util.spec_from_file_location("feed_before_split", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # attrs resolves the module's annotations through it
    spec.loader.exec_module(module)
    return module


def lifecycles(module: ModuleType, n: int, standing: int, *, payload: bool) -> float:
    """CPU µs per lifecycle (see the module docstring)."""
    feed: Any = module.Feed()
    open_listen, read = module.OpenListen, module.Read
    queue: deque[Any] = deque()
    now = 0.0

    def drain(actions: list[Any]) -> None:
        queue.extend(actions)
        while queue:
            action = queue.popleft()
            kind = type(action)
            if kind is open_listen:
                feed.send(action.id)
                queue.extend(feed.acked(action.id, None, now))
            elif kind is read:
                done = feed.read_done(action.uri, now, 1) if payload else feed.read_done(action.uri, now)
                queue.extend(done)

    for i in range(standing):
        drain(feed.watch(f"memo://standing/{i}", ("standing", i), now))
    start = time.process_time()
    for i in range(n):
        uri, watcher = f"memo://notes/{i}", ("w", i)
        drain(feed.watch(uri, watcher, now))
        drain(feed.updated(uri, now))
        drain(feed.updated(uri, now))
        drain(feed.unwatch(uri, watcher, now))
    return (time.process_time() - start) / n * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    n, repeats = (2_000, 3) if args.quick else (20_000, 5)
    with tempfile.TemporaryDirectory() as tmp:
        before = baseline_module(Path(tmp))
        if before is None:
            print(f"feed: skipped, git history without {BASELINE_COMMIT} (the baseline) here")
            return 0
        print(f"feed: CPU per watch lifecycle, best of {repeats} x {n:,} (baseline: {BASELINE_COMMIT})")
        print(f"{'standing watches':>17} | {'coordinator':>11} | {'baseline':>8} | ratio")
        for standing in (0, 100, 1_000):
            ours, base = [], []
            for _ in range(repeats):
                base.append(lifecycles(before, n, standing, payload=False))
                ours.append(lifecycles(current, n, standing, payload=True))
            ratio = min(ours) / min(base)
            print(f"{standing:>17,} | {min(ours):>8.1f} µs | {min(base):>5.1f} µs | {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
