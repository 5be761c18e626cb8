"""Reading a file as a ``file://`` state: its text, or JSON, never a torn document.

A read is one ``open`` and reads to EOF on that descriptor, so it sees exactly
one version of the file: a writer that replaces the file by rename (write a
temp file, ``rename`` it over) is always seen whole, before or after. A writer
that rewrites in place can be caught half-way; for a ``*.json`` file that
shows up as text that does not parse, and the read body is then an in-band
error, ``{"error": "..."}``, rather than the torn text. The next good write
produces an update whose read is the document again.

Problems with the *content* (torn JSON, not UTF-8, too large, deleted while
watched) are in-band, so a watch survives them; problems with the *URI* (outside
the roots, not a regular file) raise, so ``watch_start`` fails fast.
"""

from __future__ import annotations

import errno
import json
import os
import stat

import attrs

from asyncai_servers.files.paths import PathRefused, Roots, check_fd_inside
from asyncai_watch.small_file import file_kind

__all__ = [
    "DEFAULT_MAX_BYTES",
    "JSON_MIME",
    "TEXT_MIME",
    "FileMissing",
    "FileState",
    "NotAFile",
    "Unreadable",
    "error_body",
    "read_state",
]

JSON_MIME = "application/json"
TEXT_MIME = "text/plain"
DEFAULT_MAX_BYTES = 4 * 1024 * 1024


class NotAFile(ValueError):
    """The path exists but is not a regular file (a directory, a FIFO, a socket, a device)."""


class Unreadable(ValueError):
    """The path is a regular file this server may not open (permissions, ...)."""


_SERVED = "file:// serves regular files, dir-events:// directories"


def _not_a_file(shown: str, mode: int) -> NotAFile:
    return NotAFile(f"{shown} is {file_kind(mode)}, not a regular file; {_SERVED}")


class FileMissing(FileNotFoundError):
    """The file does not exist (the caller decides: in-band or an error)."""


@attrs.frozen
class FileState:
    text: str
    mime_type: str
    is_error: bool = False


def error_body(message: str) -> FileState:
    return FileState(json.dumps({"error": message}, ensure_ascii=False), JSON_MIME, True)


def _looks_like_json_container(text: str) -> bool:
    head = text.lstrip()[:1]
    if head not in ("{", "["):
        return False
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def read_state(path: str, roots: Roots, *, shown: str, max_bytes: int = DEFAULT_MAX_BYTES) -> FileState:
    """The state body for the real path ``path`` (``shown`` is the path as requested)."""
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK  # NONBLOCK: a FIFO must not hang us
    try:
        fd = os.open(path, flags)
    except (FileNotFoundError, NotADirectoryError) as exc:  # ENOTDIR: a parent is no directory now
        raise FileMissing(f"{shown} does not exist") from exc
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PathRefused(
                f"{shown!r} is refused: it became a symlink after it was checked; "
                f"this server serves only under: {roots.describe()}"
            ) from exc
        try:  # a socket cannot be opened at all (ENXIO): say what it is
            mode = os.lstat(path).st_mode
        except OSError:
            mode = stat.S_IFREG
        if not stat.S_ISREG(mode):
            raise _not_a_file(shown, mode) from exc
        raise Unreadable(f"{shown} cannot be read: {exc.strerror or exc}") from exc
    try:
        check_fd_inside(fd, roots, shown)
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise NotAFile(
                f"{shown} is a directory; file:// serves regular files. "
                f'Watch a directory with dir-events://{path}, e.g. uri="dir-events://{path}?recursive=true"'
            )
        if not stat.S_ISREG(st.st_mode):
            raise _not_a_file(shown, st.st_mode)
        chunks: list[bytes] = []
        total = 0
        while total <= max_bytes:
            chunk = os.read(fd, max_bytes + 1 - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    finally:
        os.close(fd)
    if total > max_bytes:
        return error_body(f"{shown} is larger than {max_bytes} bytes, the most file:// serves")
    data = b"".join(chunks)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return error_body(f"{shown} is not UTF-8 text ({exc.reason} at byte {exc.start})")
    if path.lower().endswith(".json"):
        try:
            json.loads(text)
        except ValueError as exc:
            return error_body(
                f"{shown} is not valid JSON ({exc}); it may be mid-write. "
                "The watch reports the document again after the next good write"
            )
        return FileState(text, JSON_MIME)
    return FileState(text, JSON_MIME if _looks_like_json_container(text) else TEXT_MIME)
