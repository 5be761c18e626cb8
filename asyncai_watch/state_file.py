"""The ``--watch-state`` file: watch specs saved on every start and stop.

The file is JSON, documented by :data:`converter` and docs/watch-manager.md::

    {"version": 2, "watches": [{"name": "notes", "uri": "memo://notes", "on_event": null},
                               {"name": "cfg", "uri": "file:///srv/cfg.json", "on_event": "...",
                                "error": "FilterError: on_event does not compile: ..."}]}

``error`` is there for a saved watch that is not running because it could not start as saved
(shown in ``watch_list`` too): the spec is kept with its reason, never dropped. Version 1 files
(the same without ``error``) are read as well.

Writes are atomic (a temp file in the same directory, fsync, ``os.replace``,
fsync of the directory), so a crash leaves either the old file or the new one.
A symlinked state file is written through to its target (the temp file is made
beside the target and renamed onto it), so the link stays a link.
A file that does not parse is reported with :class:`StateFileError` and is
never overwritten: the caller stops instead of losing the user's watches. It is read like a
token file (:mod:`asyncai_watch.small_file`): a regular file of at most :data:`MAX_STATE_FILE`
bytes, so a FIFO or ``/dev/zero`` is refused at once; and a file holding more watches than the
manager may run (``max_watches``) is refused before any spec is built.

One file has one owner. The first :meth:`StateFile.load` or :meth:`StateFile.save`
takes an exclusive ``flock`` on a sidecar ``<target>.lock`` (it cannot be the state
file itself: every save replaces that inode) and writes the owner's pid, host and
command into it; a second owner, in this process or another, gets a
:class:`StateFileError` naming them. The kernel drops the lock when its holder exits
or is killed, so a crash never leaves the file stuck. ``filelock`` would take the
same ``flock`` but waits by polling and cannot say who holds it, so this is done here.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import cattrs

from asyncai_watch.core.spec import WatchSpec
from asyncai_watch.echo import clip, quoted, redact
from asyncai_watch.errors import StateFileError
from asyncai_watch.small_file import SmallFileError, read_small_file

__all__ = ["FORMAT_VERSION", "MAX_STATE_FILE", "SavedWatch", "StateFile", "WatchSpec", "converter"]

FORMAT_VERSION: Final = 2
_READS: Final = (1, 2)  # version 1: the same entries, never with an error
_HOLDER_COMMAND_CAP: Final = 300  # characters of the holder's command line kept in the lock file
_HOLDER_READ_CAP: Final = 4096

MAX_STATE_FILE: Final = 16 << 20
"""Bytes a watch state file may hold (16 MiB: hundreds of watches with the largest filters)."""


@attrs.frozen
class SavedWatch:
    """One saved watch: its spec, and why it is not running when it could not start as saved."""

    spec: WatchSpec
    error: str | None = None


@attrs.frozen(kw_only=True)
class _Entry:
    name: str
    uri: str
    on_event: str | None = None
    error: str | None = None


@attrs.frozen(kw_only=True)
class _StateDoc:
    version: int
    watches: list[_Entry]


def _strict_str(value: Any, _type: Any) -> str:
    # cattrs' default str hook calls str(); a number in a name would pass silently.
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__} {quoted(value)}")
    return value


def _strict_int(value: Any, _type: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {type(value).__name__} {quoted(value)}")
    return value


converter: Final = cattrs.Converter(forbid_extra_keys=True)
"""The one converter for the state file's shape."""
converter.register_structure_hook(str, _strict_str)
converter.register_structure_hook(int, _strict_int)
# An entry without an error is written without the key (what version 1 wrote).
converter.register_unstructure_hook(
    _Entry, lambda e: {k: v for k, v in attrs.asdict(e).items() if k != "error" or v is not None}
)


