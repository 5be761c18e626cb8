"""What becomes of saved watches after a restart, and the one notice that says so.

Pure. Restoring never loses a saved spec: a watch that cannot start is listed ``restore_failed``
with its reason and stays in the state file with it. What differs is what happens next (:func:`fate`):

- ``"retry"``: it may start later (its server is down or slow, the filter
  engine failed, the filter timed out on its sample while a server it reads was slow): it is
  tried again after the resubscribe backoff's delays (1, 2, 4, 8, 16 s by default);
- ``"broken"``: it cannot start as saved (an invalid name; a filter that does not compile or
  fails on the sample): it waits for the user, who fixes it with ``watch_start`` or drops it
  with ``watch_stop``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import attrs

from asyncai_watch.core.notice import SOURCE_RESTORE, Notice
from asyncai_watch.core.resume import Outcome
from asyncai_watch.core.spec import WatchSpec
from asyncai_watch.errors import FilterEngineError, FilterError, FilterTimeoutError, InvalidWatchNameError

__all__ = ["Fate", "Restore", "fate"]

Fate = Literal["retry", "broken"]


def fate(error: Exception) -> Fate:
    """Whether a saved spec whose start failed with ``error`` may start later (``"retry"``) or
    cannot as saved (``"broken"``): only a bad name or a filter that can never run is broken."""
    if isinstance(error, InvalidWatchNameError):
        return "broken"
    if isinstance(error, FilterError) and not isinstance(error, FilterEngineError | FilterTimeoutError):
        return "broken"
    return "retry"


@attrs.define
class Restore:
    """The outcome of restoring saved specs, one :meth:`add` per spec, then :meth:`notice`."""

    path: str
    delays: Sequence[float] = ()
    """The retry delays of a watch that may start later (the resubscribe backoff's)."""
    restored: list[WatchSpec] = attrs.field(factory=list)
    retrying: list[tuple[WatchSpec, str]] = attrs.field(factory=list)
    broken: list[tuple[WatchSpec, str]] = attrs.field(factory=list)
    resuming: bool = False
    """With a resume store: each restored watch's line says what it missed (:attr:`resumed`)."""
    resumed: dict[str, Outcome] = attrs.field(factory=dict)

    def add(self, spec: WatchSpec, error: Exception | None, reason: str = "") -> Fate | None:
        """Record ``spec``'s start: ``None`` when it started, else its fate."""
        if error is None:
            self.restored.append(spec)
            return None
        what = fate(error)
        (self.retrying if what == "retry" else self.broken).append((spec, reason))
        return what

    def notice(self) -> Notice:
        """How many came back, and each spec's fate with its reason."""
        total = len(self.restored) + len(self.retrying) + len(self.broken)
        if self.resuming:
            head = (
                f"Restored {len(self.restored)} of {total} watches from {self.path}; each resumed from "
                "where it stood (what changed while the agent was down follows, one notice per watch)."
            )
        else:
            head = (
                f"Restored {len(self.restored)} of {total} watches from {self.path} "
                "(baselines are fresh: changes made while the agent was down may be missing)."
            )
        lines = [head]
        lines += [
            self.resumed[s.name].line(s.name, s.uri)
            if s.name in self.resumed
            else f"- {s.name} {s.uri}: restored"
            for s in self.restored
        ]
        after = ", ".join(f"{d:g}" for d in self.delays)
        lines += [
            f"- {s.name} {s.uri}: not started yet, tried again after {after} s (still saved): {err}"
            if after
            else f"- {s.name} {s.uri}: not started, still saved (watch_start it again or watch_stop it): {err}"
            for s, err in self.retrying
        ]
        lines += [
            f"- {s.name} {s.uri}: cannot start as saved, kept with its reason (fix it with watch_start "
            f"or drop it with watch_stop): {err}"
            for s, err in self.broken
        ]
        meta = {
            "path": self.path,
            "restored": str(len(self.restored)),
            "retrying": str(len(self.retrying)),
            "restore_failed": str(len(self.retrying) + len(self.broken)),
        }
        return Notice(SOURCE_RESTORE, "\n".join(lines), meta=meta)


def restored_later(spec: WatchSpec, attempts: int) -> Notice:
    """The notice of a saved watch that started on a later attempt."""
    return Notice(
        SOURCE_RESTORE,
        f"Restored {spec.name} {spec.uri} on attempt {attempts + 1} (it could not start at first).",
        meta={"path": "", "restored": "1", "retrying": "0", "restore_failed": "0"},
    )
