"""Read a small file the user named (a token file, a ``--watch-state`` file) without trusting it.

:func:`read_small_file` opens the path non-blocking (a FIFO with no writer would block the open or
the read for good) and checks it with ``fstat`` before a byte is read, so a FIFO, a socket, a
device (``/dev/zero``) or a directory is refused at once; a regular file is read up to ``cap``
bytes and refused past it, even when it grows between the ``fstat`` and the read. A symlink is
followed: the user named it, and what it points at is checked like any file.

Errors are :class:`SmallFileError` (a ``ValueError``), one line, naming the file and what is
accepted, never quoting the content. ``FileNotFoundError`` passes through unchanged, for the
callers to whom a missing file means something (a state file not written yet).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Final

__all__ = ["SmallFileError", "file_kind", "read_small_file"]

_KINDS: Final = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class SmallFileError(ValueError):
    """A file that cannot be read as a small regular file; the message says why."""


def file_kind(mode: int) -> str:
    """What a non-regular file is, for an error: ``"a FIFO"``, ``"a socket"``, ``"a directory"``, ..."""
    return next((name for test, name in _KINDS if test(mode)), "not a file")


def read_small_file(path: Path | str, *, cap: int, where: str, holds: str) -> tuple[bytes, os.stat_result]:
    """The bytes of regular file ``path`` (at most ``cap``) and its ``fstat``.

    ``where`` starts every error (e.g. ``"--token-file: '/run/token'"``); ``holds`` ends the
    too-large one (``"a token file holds one token"``).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        raise
    except OSError as exc:
        kind = _kind_at(path)  # a socket cannot be opened at all (ENXIO): say what it is
        if kind is not None:
            raise SmallFileError(f"{where} is not a regular file ({kind}); give a file") from None
        raise SmallFileError(f"{where}: cannot read it: {exc.strerror or exc}") from None
    too_large = f"{where} is larger than {cap:,} bytes; {holds}"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SmallFileError(f"{where} is not a regular file ({file_kind(info.st_mode)}); give a file")
        if info.st_size > cap:
            raise SmallFileError(too_large)
        chunks: list[bytes] = []
        size = 0
        while size <= cap:  # the file may have grown since fstat
            chunk = os.read(fd, cap + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise SmallFileError(f"{where}: cannot read it: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if size > cap:
        raise SmallFileError(too_large)
    return b"".join(chunks), info


def _kind_at(path: Path | str) -> str | None:
    """What ``path`` is when it is there but not a regular file; ``None`` otherwise."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return None if stat.S_ISREG(mode) else file_kind(mode)
