"""One-line secrets read from files (``--token-file``, ``--oauth-client-secret-file``), bounded."""

from __future__ import annotations

import shlex
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Final

from asyncai_watch.small_file import read_small_file

__all__ = ["MAX_SECRET_FILE", "read_secret", "warn_on_stderr"]

MAX_SECRET_FILE: Final = 65536
"""Bytes a ``--token-file`` or ``--oauth-client-secret-file`` may hold (a JWT is a few KB)."""


def read_secret(path: Path, option: str, warn: Callable[[str], None]) -> str:
    """The one-line secret in ``path``: a regular file of at most :data:`MAX_SECRET_FILE` bytes,
    read by :func:`~asyncai_watch.small_file.read_small_file` (a FIFO, a device such as
    ``/dev/zero`` or a directory is refused before a byte is read; a symlink is followed: a
    mounted secret, Kubernetes', is one). Errors are one line and never quote the content.
    """
    where = f"{option}: {str(path)!r}"
    try:
        raw, info = read_small_file(
            path, cap=MAX_SECRET_FILE, where=where, holds="a token file holds one token"
        )
    except FileNotFoundError as exc:
        raise ValueError(f"{option}: cannot read {str(path)!r}: {exc.strerror or exc}") from None
    try:
        value = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ValueError(f"{where} is not UTF-8 text; it must hold the secret on one line") from None
    if not value:
        raise ValueError(f"{where} is empty")
    bad = next((c for c in value if c in "\r\n\x00" or not c.isprintable()), None)
    if bad is not None:
        what = {"\r": "a line break", "\n": "a line break", "\x00": "a NUL"}.get(bad, "a control character")
        raise ValueError(
            f"{where} holds {what} inside the secret; it must be one line of printable text "
            "(a trailing newline is fine)"
        )
    if info.st_mode & 0o077:
        warn(
            f"{where} can be read by others (mode {stat.S_IMODE(info.st_mode):04o}); "
            f"it holds a secret: chmod 600 {shlex.quote(str(path))}"
        )
    return value


def warn_on_stderr(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)
