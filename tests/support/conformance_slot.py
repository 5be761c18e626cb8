"""Start ``scripts/conformance_client.py`` once one of a few slots is free.

The conformance suite starts every client scenario of a run at once (it has no limit), and
each client is a Python process that imports the SDK: dozens of them at once on two cores
starve each other, and the SDK's fixed 10 s ``server/discover`` timeout then runs out, which
sends the client down the legacy ``initialize`` path and fails scenarios for no fault of the
client. So the command the suite runs is this launcher: it takes one of ``N`` slots (an
exclusive ``flock`` on one of ``N`` files in ``DIR``; ``ASYNCAI_CONFORMANCE_SLOTS="DIR N"``,
set by ``tests/support/conformance_runs.py``) and execs the client, which holds the lock until it exits.
Waiting for a slot blocks in the kernel; nothing polls. It imports only the standard library.

Usage (by the suite): ``python tests/support/conformance_slot.py SERVER_URL``.
"""

from __future__ import annotations

import fcntl
import os
import sys
from pathlib import Path

CLIENT = Path(__file__).resolve().parents[2] / "scripts" / "conformance_client.py"


def take_slot(directory: Path, slots: int) -> int:
    """An open file descriptor holding an exclusive lock on one of ``slots`` files in ``directory``."""
    paths = [directory / f"slot-{i}" for i in range(slots)]
    for path in paths:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return fd
    # Every slot is taken: wait on one (spread by pid) until its holder exits.
    fd = os.open(paths[os.getpid() % slots], os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def main(argv: list[str]) -> None:
    setting = os.environ.get("ASYNCAI_CONFORMANCE_SLOTS")
    if setting:
        directory, _, count = setting.rpartition(" ")
        fd = take_slot(Path(directory), int(count))
        os.set_inheritable(fd, True)  # the client keeps the slot until it exits
    os.execv(sys.executable, [sys.executable, str(CLIENT), *argv[1:]])


if __name__ == "__main__":
    main(sys.argv)
