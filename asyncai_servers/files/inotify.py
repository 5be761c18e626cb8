"""The kernel's side: one inotify instance per server, shared by every change source.

inotify limits instances per user (``fs.inotify.max_user_instances``, often 128, shared
with every other process of that user), not watches (``fs.inotify.max_user_watches``,
often hundreds of thousands). So the server holds one instance, :class:`Inotify`, however
many targets are watched, and every :class:`~asyncai_servers.files.change_source.ChangeSource`
puts its watches in it. Within one instance the kernel hands out one watch descriptor per
directory: a second ``inotify_add_watch`` of a directory already watched returns the same
descriptor. So sources on the same directory share its watch, and a watch descriptor is
removed from the kernel only when the last source holding it lets go.

Which source holds which descriptor is the pure :class:`WatchShares` table; it also routes
each event read to the sources holding its descriptor only, so a change costs
O(sources on that directory), not O(sources). :class:`Inotify` is the I/O shell: the
instance (made at the first watch, kept until the server ends), the calls that add and
remove watches, and one reader task. The reader waits on the instance's descriptor with
:func:`anyio.wait_readable`, i.e. by the event loop's own ``epoll``: no thread, no timer,
so while nothing changes nothing runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import threading
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Final, Generic, Protocol, TypeVar

import anyio
import inotify_simple  # type: ignore[import-untyped]  # a 200-line ctypes wrapper without type hints

__all__ = [
    "WATCH_MASK",
    "ChangeSourceError",
    "Event",
    "Holder",
    "Inotify",
    "InotifyUnavailable",
    "WatchShares",
    "check_inotify",
    "unavailable",
    "watch_error",
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
"""Every watch has this mask: the kernel keeps one mask per descriptor, so sharers must agree."""

Event = tuple[int, int, int, str]
"""``(wd, mask, cookie, name)`` as inotify reports it (``inotify_simple.Event``)."""


class InotifyUnavailable(RuntimeError):
    """inotify cannot be used here; the server refuses to fall back to polling."""


class ChangeSourceError(RuntimeError):
    """Watching a path failed (it vanished, a limit was hit, the watcher broke)."""


def _limit(name: str, directory: str = _INOTIFY_LIMITS) -> str:
    try:
        with open(os.path.join(directory, name)) as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def unavailable(code: int) -> InotifyUnavailable:
    """The error for ``inotify_init1`` failing with ``code`` (an errno), saying why."""
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
    raise unavailable(-fd)


def watch_error(path: str, exc: OSError) -> ChangeSourceError:
    """The error for ``inotify_add_watch(path)`` failing with ``exc``, naming the limit when one was hit."""
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


H = TypeVar("H")  # a holder: anything hashable (by identity, for a change source)


class WatchShares(Generic[H]):
    """Which holders (change sources) share each watch descriptor, and who gets which event (pure).

    A holder *attaches* to a descriptor when ``inotify_add_watch`` returned it for that
    holder (again and again, if need be: attaching twice is attaching once) and *detaches*
    when it no longer wants it. :meth:`detach` answers the descriptors nobody holds any
    more, which the shell then removes from the kernel; a descriptor the kernel dropped
    itself (``IN_IGNORED``: its directory was deleted) is forgotten when that event is routed.
    """

    def __init__(self) -> None:
        self._holders: dict[int, set[H]] = {}
        self._held: dict[H, set[int]] = {}

    def __len__(self) -> int:
        """Watch descriptors held now."""
        return len(self._holders)

    def holders(self, wd: int) -> frozenset[H]:
        return frozenset(self._holders.get(wd, ()))

    def held(self, holder: H) -> frozenset[int]:
        return frozenset(self._held.get(holder, ()))

    def attach(self, holder: H, wd: int) -> None:
        self._holders.setdefault(wd, set()).add(holder)
        self._held.setdefault(holder, set()).add(wd)

    def detach(self, holder: H, wds: Iterable[int]) -> list[int]:
        """``holder`` lets go of ``wds``; returns those of them that nobody holds now (remove them)."""
        mine = self._held.get(holder)
        if mine is None:
            return []
        unheld: list[int] = []
        for wd in wds:
            if wd not in mine:
                continue  # not held, or already forgotten (the kernel dropped it)
            mine.discard(wd)
            sharers = self._holders[wd]
            sharers.discard(holder)
            if not sharers:
                del self._holders[wd]
                unheld.append(wd)
        if not mine:
            del self._held[holder]
        return unheld

    def detach_all(self, holder: H) -> list[int]:
        """``holder`` lets go of everything it holds; returns the descriptors nobody holds now."""
        return self.detach(holder, sorted(self._held.get(holder, ())))

    def route(self, events: Iterable[Event]) -> dict[H, list[Event]]:
        """Each holder's share of ``events``, in order.

        An event goes to the holders of its descriptor only; a queue overflow (no descriptor:
        events were lost, anywhere) goes to every holder. ``IN_IGNORED`` (the kernel removed
        the watch) goes to its holders, then the descriptor is forgotten.
        """
        out: dict[H, list[Event]] = {}
        for event in events:
            wd, mask = event[0], event[1]
            if mask & IN_Q_OVERFLOW:
                for holder in self._held:
                    out.setdefault(holder, []).append(event)
                continue
            sharers = self._holders.get(wd)
            if not sharers:
                continue
            for holder in sharers:
                out.setdefault(holder, []).append(event)
            if mask & IN_IGNORED:
                for holder in self._holders.pop(wd):
                    mine = self._held[holder]
                    mine.discard(wd)
                    if not mine:
                        del self._held[holder]
        return out

    def clear(self) -> list[H]:
        """Forget everything (the instance is gone); returns who held something."""
        holders = list(self._held)
        self._holders.clear()
        self._held.clear()
        return holders


class Holder(Protocol):
    """What :class:`Inotify` hands events to: a change source. Both calls are on the event loop and must not block."""

    def deliver(self, events: Sequence[Event]) -> None: ...

    def fail(self, error: ChangeSourceError) -> None: ...


class Inotify:
    """The one inotify instance of a server, shared by every change source (``async with inotify.running()``).

    The instance is made when the first watch is asked for (:meth:`ensure`) and kept until
    :meth:`running` ends. Watches are added from worker threads (a source walks a big
    tree off the event loop) and removed on the event loop: one lock orders both, so a
    descriptor is never removed between another source's ``inotify_add_watch`` returning
    it and that source attaching to it.
    """

    def __init__(self, make: Callable[[], inotify_simple.INotify] | None = None) -> None:
        self._make = make if make is not None else (lambda: inotify_simple.INotify(nonblocking=True))
        self._notify: inotify_simple.INotify | None = None
        self._shares: WatchShares[Holder] = WatchShares()
        self._lock = threading.Lock()
        self._opened = anyio.Event()
        self._running = False

    @property
    def instances(self) -> int:
        """inotify instances open now: 0 (nothing watched yet) or 1."""
        return 0 if self._notify is None else 1

    @property
    def watches(self) -> int:
        """Watch descriptors held now, over every source."""
        return len(self._shares)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Inotify]:
        """Own the reader task; on exit it stops and the instance is closed."""
        async with anyio.create_task_group() as tg:
            self._running = True
            tg.start_soon(self._read_forever)
            try:
                yield self
            finally:
                self._running = False
                tg.cancel_scope.cancel()
        self._close()

    def ensure(self) -> None:
        """Make the instance unless it exists (on the event loop); raises :class:`InotifyUnavailable`."""
        if not self._running:
            raise RuntimeError("Inotify.ensure outside Inotify.running()")
        if self._notify is not None:
            return
        try:
            self._notify = self._make()
        except OSError as exc:
            raise unavailable(exc.errno or 0) from exc
        self._opened.set()

    def add(self, holder: Holder, path: str) -> int:
        """Watch directory ``path`` for ``holder`` (any thread); its descriptor, shared with any other holder of it.

        Raises ``OSError`` as ``inotify_add_watch`` does (the caller knows what a missing path means).
        """
        with self._lock:
            notify = self._notify
            if notify is None:
                raise ChangeSourceError(f"cannot watch {path!r}: the inotify instance was closed")
            wd = int(notify.add_watch(path, WATCH_MASK))
            self._shares.attach(holder, wd)
            return wd

    def release(self, holder: Holder, wds: Collection[int] | None = None) -> None:
        """``holder`` lets go of ``wds`` (all it holds: ``None``); the watches nobody holds are removed."""
        with self._lock:
            unheld = self._shares.detach_all(holder) if wds is None else self._shares.detach(holder, wds)
            notify = self._notify
            if notify is None:
                return
            for wd in unheld:
                with contextlib.suppress(OSError):  # already gone with its directory
                    notify.rm_watch(wd)

    async def _read_forever(self) -> None:
        while True:
            await self._opened.wait()
            notify = self._notify
            assert notify is not None
            try:
                await anyio.wait_readable(notify.fileno())
            except (OSError, anyio.ClosedResourceError):
                continue  # closed under the wait (reading failed): wait for the next instance
            self.drain()

    def drain(self) -> None:
        """Read every event queued now and hand each holder its share (on the event loop; never waits).

        The reader calls it when the descriptor is readable; a source ending a debounced batch
        calls it too, so the batch holds everything the kernel had queued by its deadline.
        """
        notify = self._notify
        if notify is None:
            return
        try:
            events = notify.read(timeout=0)
        except OSError as exc:
            self._broken(exc)
            return
        if not events:
            return
        with self._lock:
            routed = self._shares.route(events)
        for holder, share in routed.items():
            holder.deliver(share)

    def _broken(self, exc: OSError) -> None:
        """Reading failed: every source fails (and restarts on a new instance, made when next asked for)."""
        with self._lock:
            holders = self._shares.clear()
        self._close()
        error = ChangeSourceError(f"reading inotify events failed: {exc}")
        for holder in holders:
            holder.fail(error)

    def _close(self) -> None:
        with self._lock:
            notify, self._notify = self._notify, None
            self._opened = anyio.Event()
            self._shares.clear()
        if notify is not None:
            # A task waiting on the descriptor wakes, instead of waiting on a number reused later.
            anyio.notify_closing(notify.fileno())
            notify.close()
