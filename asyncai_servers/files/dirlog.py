"""Turning inotify batches for a directory into ADDED / MODIFIED / DELETED events.

inotify's event kinds are hints (a rename is a delete plus an add, a burst
of writes is many "modified"). The truth is what ``lstat`` says now, so a
batch only names *which* paths to look at: :func:`observe` stats them and
:func:`reconcile` compares the result with the last known objects. This makes
coalesced or reordered batches, and a restart after changes made while nobody
watched, come out right.

An object is ``{"path", "name", "size", "mtime", "type"}``: ``path`` absolute,
``name`` relative to the watched directory (also the item key the client
uses), ``mtime`` the modification time in ISO 8601 UTC to the nanosecond
(``2026-12-05T00:04:21.123456789Z``: readable, sortable as text, and exact, so a
change of mtime alone is never lost to rounding), ``type`` one of ``file``,
``dir``, ``symlink``, ``other``. Symlinks are reported as themselves and never
followed. Names that are not UTF-8 are skipped: they cannot be carried in JSON.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Collection, Iterable, MutableMapping
from pathlib import PurePosixPath
from typing import Any

import attrs

from asyncai_servers.files.paths import is_within

__all__ = ["DirSpec", "iso_utc", "make_object", "observe", "reconcile", "scan"]

FileObject = dict[str, Any]


def _entry_type(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    return "other"


def iso_utc(ns: int) -> str:
    """``ns`` nanoseconds since the epoch as ISO 8601 UTC with all nine digits of the fraction."""
    seconds, fraction = divmod(ns, 1_000_000_000)
    return f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(seconds))}.{fraction:09d}Z"


def make_object(path: str, base: str, st: os.stat_result) -> FileObject:
    return {
        "path": path,
        "name": os.path.relpath(path, base),
        "size": st.st_size,
        "mtime": iso_utc(st.st_mtime_ns),
        "type": _entry_type(st.st_mode),
    }


@attrs.frozen
class DirSpec:
    """What one ``dir-events://`` URI watches: a real directory, depth, and name filters."""

    path: str
    recursive: bool = False
    glob: str | None = None
    exclude: tuple[str, ...] = ()
    """Globs of entries left out, with everything below them (``.git``, ``*.tmp``)."""

    def in_scope(self, path: str) -> bool:
        """``path`` lies in the watched tree (the directory itself excluded)."""
        if path == self.path or not is_within(path, self.path):
            return False
        return self.recursive or os.path.dirname(path) == self.path

    def matches(self, path: str) -> bool:
        """The glob, right-anchored on the relative path (``*.json`` matches at any depth)."""
        if self.glob is None:
            return True
        return PurePosixPath(os.path.relpath(path, self.path)).match(self.glob)

    def excluded(self, path: str) -> bool:
        """An exclude glob matches ``path`` or a directory it lies in below the watched one
        (right-anchored like :meth:`matches`: ``node_modules`` leaves out every such directory)."""
        if not self.exclude or path == self.path or not is_within(path, self.path):
            return False
        relative = PurePosixPath(os.path.relpath(path, self.path))
        return any(part.match(glob) for part in (relative, *relative.parents[:-1]) for glob in self.exclude)


def _representable(path: str) -> bool:
    """A name that is not UTF-8 (decoded with surrogates) cannot go into a JSON event."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:  # gone (ENOENT, ENOTDIR), or a path too long to address: never reported
        return None


def _walk(spec: DirSpec, top: str, into: MutableMapping[str, FileObject | None]) -> None:
    """Record every entry below ``top`` (without following symlinks)."""
    try:
        entries = list(os.scandir(top))
    except OSError:  # gone, no longer a directory, unreadable, or a path too long to address
        return
    for entry in entries:
        if not _representable(entry.path):
            continue
        if spec.excluded(entry.path):
            continue  # nor anything below it
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:  # gone meanwhile, or a path too long to address
            continue
        if spec.matches(entry.path):
            into[entry.path] = make_object(entry.path, spec.path, st)
        if spec.recursive and stat.S_ISDIR(st.st_mode):
            _walk(spec, entry.path, into)


def scan(spec: DirSpec) -> dict[str, FileObject]:
    """Every entry the spec covers, now."""
    found: dict[str, FileObject | None] = {}
    _walk(spec, spec.path, found)
    return {k: v for k, v in found.items() if v is not None}


def _symlink_free(path: str) -> bool:
    # The watches never follow a symlink, but a path whose parent was swapped for a
    # symlink meanwhile is an alias (or leads outside the root): not ours to report.
    parent = os.path.dirname(path)
    return os.path.realpath(parent) == parent


def observe(spec: DirSpec, paths: Iterable[str], known: Collection[str]) -> dict[str, FileObject | None]:
    """The current object (``None`` = gone) for each changed path the spec covers.

    ``known`` holds the paths known before this batch (a snapshot: this may run in a worker thread).

    A vanished directory takes its known children with it (moved out of the tree);
    a new directory is walked, since files created in it before its inotify watch
    existed produce no event of their own.
    """
    observed: dict[str, FileObject | None] = {}
    for path in paths:
        if not spec.in_scope(path) or spec.excluded(path):
            continue
        if not _representable(path) or not _symlink_free(path):
            continue
        st = _lstat(path)
        if st is None:
            if spec.matches(path):
                observed[path] = None
            prefix = path.rstrip("/") + "/"
            for child in [k for k in known if k.startswith(prefix)]:
                observed[child] = None
            continue
        if spec.matches(path):
            observed[path] = make_object(path, spec.path, st)
        if spec.recursive and stat.S_ISDIR(st.st_mode):
            _walk(spec, path, observed)
    return observed


def _differs(old: FileObject, new: FileObject) -> bool:
    if old["type"] != new["type"]:
        return True
    # A directory's size/mtime change whenever its entries do; the entries
    # themselves are reported, so a directory is only ever ADDED or DELETED.
    if new["type"] == "dir":
        return False
    return bool(old["size"] != new["size"] or old["mtime"] != new["mtime"])


_ORDER = {"DELETED": 0, "ADDED": 1, "MODIFIED": 2}


def reconcile(
    known: MutableMapping[str, FileObject], observed: MutableMapping[str, FileObject | None]
) -> list[dict[str, Any]]:
    """Events that take ``known`` to ``observed`` (``known`` is updated in place).

    DELETED carries the last known object; MODIFIED carries ``old``. Order:
    deletions, then additions, then modifications, each by path, so a rename
    reads as ``DELETED old`` followed by ``ADDED new``.
    """
    events: list[dict[str, Any]] = []
    for path, new in observed.items():
        old = known.get(path)
        if new is None:
            if old is not None:
                del known[path]
                events.append({"type": "DELETED", "object": old})
        elif old is None:
            known[path] = new
            events.append({"type": "ADDED", "object": new})
        elif _differs(old, new):
            known[path] = new
            events.append({"type": "MODIFIED", "object": new, "old": old})
    events.sort(key=lambda e: (_ORDER[e["type"]], e["object"]["path"]))
    return events
