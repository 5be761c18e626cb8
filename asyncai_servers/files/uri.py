"""The files server's URIs, parsed into what a watcher needs (sans-IO but for resolving the path).

``file://{+path}`` is a file's content as state; ``dir-events://{+path}{?recursive,glob,exclude}``
a directory's changes as an event log. A path is resolved against the served roots
(:class:`~asyncai_servers.files.paths.Roots`), which refuses one outside them. Every rejection
names what was wrong and what is accepted: the model reads these errors and corrects its call.
"""

from __future__ import annotations

import urllib.parse
from pathlib import PurePosixPath
from typing import Final

import attrs
from mcp import UriTemplate

from asyncai_servers.files.dirlog import DirSpec
from asyncai_servers.files.paths import Roots

__all__ = [
    "DIR_TEMPLATE",
    "FILE_TEMPLATE",
    "MAX_EXCLUDES",
    "MAX_GLOB_CHARS",
    "DirTarget",
    "FileTarget",
    "Target",
    "UriError",
    "parse_uri",
]

FILE_TEMPLATE: Final = "file://{+path}"
DIR_TEMPLATE: Final = "dir-events://{+path}{?recursive,glob,exclude}"
_FILE = UriTemplate.parse(FILE_TEMPLATE)
_DIR = UriTemplate.parse(DIR_TEMPLATE)

MAX_EXCLUDES: Final = 32
"""Globs one ``exclude`` may list."""
MAX_GLOB_CHARS: Final = 256
"""Characters of one ``exclude`` glob."""
_EXCLUDE_HELP: Final = (
    f"exclude takes up to {MAX_EXCLUDES} globs of at most {MAX_GLOB_CHARS} characters, comma-separated, "
    "each relative to the directory, e.g. exclude=.git,node_modules,*.tmp"
)

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off", ""}


class UriError(ValueError):
    """A URI this server does not serve; the message says what is accepted."""


@attrs.frozen
class FileTarget:
    path: str  # real path of the file


@attrs.frozen
class DirTarget:
    spec: DirSpec


Target = FileTarget | DirTarget


def _bool_param(name: str, value: object, uri: str) -> bool:
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise UriError(f"{uri}: {name}={value!r} is not a boolean; use {name}=true or {name}=false")


def _exclude_param(value: object, uri: str) -> tuple[str, ...]:
    """The ``exclude`` globs, each checked: present, relative, bounded, and one PurePath can match."""
    if len(urllib.parse.parse_qs(urllib.parse.urlsplit(uri).query).get("exclude", ())) > 1:
        raise UriError(f"{uri}: exclude is given more than once; {_EXCLUDE_HELP}")
    globs = tuple(str(value).split(","))
    if len(globs) > MAX_EXCLUDES:
        raise UriError(f"{uri}: exclude lists {len(globs)} globs; {_EXCLUDE_HELP}")
    for glob in globs:
        problem = None
        if not glob.strip():
            problem = "an empty glob"
        elif len(glob) > MAX_GLOB_CHARS:
            problem = f"a glob of {len(glob)} characters"
        elif glob.startswith("/"):
            problem = f"the absolute glob {glob!r}"
        else:
            try:
                PurePosixPath("x").match(glob)
            except ValueError as exc:
                problem = f"the glob {glob!r} ({exc})"
        if problem is not None:
            raise UriError(f"{uri}: exclude holds {problem}; {_EXCLUDE_HELP}")
    return globs


def parse_uri(uri: str, roots: Roots) -> Target:
    """The target a URI names, or raise :class:`UriError` / :class:`PathRefused`."""
    if uri.startswith("dir-events:"):
        found = _DIR.match(uri)
        if found is None or not isinstance(found.get("path"), str):
            raise UriError(
                f"{uri!r} does not match {DIR_TEMPLATE}; e.g. dir-events://{roots.real[0]}?recursive=true"
            )
        real = roots.resolve(str(found["path"]))
        recursive = _bool_param("recursive", found.get("recursive", "false"), uri)
        glob = found.get("glob")
        exclude = _exclude_param(found["exclude"], uri) if "exclude" in found else ()
        return DirTarget(DirSpec(real, recursive, str(glob) if glob else None, exclude))
    if uri.startswith("file:"):
        found = _FILE.match(uri)
        if found is None or not isinstance(found.get("path"), str):
            raise UriError(
                f"{uri!r} does not match {FILE_TEMPLATE} (no query part); e.g. file://{roots.real[0]}/config.json"
            )
        return FileTarget(roots.resolve(str(found["path"])))
    raise UriError(
        f"{uri!r} is not served here: this server serves {FILE_TEMPLATE} and {DIR_TEMPLATE} "
        f"under {roots.describe()}"
    )
