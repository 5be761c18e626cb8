"""Path safety: the server serves only under the roots it was started with.

Every path that arrives in a URI goes through :meth:`Roots.resolve` before the
server touches the file system. A path is refused when

- it is not absolute (``file://config.json`` names a *host* in URI terms),
- it has a ``..`` component (also when percent-encoded: templates decode first),
- it is lexically outside every root (an absolute path elsewhere), or
- it resolves, through a symlink, to a place outside every root.

The last check is repeated on the opened descriptor (:func:`check_fd_inside`),
so a symlink swapped in between the check and the ``open`` is caught as well.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import PurePosixPath

import attrs

__all__ = ["PathRefused", "RootError", "Roots", "check_fd_inside", "is_within"]


class PathRefused(ValueError):
    """A requested path is not served: the message names the path and the roots."""


class RootError(ValueError):
    """A root given at startup cannot be served (missing, not a directory)."""


def is_within(path: str, root: str) -> bool:
    """``path`` is ``root`` or below it (both absolute, normalised)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


@attrs.frozen
class Roots:
    """The served directories, as given and fully resolved (symlinks followed)."""

    given: tuple[str, ...]
    real: tuple[str, ...]

    @classmethod
    def from_args(cls, roots: Sequence[str]) -> Roots:
        if not roots:
            raise RootError("no ROOT given: pass one or more existing directories to serve")
        given: list[str] = []
        real: list[str] = []
        for raw in roots:
            absolute = os.path.normpath(os.path.abspath(os.path.expanduser(raw)))
            if not os.path.exists(absolute):
                raise RootError(f"root {raw!r} does not exist; ROOT must be an existing directory")
            if not os.path.isdir(absolute):
                raise RootError(f"root {raw!r} is not a directory; ROOT must be an existing directory")
            given.append(absolute)
            real.append(os.path.realpath(absolute))
        return cls(tuple(given), tuple(real))

    def describe(self) -> str:
        return ", ".join(self.real)

    def _refuse(self, path: str, why: str) -> PathRefused:
        return PathRefused(f"{path!r} is refused: {why}; this server serves only under: {self.describe()}")

    def resolve(self, path: str) -> str:
        """The real (symlink-free) absolute path for ``path``, or raise :class:`PathRefused`.

        The path need not exist; its existing prefix is resolved.
        """
        if not path.startswith("/"):
            raise self._refuse(
                path,
                "paths must be absolute (a file URI has three slashes: file:///abs/path)",
            )
        if ".." in PurePosixPath(path).parts:
            raise self._refuse(path, "'..' components are not allowed")
        if "\x00" in path:
            raise self._refuse(path, "paths must not contain NUL bytes")
        lexical = os.path.normpath(path)
        if not any(is_within(lexical, root) for root in (*self.given, *self.real)):
            raise self._refuse(path, "it is outside the served roots")
        real = os.path.realpath(lexical)
        if not self.contains_real(real):
            # Where the link leads is not said: that would map the file system outside the roots.
            raise self._refuse(path, "it resolves through a symlink to a place outside the served roots")
        return real

    def contains_real(self, real: str) -> bool:
        return any(is_within(real, root) for root in self.real)


def check_fd_inside(fd: int, roots: Roots, shown: str) -> None:
    """Refuse an opened descriptor whose file is not under a root (a symlink raced in)."""
    try:
        actual = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # no /proc: the pre-open check stands alone
        return
    if not roots.contains_real(actual):
        raise PathRefused(
            f"{shown!r} is refused: it was replaced by a link to a place outside the served roots; "
            f"this server serves only under: {roots.describe()}"
        )