class StateFile:
    """Load and atomically save the watch specs at ``path``; the first load or save makes this
    object the file's one owner until :meth:`close` (or the process ends)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._lock_fd: int | None = None

    def __enter__(self) -> StateFile:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Give up ownership (the saved file stays as it is)."""
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)  # closing the only descriptor drops the flock

    def _target(self) -> Path:
        # Every name of the file (a symlink, a relative path) meets at its real path.
        return Path(os.path.realpath(self.path))

    def _own(self) -> None:
        """Take the sidecar lock, or raise StateFileError naming whoever holds it."""
        if self._lock_fd is not None:
            return
        target = self._target()
        lock_path = target.with_name(target.name + ".lock")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StateFileError(
                f"watch state file {self.path}: cannot open its lock file {lock_path}: {exc.strerror or exc}"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _holder(fd)
            os.close(fd)
            if isinstance(exc, BlockingIOError):
                raise StateFileError(
                    f"watch state file {self.path} is in use by another process ({holder}); one state "
                    "file has one owner: stop that process, or give this one its own --watch-state file"
                ) from None
            raise StateFileError(
                f"watch state file {self.path}: cannot lock {lock_path}: {exc.strerror or exc}"
            ) from exc
        with contextlib.suppress(OSError):  # the lock holds without the note; the note only names us
            os.ftruncate(fd, 0)
            os.pwrite(fd, _holder_note().encode(), 0)
        self._lock_fd = fd

    def load(self, *, max_watches: int | None = None) -> list[SavedWatch]:
        """The saved watches; ``[]`` when the file does not exist yet.

        Raises :class:`StateFileError` (one line, naming the path and what is wrong) when the
        file exists but is not a regular file of at most :data:`MAX_STATE_FILE` bytes holding a
        valid state file, holds more than ``max_watches`` watches (none is started then), or is
        owned by another :class:`StateFile` (in this process or another).
        """
        self._own()
        try:
            return self._load(max_watches)
        except StateFileError:
            self.close()  # the caller stops; a later fixed run must not find the file held
            raise

    def _load(self, max_watches: int | None) -> list[SavedWatch]:
        try:
            raw, _ = read_small_file(
                self.path,
                cap=MAX_STATE_FILE,
                where=f"watch state file {self.path}",
                holds=f"a state file holds watch specs (at most {MAX_STATE_FILE:,} bytes, MAX_STATE_FILE)",
            )
        except FileNotFoundError:
            return []
        except SmallFileError as exc:
            raise StateFileError(str(exc)) from None
        try:
            data = json.loads(raw)
        except RecursionError:
            # The decoder recurses once per nesting level; a file of 100k "[" would otherwise
            # escape as a RecursionError with a traceback instead of naming the file.
            raise StateFileError(
                f"watch state file {self.path} is nested too deeply to be a watch state file; "
                'it was left untouched. Fix or remove it; the expected shape is {"version": 2, '
                '"watches": [{"name": ..., "uri": ..., "on_event": ...}]}'
            ) from None
        except ValueError as exc:  # not UTF-8, not JSON, or an integer of more than 4,300 digits
            raise StateFileError(
                f"watch state file {self.path} is not valid JSON ({clip(str(exc))}); it was left "
                'untouched. Fix or remove it; the expected shape is {"version": 2, "watches": '
                '[{"name": ..., "uri": ..., "on_event": ...}]}'
            ) from None
        watches = data.get("watches") if isinstance(data, dict) else None
        if max_watches is not None and isinstance(watches, list) and len(watches) > max_watches:
            # Refused before a spec is built: memory and start-up stay bounded by the limit.
            raise StateFileError(
                f"watch state file {self.path} holds {len(watches):,} saved watches, more than the "
                f"{max_watches} allowed at once (max_watches; --max-watches); it was left untouched. "
                f"Start with --max-watches {len(watches)} (Limits(max_watches={len(watches)})), or "
                "remove watches from the file"
            )
        if isinstance(data, dict) and data.get("version") not in (None, *_READS):
            raise StateFileError(
                f"watch state file {self.path} has version {quoted(data.get('version'))}; "
                f"this asyncai-watch reads versions {' and '.join(map(str, _READS))}. It was left untouched."
            )
        try:
            doc = converter.structure(data, _StateDoc)
        except RecursionError:  # a value nested just under the decoder's limit
            raise StateFileError(
                f"watch state file {self.path} is nested too deeply to be a watch state file; "
                "it was left untouched"
            ) from None
        except Exception as exc:  # cattrs raises ClassValidationError / TypeError / KeyError
            detail = (
                "; ".join(cattrs.transform_error(exc))
                if isinstance(exc, cattrs.BaseValidationError)
                else str(exc)
            )
            raise StateFileError(
                f"watch state file {self.path} does not have the expected shape ({detail}); "
                'it was left untouched. Expected {"version": 2, "watches": '
                '[{"name": str, "uri": str, "on_event": str | null, "error"?: str}]}'
            ) from exc
        names = [e.name for e in doc.watches]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise StateFileError(
                f"watch state file {self.path} names a watch more than once ({', '.join(dupes)}); "
                "it was left untouched"
            )
        return [
            SavedWatch(WatchSpec(name=e.name, uri=e.uri, on_event=e.on_event), e.error) for e in doc.watches
        ]

    def save(self, watches: Sequence[SavedWatch | WatchSpec]) -> None:
        """Replace the file with ``watches``, atomically and durably (through a symlink, onto its target)."""
        self._own()
        entries = []
        for watch in watches:
            saved = watch if isinstance(watch, SavedWatch) else SavedWatch(watch)
            spec = saved.spec
            entries.append(_Entry(name=spec.name, uri=spec.uri, on_event=spec.on_event, error=saved.error))
        doc = _StateDoc(version=FORMAT_VERSION, watches=entries)
        text = json.dumps(converter.unstructure(doc), indent=2, ensure_ascii=False) + "\n"
        target = self._target()
        directory = target.parent
        try:
            directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
        except OSError as exc:
            raise StateFileError(f"watch state file {self.path}: cannot write it: {exc}") from exc
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if isinstance(exc, OSError):
                raise StateFileError(f"watch state file {self.path}: cannot write it: {exc}") from exc
            raise
        _fsync_dir(directory)


def _holder_note() -> str:
    command = redact(" ".join(sys.argv) or sys.executable)  # a --server URL may carry a secret
    if len(command) > _HOLDER_COMMAND_CAP:
        command = command[:_HOLDER_COMMAND_CAP] + "…"
    return json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": command}) + "\n"


def _holder(fd: int) -> str:
    """Who holds the lock on ``fd``, as its note says (the note may be missing or half-written)."""
    try:
        note = json.loads(os.pread(fd, _HOLDER_READ_CAP, 0))
        pid, host, command = note["pid"], note["host"], note["command"]
    except (OSError, ValueError, TypeError, KeyError):
        return "it did not say which"
    return f"pid {pid} on {host}: {str(command)[: _HOLDER_COMMAND_CAP + 1]}"


def _fsync_dir(directory: Path) -> None:
    # The rename is durable only once the directory entry is flushed.
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory; the replace itself already happened
    finally:
        os.close(dfd)
