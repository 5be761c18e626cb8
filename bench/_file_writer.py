"""A writer of files in its own process: what changes a watched directory in real life.

    python bench/_file_writer.py

Prints ``ready``, then reads ``PATH TEXT`` lines on stdin; for each it writes TEXT to PATH
(in place, one write) and answers the ``time.monotonic()`` taken just before the write
(CLOCK_MONOTONIC is one clock for every process on the machine).
"""

from __future__ import annotations

import sys
import time


def main() -> None:
    print("ready", flush=True)
    for raw in sys.stdin:
        path, _, text = raw.rstrip("\n").partition(" ")
        t0 = time.monotonic()
        with open(path, "w") as f:
            f.write(text)
        print(repr(t0), flush=True)


if __name__ == "__main__":
    main()
