"""The native change source: inotify, through watchfiles' Rust ``notify`` binding.

We drive ``watchfiles._rust_notify.RustNotify`` directly rather than through
``watchfiles.awatch`` for two reasons:

- **Readiness.** ``awatch`` creates its inotify watches lazily, inside the first
  ``__anext__``, so the caller cannot tell when they exist. The server must know:
  the first read of a watched URI (the client's baseline) waits until the
  watches are in place, otherwise a write between the baseline and the watch
  would be lost. Here :meth:`ChangeSource.open` returns once they are.
- **Cancellation without a timeout tick.** ``awatch`` waits in a shielded worker
  thread and relies on ``rust_timeout`` (5 s by default) to notice cancellation,
  i.e. it returns to Python every 5 s while idle. We pass ``timeout_ms=0`` (never
  time out), let the thread be abandoned on cancel, and stop it through a
  ``threading.Event`` that Rust checks.

What ``RustNotify.watch`` does inside (watchfiles 1.x ``src/lib.rs``): the notify
thread blocks on the inotify descriptor and inserts ``(change, path)`` pairs into
a set. ``watch()`` sleeps ``step_ms``, then checks signals, the stop event and
the set's size, in a loop; once the set is non-empty it returns when a step adds
nothing new or ``debounce_ms`` has passed since the first change. So the file
system is never polled, but the waiting thread does wake every ``step_ms`` to
look at that in-memory set (with ``step_ms=10``: 100 cheap wake-ups a second per
watched path). watchfiles offers no blocking wait, so this is the floor.

watchfiles silently falls back to a *polling* watcher when ``inotify_init``
fails with ENOSYS, and honours ``WATCHFILES_FORCE_POLLING``. We never poll:
:func:`check_inotify` probes ``inotify_init1`` first, we pass
``force_polling=False``, and :meth:`ChangeSource.open` checks that the watcher it
got is the inotify one.
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading
from collections.abc import Callable

import anyio
import attrs
from watchfiles._rust_notify import RustNotify, WatchfilesRustInternalError

__all__ = [
    "ChangeSource",
    "ChangeSourceError",
    "InotifyUnavailable",
    "NotifyTiming",
    "RawChanges",
    "check_inotify",
]

RawChanges = set[tuple[int, str]]
"""watchfiles' batch: ``(change, path)`` with change 1 added, 2 modified, 3 deleted."""

_INOTIFY_LIMITS = "/proc/sys/fs/inotify"


class InotifyUnavailable(RuntimeError):
    """inotify cannot be used here; the server refuses to fall back to polling."""


class ChangeSourceError(RuntimeError):
    """Watching a path failed (it vanished, a limit was hit, the watcher broke)."""


@attrs.frozen(kw_only=True)
class NotifyTiming:
    """How watchfiles groups raw inotify events into one batch (milliseconds)."""

    debounce_ms: int = attrs.field(default=50, validator=attrs.validators.ge(0))
    step_ms: int = attrs.field(default=10, validator=attrs.validators.ge(1))


def _limit(name: str) -> str:
    try:
        with open(os.path.join(_INOTIFY_LIMITS, name)) as f:
            return f.read().strip()
    except OSError:
        return "unknown"


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
    code = -fd
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
    raise InotifyUnavailable(
        f"inotify is unavailable: {why}; asyncai-mcp-files needs inotify and never falls back to polling"
    )


def _open_error(path: str, exc: BaseException) -> ChangeSourceError:
    text = str(exc)
    if isinstance(exc, FileNotFoundError):
        return ChangeSourceError(f"cannot watch {path!r}: it does not exist")
    if isinstance(exc, PermissionError):
        return ChangeSourceError(f"cannot watch {path!r}: permission denied")
    if "limit" in text.lower() or "ENOSPC" in text or "No space left" in text:
        return ChangeSourceError(
            f"cannot watch {path!r}: the inotify watch limit was reached "
            f"(fs.inotify.max_user_watches is {_limit('max_user_watches')}): {text}"
        )
    return ChangeSourceError(f"cannot watch {path!r}: {text}")


class ChangeSource:
    """inotify watches on one path and the worker thread that waits for their batches.

    Use: ``await open()`` (watches exist when it returns), then
    ``await next_batch()`` until it returns ``None`` (after :meth:`stop`), then
    :meth:`close`. Cancelling ``next_batch`` abandons the worker thread, which
    then sees the stop event within one ``step_ms`` and ends.
    """

    def __init__(self, path: str, *, recursive: bool, timing: NotifyTiming) -> None:
        self.path = path
        self.recursive = recursive
        self.timing = timing
        self._stop = threading.Event()
        self._notify: RustNotify | None = None
        self._in_thread = False
        # Own limiter: a watch holds its thread for as long as it lives, and
        # must not starve anyio's shared default pool (40 threads).
        self._limiter = anyio.CapacityLimiter(1)

    def _construct(self) -> RustNotify:
        # force_polling=False explicitly: WATCHFILES_FORCE_POLLING must not turn us into a poller.
        notify = RustNotify([self.path], False, False, 0, self.recursive, False)
        if "INotifyWatcher" not in repr(notify):
            notify.close()
            raise InotifyUnavailable(
                f"watchfiles gave a non-inotify watcher for {self.path!r} ({repr(notify)[:60]}...); "
                "asyncai-mcp-files never falls back to polling"
            )
        return notify

    async def open(self) -> None:
        check_inotify()
        try:
            self._notify = await anyio.to_thread.run_sync(self._construct, limiter=self._limiter)
        except InotifyUnavailable:
            raise
        except (OSError, WatchfilesRustInternalError) as exc:
            raise _open_error(self.path, exc) from exc

    async def next_batch(self) -> RawChanges | None:
        """The next non-empty batch of changes, or ``None`` once stopped."""
        notify = self._notify
        if notify is None:
            raise RuntimeError("ChangeSource.next_batch before open()")
        while not self._stop.is_set():
            self._in_thread = True
            try:
                raw = await anyio.to_thread.run_sync(
                    notify.watch,
                    self.timing.debounce_ms,
                    self.timing.step_ms,
                    0,  # timeout_ms=0: never return just because time passed
                    self._stop,
                    abandon_on_cancel=True,
                    limiter=self._limiter,
                )
            except WatchfilesRustInternalError as exc:
                self._in_thread = False
                raise ChangeSourceError(f"watching {self.path!r} failed: {exc}") from exc
            except BaseException:
                # Cancelled: the abandoned thread sees the stop event within one step.
                self._stop.set()
                raise
            self._in_thread = False
            if raw == "stop":
                return None
            if isinstance(raw, str):  # "signal" / "timeout": neither is expected with timeout 0
                continue
            if raw:
                return raw
        return None

    def stop(self) -> None:
        """Make :meth:`next_batch` return ``None`` (thread-safe, idempotent)."""
        self._stop.set()

    def close(self) -> None:
        self._stop.set()
        notify, self._notify = self._notify, None
        # Closing while an abandoned thread is still inside watch() would race its
        # borrow of the object; that thread ends by itself and drops the watcher.
        if notify is not None and not self._in_thread:
            notify.close()
