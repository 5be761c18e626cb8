"""What a process holds of inotify, read from /proc: its instances and the watches in each."""

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


def child_pid(word: bytes) -> int:
    """The pid of this process's child whose command line holds ``word``."""
    me = os.getpid()
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if ppid == me and word in cmd:
            return int(entry)
    raise AssertionError(f"no child process running {word!r}")
