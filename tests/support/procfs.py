"""What /proc says of a child process: its pid, and the inotify instances it holds (the tests
and the benches read these the same way)."""

from __future__ import annotations

import os


def inotify_watches(pid: int) -> list[int]:
    """One entry per inotify instance ``pid`` has open: how many watches it holds.

    ``/proc/PID/fd/N`` links to ``anon_inode:inotify`` for an instance, and
    ``/proc/PID/fdinfo/N`` has one ``inotify wd:...`` line per watch in it.
    """
    found: list[int] = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") != "anon_inode:inotify":
                continue
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                found.append(sum(line.startswith("inotify wd:") for line in f))
        except OSError:
            continue
    return found


def child_pid(word: str) -> int:
    """The pid of this process's child whose command line holds ``word``."""
    me, wanted = os.getpid(), word.encode()
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile, or not a process entry we can read
        if ppid == me and wanted in cmd:
            return int(entry)
    raise RuntimeError(f"no child process running {word!r}")
