"""The native change source: inotify, its descriptor waited on by the event loop.

One :class:`ChangeSource` is one inotify instance (``inotify_simple.INotify``) with a
watch on a directory, and with ``recursive`` on every directory below it. Its file
descriptor is waited on with :func:`anyio.wait_readable`, i.e. by the event loop's own
``epoll``: no thread, no timer, so a source that sees no change costs nothing at all
(zero wake-ups, measured by ``bench/files.py``). When the descriptor is readable, every
event queued so far is read at once and becomes one :class:`Batch`; a burst that
arrives while the server handles a batch is the next one, so bursts group by
themselves. ``debounce_ms`` can hold a batch open longer (one deadline per burst, on
the injectable clock; nothing runs while idle).

The bookkeeping (which watch descriptor is which directory, what an event means) is
the pure :class:`WatchTable`; :class:`ChangeSource` is the I/O shell around it.

The server never polls: there is no fallback. If inotify cannot be used the watch fails
with :class:`InotifyUnavailable`, saying why.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Final

import anyio
import attrs
import inotify_simple  # type: ignore[import-untyped]  # a 200-line ctypes wrapper without type hints

if TYPE_CHECKING:  # the CLI imports this module before it parses arguments: keep it light
    from asyncai_watch.clock import Clock

__all__ = [
    "Batch",
    "ChangeSource",
    "ChangeSourceError",
    "InotifyUnavailable",
    "NotifyTiming",
    "WatchTable",
    "check_inotify",
]

_INOTIFY_LIMITS = "/proc/sys/fs/inotify"

IN_MODIFY: Final = 0x00000002
IN_ATTRIB: Final = 0x00000004
IN_MOVED_FROM: Final = 0x00000040
IN_MOVED_TO: Final = 0x00000080
IN_CREATE: Final = 0x00000100
IN_DELETE: Final = 0x00000200
IN_DELETE_SELF: Final = 0x00000400
IN_MOVE_SELF: Final = 0x00000800
IN_UNMOUNT: Final = 0x00002000
IN_Q_OVERFLOW: Final = 0x00004000
IN_IGNORED: Final = 0x00008000
IN_ONLYDIR: Final = 0x01000000
IN_DONT_FOLLOW: Final = 0x02000000
IN_EXCL_UNLINK: Final = 0x04000000
IN_ISDIR: Final = 0x40000000

WATCH_MASK: Final = (
    IN_MODIFY  # a write (in place: each write, so a reader can catch a torn file, see content.py)
    | IN_ATTRIB  # mtime set by touch/utime, permissions
    | IN_CREATE
    | IN_DELETE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR  # only ever a directory ...
    | IN_DONT_FOLLOW  # ... and never through a symlink swapped in
    | IN_EXCL_UNLINK  # no events for files already unlinked but still open
)
_SELF_GONE: Final = IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT | IN_IGNORED
_DIR_ARRIVED: Final = IN_CREATE | IN_MOVED_TO

Event = tuple[int, int, int, str]
"""``(wd, mask, cookie, name)`` as inotify reports it (``inotify_simple.Event``)."""


class InotifyUnavailable(RuntimeError):
    """inotify cannot be used here; the server refuses to fall back to polling."""


class ChangeSourceError(RuntimeError):
    """Watching a path failed (it vanished, a limit was hit, the watcher broke)."""


@attrs.frozen(kw_only=True)
class NotifyTiming:
    """How long a batch is held open after its first event (milliseconds; 0: not at all)."""

    debounce_ms: int = attrs.field(default=0, validator=attrs.validators.ge(0))


@attrs.frozen
class Batch:
    """What changed since the last batch.

    ``paths``: every path an event named (a directory's own events name the directory).
    ``gone``: the watched directory itself was deleted, moved away or unmounted.
    ``overflow``: the kernel's event queue overflowed, so events were lost: look at everything.
    """

    paths: frozenset[str]
    gone: bool = False
    overflow: bool = False


def _limit(name: str, directory: str = _INOTIFY_LIMITS) -> str:
    try:
        with open(os.path.join(directory, name)) as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def _unavailable(code: int) -> InotifyUnavailable:
    if code == errno.ENOSYS:
        why = "the kernel has no inotify (ENOSYS)"
    elif code == errno.EMFILE:
        why = (
            "too many inotify instances or open files (EMFILE): "
            f"fs.inotify.max_user_instances is {_limit('max_user_instances')}"
        )
    elif code == errno.ENFILE:
        why = "the system-wide open-file limit was reached (ENFILE)"
    else:
        why = f"inotify_init1 failed: {os.strerror(code)} (errno {code})"
    return InotifyUnavailable(
        f"inotify is unavailable: {why}; asyncai-mcp-files needs inotify and never falls back to polling"
    )


def _libc_inotify_init1() -> Callable[[int], int]:
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        fn = libc.inotify_init1
    except AttributeError as exc:
        raise InotifyUnavailable(
            "inotify is unavailable: this C library has no inotify_init1 (Linux only); "
            "asyncai-mcp-files needs inotify and never falls back to polling"
        ) from exc
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int

    def call(flags: int) -> int:
        result = int(fn(flags))
        if result < 0:
            return -ctypes.get_errno()
        return result

    return call


def check_inotify(init1: Callable[[int], int] | None = None) -> None:
    """Raise :class:`InotifyUnavailable` unless an inotify instance can be created now.

    ``init1`` returns a descriptor or ``-errno`` (injectable for tests of the messages).
    """
    call = init1 if init1 is not None else _libc_inotify_init1()
    fd = call(os.O_CLOEXEC)
    if fd >= 0:
        os.close(fd)
        return
    raise _unavailable(-fd)


def _watch_error(path: str, exc: OSError) -> ChangeSourceError:
    if exc.errno == errno.ENOENT:
        return ChangeSourceError(f"cannot watch {path!r}: it does not exist")
    if exc.errno == errno.EACCES:
        return ChangeSourceError(f"cannot watch {path!r}: permission denied")
    if exc.errno == errno.ENOTDIR:
        return ChangeSourceError(f"cannot watch {path!r}: it is not a directory")
    if exc.errno == errno.ENOSPC:
        return ChangeSourceError(
            f"cannot watch {path!r}: the inotify watch limit was reached "
            f"(fs.inotify.max_user_watches is {_limit('max_user_watches')}, "
            f"user.max_inotify_watches of this user namespace is {_limit('max_inotify_watches', '/proc/sys/user')})"
        )
    return ChangeSourceError(f"cannot watch {path!r}: {os.strerror(exc.errno or 0)} (errno {exc.errno})")


# A directory that vanished or was replaced between being seen and being watched: its
# parent's events report that, so it is no error. Unreadable, or a path too long to
# address (or looping): the scan skips it too, so nothing below it is ever reported.
_SKIPPABLE: Final = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.ENAMETOOLONG, errno.ELOOP})


@attrs.define
class Translation:
    """What one read of events means: see :class:`Batch`, plus the watches to add and remove."""

    paths: set[str] = attrs.field(factory=set)
    gone: bool = False
    overflow: bool = False
    new_dirs: list[str] = attrs.field(factory=list)  # directories that arrived (recursive only)
    dropped: list[int] = attrs.field(factory=list)  # watch descriptors of directories that left


class WatchTable:
    """Which watch descriptor is which directory, and what events mean (pure, no I/O).

    The root is the watched directory. With ``recursive`` every directory below it has a
    watch of its own; a directory that arrives (created, moved in) is to be watched with
    everything below it, one that is moved away is forgotten with everything below it
    (its watches would go on reporting its changes under the old path).
    """

    def __init__(self, root: str, *, recursive: bool) -> None:
        self.root = root
        self.recursive = recursive
        self.root_wd: int | None = None
        self._paths: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self._paths)

    def path_of(self, wd: int) -> str | None:
        return self._paths.get(wd)

    def added(self, wd: int, path: str) -> None:
        """``inotify_add_watch`` returned ``wd`` for ``path`` (the same wd again if it already watched that inode)."""
        if path == self.root:
            self.root_wd = wd
        self._paths[wd] = path

    def _below(self, path: str) -> list[int]:
        prefix = path.rstrip("/") + "/"
        return [wd for wd, p in self._paths.items() if p == path or p.startswith(prefix)]

    def translate(self, events: Iterable[Event]) -> Translation:
        out = Translation()
        for wd, mask, _cookie, name in events:
            if mask & IN_Q_OVERFLOW:
                out.overflow = True
                continue
            base = self._paths.get(wd)
            if base is None:
                continue  # a watch already forgotten (moved away, removed): its late events say nothing
            if wd == self.root_wd and mask & _SELF_GONE:
                out.gone = True
                out.paths.add(base)
                continue
            if mask & IN_IGNORED:
                del self._paths[wd]  # its directory was deleted: the parent's IN_DELETE named it
                continue
            if not name:
                if not mask & _SELF_GONE:
                    out.paths.add(base)  # e.g. IN_ATTRIB on the directory itself
                continue
            path = os.path.join(base, name)
            out.paths.add(path)
            if self.recursive and mask & IN_ISDIR:
                if mask & _DIR_ARRIVED:
                    out.new_dirs.append(path)
                elif mask & IN_MOVED_FROM:
                    for gone in self._below(path):
                        del self._paths[gone]
                        out.dropped.append(gone)
        return out


def _add_watch(notify: inotify_simple.INotify, path: str) -> int:
    return int(notify.add_watch(path, WATCH_MASK))


def _walk_and_watch(
    notify: inotify_simple.INotify, tops: Sequence[str], *, recursive: bool, strict_top: bool
) -> list[tuple[int, str]]:
    """Watch each of ``tops`` and (``recursive``) every directory below, not following symlinks.

    Runs in a worker thread (a big tree takes a while); returns ``(wd, path)`` for the table.
    A watch is added *before* its directory is listed, so a subdirectory made meanwhile is
    either listed or reported by that watch. ``strict_top``: a top that cannot be watched
    is an error (the watched directory); otherwise it is skipped (it vanished meanwhile).
    """
    added: list[tuple[int, str]] = []
    stack = list(tops)
    first = set(tops) if strict_top else set()
    while stack:
        path = stack.pop()
        try:
            added.append((_add_watch(notify, path), path))
        except OSError as exc:
            if path in first or exc.errno not in _SKIPPABLE:
                raise _watch_error(path, exc) from exc
            continue
        if not recursive:
            continue
        try:
            with os.scandir(path) as entries:
                for entry in entries:
                    try:
                        if stat.S_ISDIR(entry.stat(follow_symlinks=False).st_mode):
                            stack.append(entry.path)
                    except OSError:
                        continue  # gone meanwhile
        except OSError as exc:
            if exc.errno not in _SKIPPABLE:
                raise _watch_error(path, exc) from exc
    return added


class ChangeSource:
    """inotify watches on one directory (and, ``recursive``, those below it).

    Use: ``await open()`` (the watches exist when it returns), then
    ``await next_batch()`` until it returns ``None`` (after :meth:`stop`), then
    :meth:`close`.
    """

    def __init__(
        self, path: str, *, recursive: bool, timing: NotifyTiming, clock: Clock | None = None
    ) -> None:
        self.path = path
        self.recursive = recursive
        self.timing = timing
        if clock is None:
            from asyncai_watch.clock import SystemClock

            clock = SystemClock()
        self.clock: Clock = clock
        self.table = WatchTable(path, recursive=recursive)
        self._notify: inotify_simple.INotify | None = None
        self._stopped = False
        self._scope: anyio.CancelScope | None = None

    @property
    def watches(self) -> int:
        """How many directories are watched now."""
        return len(self.table)

    async def open(self) -> None:
        try:
            notify = inotify_simple.INotify(nonblocking=True)
        except OSError as exc:
            raise _unavailable(exc.errno or 0) from exc
        self._notify = notify
        try:
            added = await anyio.to_thread.run_sync(
                lambda: _walk_and_watch(notify, [self.path], recursive=self.recursive, strict_top=True)
            )
        except BaseException:
            self.close()
            raise
        for wd, path in added:
            self.table.added(wd, path)

    async def _watch_more(self, tops: Sequence[str]) -> None:
        notify = self._notify
        assert notify is not None
        added = await anyio.to_thread.run_sync(
            lambda: _walk_and_watch(notify, tops, recursive=self.recursive, strict_top=False)
        )
        for wd, path in added:
            self.table.added(wd, path)

    def _read(self, into: Translation) -> None:
        notify = self._notify
        assert notify is not None
        try:
            events = notify.read(timeout=0)
        except OSError as exc:
            raise ChangeSourceError(f"reading inotify events for {self.path!r} failed: {exc}") from exc
        part = self.table.translate(events)
        into.paths |= part.paths
        into.gone = into.gone or part.gone
        into.overflow = into.overflow or part.overflow
        into.new_dirs += part.new_dirs
        for wd in part.dropped:
            with contextlib.suppress(OSError):  # already gone with its directory
                notify.rm_watch(wd)

    async def _collect(self) -> Translation:
        notify = self._notify
        assert notify is not None
        batch = Translation()
        while not (batch.paths or batch.gone or batch.overflow):
            await anyio.wait_readable(notify.fileno())
            self._read(batch)
        if self.timing.debounce_ms and not batch.gone:
            deadline = self.clock.now() + self.timing.debounce_ms / 1000
            async with anyio.create_task_group() as tg:

                async def close_at_deadline() -> None:
                    await self.clock.sleep_until(deadline)
                    tg.cancel_scope.cancel()

                tg.start_soon(close_at_deadline)
                while not batch.gone:
                    await anyio.wait_readable(notify.fileno())
                    self._read(batch)
                tg.cancel_scope.cancel()
        return batch

    async def next_batch(self) -> Batch | None:
        """The next batch of changes, or ``None`` once stopped."""
        if self._notify is None:
            raise RuntimeError("ChangeSource.next_batch before open()")
        with anyio.CancelScope() as scope:
            self._scope = scope
            if self._stopped:
                scope.cancel()
            batch = await self._collect()
        self._scope = None
        if scope.cancelled_caught or self._stopped:
            return None
        if batch.overflow:
            # Lost events may have been directories made: (re)watch the whole tree (an
            # existing watch is simply returned again).
            await self._watch_more([self.path])
        elif batch.new_dirs:
            await self._watch_more(batch.new_dirs)
        return Batch(frozenset(batch.paths), gone=batch.gone, overflow=batch.overflow)

    def stop(self) -> None:
        """Make :meth:`next_batch` return ``None`` (idempotent; on the event loop's thread)."""
        self._stopped = True
        if self._scope is not None:
            self._scope.cancel()

    def close(self) -> None:
        self.stop()
        notify, self._notify = self._notify, None
        if notify is not None:
            notify.close()
