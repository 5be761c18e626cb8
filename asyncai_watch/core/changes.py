"""Changed paths of a MODIFIED event, and dropping MODIFIED events that changed nothing.

Pure: no I/O, no clock. ``changed_paths(old, new)`` is the sorted tuple of dotted paths
whose values differ, at most ``max_depth`` keys deep: below that depth the difference is
reported at its depth-``max_depth`` prefix, and lists are compared as a whole at their path.
Server bookkeeping that changes on every write, ``metadata.resourceVersion``,
``metadata.generation`` and ``metadata.managedFields`` (top-level ``metadata`` only), is
ignored, so a write that changed nothing else is a no-op and :func:`annotate` drops it.

When ``old`` or ``new`` is not an object the value changed as a whole: its path is ``""``.
Values compare with ``==`` on parsed JSON, as in :mod:`asyncai_watch.core.diff`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from asyncai_watch.core.events import MODIFIED, Event, make_event

__all__ = ["IGNORED_METADATA", "ROOT", "annotate", "changed_paths", "modified_paths"]

IGNORED_METADATA: Final = frozenset({"resourceVersion", "generation", "managedFields"})
"""Keys of the top-level ``metadata`` object whose changes do not count."""
ROOT: Final = ""
"""The path of a value that changed as a whole (``old`` or ``new`` is not an object)."""

_MISSING: Final[Any] = object()
_NOTHING: Final[frozenset[str]] = frozenset()


_PLAIN: Final[frozenset[type]] = frozenset({str, int, float, bool, type(None), list})


def _is_map(value: Any) -> bool:
    # isinstance(x, Mapping) is an ABC check, slow; parsed JSON is dicts and plain values.
    t = type(value)
    return t is dict or (t not in _PLAIN and isinstance(value, Mapping))


def changed_paths(old: Any, new: Any, *, max_depth: int = 3) -> tuple[str, ...]:
    """Sorted dotted paths where ``old`` and ``new`` differ (see the module docstring)."""
    if type(max_depth) is not int or max_depth < 1:
        raise ValueError(f"changed_paths: max_depth must be an int >= 1, got {max_depth!r}")
    return _changed(old, new, max_depth)


def _changed(old: Any, new: Any, max_depth: int) -> tuple[str, ...]:
    if (type(old) is dict and type(new) is dict) or (_is_map(old) and _is_map(new)):
        out: list[str] = []
        _walk_top(old, new, max_depth, out)
        if len(out) > 1:
            out.sort()
        return tuple(out)
    return () if old == new else (ROOT,)


# The two walks below are the pipeline's hot loop (one call per MODIFIED event, then one
# per changed object below it): _is_map is inlined, since a call costs more than the test,
# and most values are equal, so the first tests skip them. The top level is its own
# function: it is where metadata is handled, and it needs no prefix or ignore set.


def _walk_top(old: Mapping[str, Any], new: Mapping[str, Any], max_depth: int, out: list[str]) -> None:
    get = new.get
    deeper = max_depth > 1
    missing = False  # a key of old that new lacks (then new may have keys old lacks)
    for k, a in old.items():
        b = get(k, _MISSING)
        if a is b:
            continue
        if b is _MISSING:
            missing = True
        if a == b:
            continue
        path = k if type(k) is str else str(k)
        ta = type(a)
        tb = type(b)
        if (ta is dict or (ta not in _PLAIN and isinstance(a, Mapping))) and (
            tb is dict or (tb not in _PLAIN and isinstance(b, Mapping))
        ):
            if k == "metadata":
                # Metadata counts only for what is not bookkeeping, at any depth limit.
                if _equal_but(a, b):
                    continue
                if deeper:
                    _walk(a, b, path, 2, max_depth, IGNORED_METADATA, out)
                    continue
            elif deeper:
                _walk(a, b, path, 2, max_depth, _NOTHING, out)
                continue
        out.append(path)
    # Same size and every key of old in new: the same keys (cheaper than comparing key views).
    if missing or len(new) != len(old):
        for k in new:
            if k not in old:
                out.append(k if type(k) is str else str(k))


def _walk(
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    prefix: str,
    depth: int,
    max_depth: int,
    ignore: frozenset[str],
    out: list[str],
) -> None:
    get = new.get
    deeper = depth < max_depth
    missing = False
    for k, a in old.items():
        b = get(k, _MISSING)
        if a is b:
            continue
        if b is _MISSING:
            missing = True
        if a == b or (ignore and k in ignore):
            continue
        path = f"{prefix}.{k}" if prefix else str(k)
        if deeper:
            ta = type(a)
            tb = type(b)
            if (ta is dict or (ta not in _PLAIN and isinstance(a, Mapping))) and (
                tb is dict or (tb not in _PLAIN and isinstance(b, Mapping))
            ):
                _walk(a, b, path, depth + 1, max_depth, _NOTHING, out)
                continue
        out.append(path)
    if missing or len(new) != len(old):
        for k in new:
            if k not in old and not (ignore and k in ignore):
                out.append(f"{prefix}.{k}" if prefix else str(k))


def _equal_but(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """``a == b`` apart from the :data:`IGNORED_METADATA` keys: C-level copies and one
    compare instead of a walk (a Kubernetes write usually changes metadata only in
    resourceVersion). Unrolled over the three keys: this runs once per MODIFIED event."""
    pa = dict(a)
    pb = dict(b)
    pa.pop("resourceVersion", None)
    pb.pop("resourceVersion", None)
    pa.pop("generation", None)
    pb.pop("generation", None)
    pa.pop("managedFields", None)
    pb.pop("managedFields", None)
    return pa == pb


def annotate(event: Event) -> Event | None:
    """Fill ``changed`` on a MODIFIED event that has ``old``; ``None`` when nothing changed.

    Other events come back as they are. A state-diff MODIFIED always has its ``old``
    (even ``null``); an event-log one has it when the server sent ``old``.
    """
    if event.type != MODIFIED:
        return event
    if event.old is None and (event.fields and "old" not in event.fields):
        return event
    old, new = event.old, event.item
    # _changed(old, new, 3), its usual case (two dicts) without the call.
    if type(old) is dict and type(new) is dict:
        out: list[str] = []
        _walk_top(old, new, 3, out)
        if not out:
            return None
        if len(out) > 1:
            out.sort()
        changed = tuple(out)
    else:
        changed = _changed(old, new, 3)
        if not changed:
            return None
    return make_event(event.type, event.key, new, old, changed, event.seq, event.fields)


def modified_paths(old: Any, new: Any) -> tuple[str, ...]:
    """The ``changed`` that :func:`annotate` fills in for a MODIFIED with ``old`` (``()``: a
    no-op), for a caller that builds its events itself (the event-log sequencer)."""
    # Same as annotate's, the usual case (two dicts) inline.
    if type(old) is dict and type(new) is dict:
        out: list[str] = []
        _walk_top(old, new, 3, out)
        if len(out) > 1:
            out.sort()
        return tuple(out)
    return _changed(old, new, 3)
