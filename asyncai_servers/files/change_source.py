"""The change source of one watched directory: its watches in the server's one inotify instance.

A :class:`ChangeSource` holds inotify watches on a directory, and with ``recursive`` on
every directory below it, in the shared :class:`~asyncai_servers.files.inotify.Inotify`
instance (sources on the same directory share its watch). The instance's reader hands each
source the events of its own watches only; the source keeps them until its owner asks for
the next :class:`Batch`. Everything that arrived so far is one batch; a burst that arrives
while the owner handles a batch is the next one, so bursts group by themselves.
``debounce_ms`` can hold a batch open longer (one deadline per burst, on the injectable
clock; nothing runs while idle). No thread, no timer: a source that sees no change costs
nothing at all (zero wake-ups, measured by ``bench/files.py``).

The bookkeeping (which watch descriptor is which directory, what an event means) is
the pure :class:`WatchTable`; :class:`ChangeSource` is the I/O shell around it. Each source
has its own table: the kernel names a directory by one descriptor however many sources
watch it, but each source names it by its own path (a directory moved from one watched
place to another is the same descriptor under two names).

The server never polls: there is no fallback. If inotify cannot be used the watch fails
with :class:`InotifyUnavailable`, saying why.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Final

import anyio
import attrs

from asyncai_servers.files.inotify import (
    IN_CREATE,
    IN_DELETE_SELF,
    IN_IGNORED,
    IN_ISDIR,
    IN_MOVE_SELF,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_Q_OVERFLOW,
    IN_UNMOUNT,
    ChangeSourceError,
    Event,
    Inotify,
    InotifyUnavailable,
    check_inotify,
    watch_error,
)

if TYPE_CHECKING:  # the CLI imports this module before it parses arguments: keep it light
    from asyncai_watch.clock import Clock

__all__ = [
    "Batch",
    "ChangeSource",
    "ChangeSourceError",
    "Inotify",
    "InotifyUnavailable",
    "NotifyTiming",
    "WatchTable",
    "check_inotify",
]

_SELF_GONE: Final = IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT | IN_IGNORED
_DIR_ARRIVED: Final = IN_CREATE | IN_MOVED_TO


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


def _walk_and_watch(
    add: Callable[[str], int],
    tops: Sequence[str],
    *,
    recursive: bool,
    strict_top: bool,
    skip: Callable[[str], bool] | None = None,
) -> list[tuple[int, str]]:
    """Watch each of ``tops`` and (``recursive``) every directory below, not following symlinks.

    Runs in a worker thread (a big tree takes a while); returns ``(wd, path)`` for the table.
    A watch is added *before* its directory is listed, so a subdirectory made meanwhile is
    either listed or reported by that watch. ``strict_top``: a top that cannot be watched
    is an error (the watched directory); otherwise it is skipped (it vanished meanwhile).
    ``skip``: directories below the watched one that get no watch, nor does anything below them.
    """
    added: list[tuple[int, str]] = []
    first = set(tops) if strict_top else set()
    stack = [top for top in tops if top in first or skip is None or not skip(top)]
    while stack:
        path = stack.pop()
        try:
            added.append((add(path), path))
        except OSError as exc:
            if path in first or exc.errno not in _SKIPPABLE:
                raise watch_error(path, exc) from exc
            continue
        if not recursive:
            continue
        try:
            with os.scandir(path) as entries:
                for entry in entries:
                    try:
                        if stat.S_ISDIR(entry.stat(follow_symlinks=False).st_mode) and (
                            skip is None or not skip(entry.path)
                        ):
                            stack.append(entry.path)
                    except OSError:
                        continue  # gone meanwhile
        except OSError as exc:
            if exc.errno not in _SKIPPABLE:
                raise watch_error(path, exc) from exc
    return added


class ChangeSource:
    """inotify watches on one directory (and, ``recursive``, those below it), in the shared instance.

    Use: ``await open()`` (the watches exist when it returns), then
    ``await next_batch()`` until it returns ``None`` (after :meth:`stop`), then
    :meth:`close`.
    """

    def __init__(
        self,
        inotify: Inotify,
        path: str,
        *,
        recursive: bool,
        timing: NotifyTiming,
        clock: Clock | None = None,
        skip: Callable[[str], bool] | None = None,
    ) -> None:
        self.inotify = inotify
        self.path = path
        self.recursive = recursive
        self.skip = skip  # directories below that need no watch (a dir-events exclude glob)
        self.timing = timing
        if clock is None:
            from asyncai_watch.clock import SystemClock

            clock = SystemClock()
        self.clock: Clock = clock
        self.table = WatchTable(path, recursive=recursive)
        # Events of this source's watches, as the shared reader handed them over: translated by
        # this source's own task, in order with the walks that add watches (see _watch_more).
        self._events: list[Event] = []
        self._error: ChangeSourceError | None = None
        self._wake = anyio.Event()
        self._opened = False
        self._closed = False
        self._stopped = False
        self._scope: anyio.CancelScope | None = None

    @property
    def watches(self) -> int:
        """How many directories are watched now."""
        return len(self.table)

    # -- what the shared reader calls (on the event loop) --------------------------------------

    def deliver(self, events: Sequence[Event]) -> None:
        if self._closed:
            return
        self._events.extend(events)
        self._wake.set()

    def fail(self, error: ChangeSourceError) -> None:
        if self._closed:
            return
        self._error = error
        self._wake.set()

    # -- the owner's side ------------------------------------------------------------------------

    async def open(self) -> None:
        self.inotify.ensure()  # raises InotifyUnavailable, saying why
        self._opened = True
        try:
            await self._watch_more([self.path], strict_top=True)
        except BaseException:
            self.close()
            raise

    async def _watch_more(self, tops: Sequence[str], *, strict_top: bool = False) -> None:
        add = self._add
        added = await anyio.to_thread.run_sync(
            lambda: _walk_and_watch(
                add, tops, recursive=self.recursive, strict_top=strict_top, skip=self.skip
            )
        )
        for wd, path in added:
            self.table.added(wd, path)

    def _add(self, path: str) -> int:
        return self.inotify.add(self, path)

    def _translate(self, into: Translation) -> None:
        events, self._events = self._events, []
        part = self.table.translate(events)
        into.paths |= part.paths
        into.gone = into.gone or part.gone
        into.overflow = into.overflow or part.overflow
        into.new_dirs += part.new_dirs
        if part.dropped:
            self.inotify.release(self, part.dropped)

    async def _next_events(self, batch: Translation) -> None:
        """Wait until the reader hands over more events (or fails), and translate them."""
        while not (self._events or self._error):
            self._wake = anyio.Event()
            await self._wake.wait()
        self._translate(batch)

    async def _collect(self) -> Translation:
        batch = Translation()
        while not (batch.paths or batch.gone or batch.overflow or self._error):
            await self._next_events(batch)
        if self.timing.debounce_ms and not (batch.gone or self._error):
            deadline = self.clock.now() + self.timing.debounce_ms / 1000
            async with anyio.create_task_group() as tg:

                async def close_at_deadline() -> None:
                    await self.clock.sleep_until(deadline)
                    tg.cancel_scope.cancel()

                tg.start_soon(close_at_deadline)
                while not (batch.gone or self._error):
                    await self._next_events(batch)
                tg.cancel_scope.cancel()
            # What the kernel queued by the deadline belongs to this batch, read or not.
            self.inotify.drain()
            if self._events:
                self._translate(batch)
        if self._error is not None:
            raise ChangeSourceError(f"watching {self.path!r}: {self._error}")
        return batch

    async def next_batch(self) -> Batch | None:
        """The next batch of changes, or ``None`` once stopped."""
        if not self._opened:
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
        """Stop, and let go of this source's watches (each leaves the kernel with its last holder).

        Idempotent; it may be called while :meth:`open` is walking: the owner closes it again
        once ``open`` returns, which lets go of what the walk added meanwhile.
        """
        self.stop()
        self._closed = True
        self._events = []
        self.inotify.release(self)
