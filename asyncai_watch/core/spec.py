"""What a watch is: its name, URI and filter source, checked where they come in.

Pure. :meth:`WatchSpec.checked` is the one place a ``watch_start``'s arguments are validated;
the error says what was wrong and what is accepted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

import attrs

from asyncai_watch.core.echo import clip, quoted
from asyncai_watch.errors import FilterError, InvalidWatchNameError, LimitError, WatchError

__all__ = ["WatchSpec", "check_room"]

_NAME_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}")


@attrs.frozen(kw_only=True)
class WatchSpec:
    """What is needed to start a watch again: its name, URI and filter source."""

    name: str
    uri: str
    on_event: str | None = None

    @classmethod
    def checked(cls, name: object, uri: object, on_event: object = None) -> WatchSpec:
        """A spec from untrusted arguments; raises :class:`InvalidWatchNameError`,
        :class:`WatchError` (a bad URI) or :class:`FilterError` (``on_event`` is not source text)."""
        if not isinstance(name, str):
            raise InvalidWatchNameError(f"watch_start: name must be a string, got {_kind(name)}")
        if not _NAME_RE.fullmatch(name):
            raise InvalidWatchNameError(
                f"watch_start: invalid watch name {quoted(name)}; use 1-64 characters from letters, digits, "
                "'_', '-', '.', starting with a letter or '_' (e.g. \"notes\", \"cm-default\")"
            )
        if not isinstance(uri, str) or not uri.strip():
            raise WatchError(f"watch_start: uri must be a non-empty string, got {quoted(uri)}")
        if on_event is not None and not isinstance(on_event, str):
            raise FilterError(
                "watch_start: on_event must be Python source text (a str) or None, got "
                f"{_kind(on_event)}. A function object cannot cross into the filter sandbox: "
                "pass the code as a string, e.g. "
                """on_event='event["type"] + " " + str(event["key"])'"""
            )
        if on_event is not None and not on_event.strip():
            raise FilterError(
                "watch_start: on_event is empty; pass None for the default line or Python source"
            )
        return cls(name=name, uri=uri, on_event=on_event)


def check_room(spec: WatchSpec, existing: Mapping[str, tuple[str, str]], max_watches: int) -> None:
    """Raise unless ``spec`` may start beside ``existing`` (name -> (uri, status)): its name is
    not taken by a running watch, and a slot is free (saved watches that are not running keep
    their slots, so a restart of one is never crowded out). O(1) unless it raises."""
    taken = existing.get(spec.name)
    if taken is not None and taken[1] in ("starting", "running"):
        raise WatchError(
            f"watch_start: a watch named {spec.name!r} already exists (uri {clip(taken[0])}); "
            f"pick another name, or watch_stop(name={spec.name!r}) first"
        )
    if len(existing) - (taken is not None) >= max_watches:
        others = [(name, status) for name, (_, status) in existing.items() if name != spec.name]
        listed = ", ".join(
            name + ("" if status == "running" else f" ({status})") for name, status in others[:20]
        )
        if len(others) > 20:
            listed += f", ... ({len(others)} in all)"
        raise LimitError(
            f"watch_start: at most {max_watches} watches (Limits.max_watches={max_watches}); "
            f"already: {listed}. Stop one with watch_stop(name=...) first"
        )


def _kind(value: object) -> str:
    if callable(value):
        name = getattr(value, "__name__", None)
        return f"{type(value).__name__} {quoted(name if isinstance(name, str) else value)}"
    return f"{type(value).__name__} {quoted(value)}"
