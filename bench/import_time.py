"""``import asyncai_watch`` costs at most 50 ms more than ``import mcp``.

    python bench/import_time.py          # 15 fresh interpreters per import
    python bench/import_time.py --quick  # 5

Each import is timed inside a fresh interpreter (``time.perf_counter`` around the import
statement: interpreter start-up is left out), the imports interleaved so that a busy machine
slows them alike; the figure is the median. ``import mcp``, the SDK the library is built on, is
the baseline measured in the same run.

Before the package root was made lazy, ``import asyncai_watch`` loaded the whole library and the
SDK with it: 1.09-1.22 s against 0.88-1.02 s for ``import mcp``. Also shown: importing what a
program that watches needs (``WatchManager``, ``McpResourceSource``), and the pure core, which
loads no SDK at all.

Target: ``import asyncai_watch`` within 50 ms of ``import mcp``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMPORTS = {
    "import mcp (baseline)": "import mcp",
    "import asyncai_watch": "import asyncai_watch",
    "from asyncai_watch import WatchManager, McpResourceSource": (
        "from asyncai_watch import WatchManager, McpResourceSource"
    ),
    "import asyncai_watch.core.feed": "import asyncai_watch.core.feed",
}
TIMED = "import time\nstart = time.perf_counter()\n{statement}\nprint(time.perf_counter() - start)\n"
TARGET_MS = 50.0


def timed(statement: str) -> float:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", TIMED.format(statement=statement)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("-n", type=int, default=15, help="fresh interpreters per import (default 15)")
    parser.add_argument("--quick", action="store_true", help="5 interpreters per import")
    args = parser.parse_args()
    if args.quick:
        args.n = 5
    samples: dict[str, list[float]] = {label: [] for label in IMPORTS}
    for statement in IMPORTS.values():
        timed(statement)  # warm the file caches (and .pyc files) first
    for _ in range(args.n):
        for label, statement in IMPORTS.items():
            samples[label].append(timed(statement))
    medians = {label: statistics.median(values) for label, values in samples.items()}
    baseline = medians["import mcp (baseline)"]
    print(
        f"import time, median of {args.n} fresh interpreters (target: import asyncai_watch <= mcp + {TARGET_MS:g} ms)"
    )
    for label, median in medians.items():
        spread = f"{min(samples[label]):7.1f}-{max(samples[label]):.1f}"
        print(
            f"  {label:<58} {median:8.1f} ms   ({spread} ms)   "
            f"{median - baseline:+8.1f} ms vs mcp   {median / baseline:5.2f}x",
            flush=True,
        )
    difference = medians["import asyncai_watch"] - baseline
    print(
        f"  import asyncai_watch - import mcp: {difference:+.1f} ms: {'ok' if difference <= TARGET_MS else 'MISSED'}"
    )
    print(f"  load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
