"""The one notice that says which saved watches came back after a restart.

Pure. A spec that can never start (a bad name or filter) is dropped from the state file; one
that may start later (its server is down, a limit is reached, the filter engine failed) is
kept and listed ``restore_failed``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import attrs

from asyncai_watch.core.notice import SOURCE_RESTORE, Notice
from asyncai_watch.core.spec import WatchSpec
from asyncai_watch.errors import FilterEngineError, FilterError, InvalidWatchNameError

__all__ = ["Restore", "fate"]


def fate(error: Exception) -> Literal["dropped", "kept"]:
    """What becomes of a saved spec whose start failed with ``error``: only a spec that can
    never start (a bad name or filter) is dropped; anything that may pass is kept."""
    if isinstance(error, InvalidWatchNameError | FilterError) and not isinstance(error, FilterEngineError):
        return "dropped"
    return "kept"


@attrs.define
class Restore:
    """The outcome of restoring saved specs, one :meth:`add` per spec, then :meth:`notice`."""

    path: str
    restored: list[WatchSpec] = attrs.field(factory=list)
    kept: list[tuple[WatchSpec, str]] = attrs.field(factory=list)
    dropped: list[tuple[WatchSpec, str]] = attrs.field(factory=list)

    def add(self, spec: WatchSpec, error: Exception | None, reason: str = "") -> None:
        if error is None:
            self.restored.append(spec)
        elif fate(error) == "dropped":
            self.dropped.append((spec, reason))
        else:
            self.kept.append((spec, reason))

    def notice(self) -> Notice:
        return restore_notice(self.path, self.restored, self.kept, self.dropped)


def restore_notice(
    path: str,
    restored: Sequence[WatchSpec],
    kept: Sequence[tuple[WatchSpec, str]],
    dropped: Sequence[tuple[WatchSpec, str]],
) -> Notice:
    """The restore notice: how many came back, and each spec's fate with its reason."""
    total = len(restored) + len(kept) + len(dropped)
    lines = [
        f"Restored {len(restored)} of {total} watches from {path} "
        "(baselines are fresh: changes made while the agent was down may be missing)."
    ]
    lines += [f"- {s.name} {s.uri}: restored" for s in restored]
    lines += [
        f"- {s.name} {s.uri}: restore failed, kept (watch_start it again or watch_stop it): {err}"
        for s, err in kept
    ]
    lines += [f"- {s.name} {s.uri}: dropped, it can never start: {err}" for s, err in dropped]
    meta = {
        "path": path,
        "restored": str(len(restored)),
        "restore_failed": str(len(kept)),
        "dropped": str(len(dropped)),
    }
    return Notice(SOURCE_RESTORE, "\n".join(lines), meta=meta)
