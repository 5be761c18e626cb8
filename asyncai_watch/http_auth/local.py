"""Bearer tokens for loopback servers, handed over in a private per-user runtime directory.

A server bound to loopback with no token of its own (no ``--token-file``, ``$ASYNCAI_HTTP_TOKEN``
or OAuth) still authenticates: it generates a random token for the run and writes it to
``<runtime dir>/<host>-<port>.token`` (mode 0600), removed when it stops. The runtime directory is
``$XDG_RUNTIME_DIR/asyncai-watch`` or, without that variable, ``<temp dir>/asyncai-watch-<uid>``;
it must be a directory owned by this user with mode 0700, and each token file a regular file
owned by this user that no one else may read. Anything else is refused with the path named: a
file another user planted there would hand our clients a token of theirs' choosing (and their
server our requests). Jupyter's runtime-dir connection files are the model.

Our clients (:meth:`McpResourceSource.http <asyncai_watch.mcp.client.McpResourceSource.http>`,
so the CLI, the agent and ``serve``'s upstreams) send that token to a loopback URL when given no
``Authorization`` header and no ``auth``: :func:`local_headers`. Other local programs get the token
from the file the server names on stderr at start-up.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import stat
import tempfile
import urllib.parse
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final

__all__ = [
    "MAX_TOKEN_FILE",
    "LocalTokenError",
    "find_token",
    "local_headers",
    "published_token",
    "runtime_dir",
    "token_path",
]

MAX_TOKEN_FILE: Final = 4096
"""Bytes a runtime token file may hold (ours hold 43)."""
_LOOPBACK_NAMES: Final = ("127.0.0.1", "localhost", "::1", "0.0.0.0", "::")


class LocalTokenError(PermissionError, ValueError):
    """The runtime directory or a token file in it is not this user's private one; the path is named.

    A :class:`PermissionError`, so a server that cannot publish its token exits with the one line
    its other start-up OS errors get (a taken port), not a traceback."""


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def runtime_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where token files live: ``$XDG_RUNTIME_DIR/asyncai-watch`` or ``<temp dir>/asyncai-watch-<uid>``."""
    environ = os.environ if env is None else env
    base = environ.get("XDG_RUNTIME_DIR", "")
    if base and os.path.isabs(base) and os.path.isdir(base):
        return Path(base) / "asyncai-watch"
    return Path(tempfile.gettempdir()) / f"asyncai-watch-{os.getuid()}"


def _name(host: str) -> str:
    return host.strip("[]").lower().replace(":", "_")  # ``::1`` -> ``__1``: one path component


def token_path(host: str, port: int, env: Mapping[str, str] | None = None) -> Path:
    """The token file of a server bound to ``host:port``."""
    return runtime_dir(env) / f"{_name(host)}-{port}.token"


def _check_private(path: Path, info: os.stat_result, kind: str) -> None:
    mode = stat.S_IMODE(info.st_mode)
    if info.st_uid != os.getuid():
        raise LocalTokenError(
            f"refusing the token {kind} {str(path)!r}: it belongs to uid {info.st_uid}, not to you "
            f"(uid {os.getuid()}); only your own {kind} is trusted: remove it, or set $XDG_RUNTIME_DIR"
        )
    if mode & 0o077:
        want = "0700" if kind == "directory" else "0600"
        raise LocalTokenError(
            f"refusing the token {kind} {str(path)!r}: mode {mode:04o} lets others in; "
            f"it must be {want} (chmod {want} it, or remove it)"
        )


def _checked_dir(directory: Path, *, create: bool) -> bool:
    """Whether ``directory`` exists (made 0700 when ``create``); it must be ours and private."""
    if create:
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=0o700, parents=False)
            directory.chmod(0o700)  # mkdir's mode is masked by the umask
    try:
        info = directory.lstat()
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(info.st_mode):
        raise LocalTokenError(
            f"refusing the token directory {str(directory)!r}: it is not a directory (a symlink or file); remove it"
        )
    _check_private(directory, info, "directory")
    return True


@contextlib.contextmanager
def published_token(host: str, port: int, env: Mapping[str, str] | None = None) -> Iterator[tuple[str, Path]]:
    """A new random token for the server on ``host:port``, in its token file until the block ends."""
    path = token_path(host, port, env)
    _checked_dir(path.parent, create=True)
    token = secrets.token_urlsafe(32)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # left by a server that was killed: the port is ours now
    fd = os.open(path, flags, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, token.encode() + b"\n")
        ours = os.fstat(fd)
    finally:
        os.close(fd)
    try:
        yield token, path
    finally:
        with contextlib.suppress(FileNotFoundError):
            now = path.lstat()
            if (now.st_dev, now.st_ino) == (ours.st_dev, ours.st_ino):  # not a later server's
                path.unlink()


def _read(path: Path) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LocalTokenError(f"cannot read the token file {str(path)!r}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise LocalTokenError(f"refusing the token file {str(path)!r}: not a regular file; remove it")
        _check_private(path, info, "file")
        data = file.read(MAX_TOKEN_FILE + 1)
    text = data.decode("utf-8", "replace").strip()
    if len(data) > MAX_TOKEN_FILE or not text or any(not c.isprintable() for c in text):
        raise LocalTokenError(
            f"refusing the token file {str(path)!r}: it must hold one line of printable text "
            f"of at most {MAX_TOKEN_FILE} bytes; remove it"
        )
    return text


def find_token(url: str, env: Mapping[str, str] | None = None) -> str | None:
    """The token a loopback server at ``url`` published for this user, or None (not loopback, no file)."""
    try:
        parts = urllib.parse.urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if host is None or not _is_loopback(host):
        return None
    port = port if port is not None else (443 if parts.scheme == "https" else 80)
    directory = runtime_dir(env)
    if not _checked_dir(directory, create=False):
        return None
    # The URL's own name first; then the other loopback names a server may have bound.
    for name in dict.fromkeys((host, *_LOOPBACK_NAMES)):
        token = _read(directory / f"{_name(name)}-{port}.token")
        if token is not None:
            return token
    return None


def local_headers(
    url: str, headers: Mapping[str, str] | None, *, has_auth: bool, env: Mapping[str, str] | None = None
) -> Mapping[str, str] | None:
    """``headers`` plus the loopback server's published token when the caller brought no credentials."""
    if has_auth or any(k.lower() == "authorization" for k in headers or {}):
        return headers
    token = find_token(url, env)
    if token is None:
        return headers
    return {**(headers or {}), "Authorization": f"Bearer {token}"}
