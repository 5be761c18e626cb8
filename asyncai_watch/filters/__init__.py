"""Watch filters (``on_event``): the engine interface and the RestrictedPython engine.

Use::

    engine = default_engine(limits)
    source = validate_on_event(on_event, engine=engine)      # FilterError if not usable
    session = await engine.open(source, catalog=catalog)     # one worker process
    await session.dry_run(sample_event(watch=..., uri=..., event_log=...))  # FilterError
    outcomes = await session.run(event_dicts)                 # one FilterOutcome per event
    await session.aclose()

See docs/filters.md for the policy, the limits, and what is (not) a security boundary.
"""

from __future__ import annotations

from asyncai_watch.core.limits import Limits
from asyncai_watch.filters.engine import (
    DRY_RUN_FATAL,
    MAX_SOURCE_CHARS,
    Catalog,
    EmptyCatalog,
    FilterEngine,
    FilterOutcome,
    FilterSession,
    check_dry_run,
    dry_run,
    open_session,
    refuse_denied_calls,
    sample_event,
    validate_on_event,
)
from asyncai_watch.filters.restricted import RestrictedFilterSession, RestrictedPythonEngine

__all__ = [
    "DRY_RUN_FATAL",
    "MAX_SOURCE_CHARS",
    "Catalog",
    "EmptyCatalog",
    "FilterEngine",
    "FilterOutcome",
    "FilterSession",
    "RestrictedFilterSession",
    "RestrictedPythonEngine",
    "check_dry_run",
    "default_engine",
    "dry_run",
    "open_session",
    "refuse_denied_calls",
    "sample_event",
    "validate_on_event",
]


def default_engine(limits: Limits | None = None) -> RestrictedPythonEngine:
    """The engine a WatchManager uses unless given another: RestrictedPython in workers."""
    return RestrictedPythonEngine(limits=limits or Limits())
