"""The ``--watch-state`` file: watch specs saved on every start and stop.

The file is JSON, documented by :data:`converter` and docs/watch-manager.md::

    {"version": 1, "watches": [{"name": "notes", "uri": "memo://notes", "on_event": null}]}

Writes are atomic (a temp file in the same directory, fsync, ``os.replace``,
fsync of the directory), so a crash leaves either the old file or the new one.
A file that does not parse is reported with :class:`StateFileError` and is
never overwritten: the caller stops instead of losing the user's watches.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import cattrs

from asyncai_watch.core.spec import WatchSpec
from asyncai_watch.errors import StateFileError

__all__ = ["FORMAT_VERSION", "StateFile", "WatchSpec", "converter"]

FORMAT_VERSION: Final = 1


@attrs.frozen(kw_only=True)
class _StateDoc:
    version: int
    watches: list[WatchSpec]


def _strict_str(value: Any, _type: Any) -> str:
    # cattrs' default str hook calls str(); a number in a name would pass silently.
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {type(value).__name__} {value!r}")
    return value


def _strict_int(value: Any, _type: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {type(value).__name__} {value!r}")
    return value


converter: Final = cattrs.Converter(forbid_extra_keys=True)
"""The one converter for the state file's shape."""
converter.register_structure_hook(str, _strict_str)
converter.register_structure_hook(int, _strict_int)


class StateFile:
    """Load and atomically save the watch specs at ``path``."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def load(self) -> list[WatchSpec]:
        """The saved specs; ``[]`` when the file does not exist yet.

        Raises :class:`StateFileError` (naming the path and the parse error)
        when the file exists but is not a valid state file.
        """
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StateFileError(f"watch state file {self.path}: cannot read it: {exc}") from exc
        try:
            data = json.loads(raw)
        except RecursionError:
            # The decoder recurses once per nesting level; a file of 100k "[" would otherwise
            # escape as a RecursionError with a traceback instead of naming the file.
            raise StateFileError(
                f"watch state file {self.path} is nested too deeply to be a watch state file; "
                'it was left untouched. Fix or remove it; the expected shape is {"version": 1, '
                '"watches": [{"name": ..., "uri": ..., "on_event": ...}]}'
            ) from None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise StateFileError(
                f"watch state file {self.path} is not valid JSON ({exc}); it was left untouched. "
                'Fix or remove it; the expected shape is {"version": 1, "watches": '
                '[{"name": ..., "uri": ..., "on_event": ...}]}'
            ) from exc
        if isinstance(data, dict) and data.get("version") not in (None, FORMAT_VERSION):
            raise StateFileError(
                f"watch state file {self.path} has version {data.get('version')!r}; "
                f"this asyncai-watch reads version {FORMAT_VERSION}. It was left untouched."
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
                'it was left untouched. Expected {"version": 1, "watches": '
                '[{"name": str, "uri": str, "on_event": str | null}]}'
            ) from exc
        names = [s.name for s in doc.watches]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise StateFileError(
                f"watch state file {self.path} names a watch more than once ({', '.join(dupes)}); "
                "it was left untouched"
            )
        return list(doc.watches)

    def save(self, specs: Sequence[WatchSpec]) -> None:
        """Replace the file with ``specs``, atomically and durably."""
        doc = _StateDoc(version=FORMAT_VERSION, watches=list(specs))
        text = json.dumps(converter.unstructure(doc), indent=2, ensure_ascii=False) + "\n"
        directory = self.path.parent
        try:
            directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=directory)
        except OSError as exc:
            raise StateFileError(f"watch state file {self.path}: cannot write it: {exc}") from exc
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if isinstance(exc, OSError):
                raise StateFileError(f"watch state file {self.path}: cannot write it: {exc}") from exc
            raise
        _fsync_dir(directory)


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
