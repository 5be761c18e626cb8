"""The filter engine interface: what the WatchManager calls, whatever runs the filter.

One engine today (:class:`asyncai_watch.filters.restricted.RestrictedPythonEngine`); a
``pydantic-monty`` engine would implement the same two protocols (see docs/filters.md).
"""

from __future__ import annotations

import ast
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final, Protocol, runtime_checkable

import attrs

from asyncai_watch.core.echo import quoted
from asyncai_watch.core.limits import Limits
from asyncai_watch.errors import FilterEngineError, FilterError, FilterTimeoutError
from asyncai_watch.filters._check import check_source

__all__ = [
    "DRY_RUN_FATAL",
    "MAX_SOURCE_CHARS",
    "Catalog",
    "EmptyCatalog",
    "FilterEngine",
    "FilterOutcome",
    "FilterSession",
    "check_dry_run",
    "dry_run",
    "open_session",
    "sample_event",
    "validate_on_event",
]

MAX_SOURCE_CHARS: Final = 65_536
"""The longest ``on_event`` accepted."""

# Outcome error types that do not depend on the event, so a dry run that hits one fails
# `watch_start` instead of failing every event later. KeyError & co. on the sample are fine.
DRY_RUN_FATAL: Final = frozenset(
    {"NameError", "PolicyError", "SyntaxError", "timeout", "MemoryError", "worker"}
)


@attrs.frozen
class FilterOutcome:
    """One event's result: a notice line, a drop (both None), or an error (``error`` set).

    ``error_type`` names the failure: the exception class (``KeyError``, ``PolicyError``
    for the sandbox's refusals, ``CatalogError`` for a refused or failed catalog call and
    the tool-call limit, ...), ``"timeout"``, or ``"worker"`` (the worker died or hung
    and was replaced; the scope is lost).
    """

    line: str | None = None
    error: str | None = None
    error_type: str | None = None

    @property
    def dropped(self) -> bool:
        return self.line is None and self.error is None


@runtime_checkable
class Catalog(Protocol):
    """The read-only functions a filter may call, implemented (and enforced) by the parent.

    Inside the filter each name is a synchronous function taking keyword arguments:
    ``read_resource(uri="memo://notes")``. ``call`` gets the kwargs as a dict and returns
    JSON-able data (attrs instances are converted; anything else becomes its ``str``).
    An exception from ``call`` reaches the filter as ``CatalogError`` with its message.
    """

    @property
    def names(self) -> frozenset[str]: ...

    async def call(self, name: str, kwargs: dict[str, Any]) -> Any: ...


class EmptyCatalog:
    """A catalog with nothing in it (filters that only look at the event)."""

    names: frozenset[str] = frozenset()

    async def call(self, name: str, kwargs: dict[str, Any]) -> Any:
        raise PermissionError(f"{quoted(name)} is not in this filter's catalog (it is empty)")


@runtime_checkable
class FilterSession(Protocol):
    """One watch's filter: its own persistent scope, living until :meth:`aclose`.

    Not reentrant: calls to :meth:`run` are serialized.
    """

    async def run(self, events: Sequence[Mapping[str, Any]]) -> list[FilterOutcome]:
        """One outcome per event, in order. Never raises for a filter's fault (errors,
        timeouts, crashes are outcomes); raises only if the session is closed."""
        ...

    async def dry_run(self, event: Mapping[str, Any]) -> FilterOutcome:
        """Run on a sample event in a throwaway scope (this session's scope is untouched).
        Raises FilterError for a failure every event would hit (:data:`DRY_RUN_FATAL`)."""
        ...

    async def aclose(self) -> None: ...


@runtime_checkable
class FilterEngine(Protocol):
    @property
    def name(self) -> str: ...

    def validate(self, source: str) -> None:
        """Compile-check ``source`` without running it; raise FilterError if it cannot run."""
        ...

    async def open(self, source: str, *, catalog: Catalog, limits: Limits | None = None) -> FilterSession:
        """Start a session for ``source`` (raises FilterError if it does not compile)."""
        ...


_FUNCTION_REPR: Final = re.compile(r"<(bound method |function |built-in function |lambda)[^>]*>")


def validate_on_event(on_event: object, *, engine: FilterEngine | None = None) -> str:
    """Return ``on_event`` as source text, or raise FilterError saying what to pass instead.

    Rejects non-strings (a function object, which would cross the sandbox as its repr),
    the repr of a function, empty or over-long text, and code that does not compile under
    the engine's policy (default: RestrictedPython).
    """
    if not isinstance(on_event, str):
        kind = type(on_event).__name__
        name = getattr(on_event, "__name__", None)
        what = f"{kind} {name!r}" if callable(on_event) and name else kind
        raise FilterError(
            f"on_event must be Python source text (a str), got {what}. A function object cannot "
            "cross into the filter sandbox (it would arrive as its repr): pass the code as a "
            """string, e.g. on_event='f"{event['type']} {event.get('key')}"'"""
        )
    if not on_event.strip():
        raise FilterError("on_event is empty: pass Python source, or None for the default line")
    if len(on_event) > MAX_SOURCE_CHARS:
        raise FilterError(f"on_event is {len(on_event)} characters; at most {MAX_SOURCE_CHARS} are accepted")
    if _FUNCTION_REPR.fullmatch(on_event.strip()):
        raise FilterError(
            f"on_event looks like the repr of a function ({on_event.strip()[:80]}), not source text: "
            "pass the filter's code as a string"
        )
    if engine is None:
        check_source(on_event)
    else:
        engine.validate(on_event)
    return on_event


def refuse_denied_calls(source: str, catalog: Catalog) -> None:
    """Raise FilterError when ``source`` calls a function its catalog refuses (a mutating tool,
    ``watch_start``): found in the code at start-up, not on every event after it (a dry run on
    one sample event misses a call behind an ``if``)."""
    denied: Mapping[str, str] = getattr(catalog, "denied", {})
    if not denied:
        return
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return  # validate_on_event has said so
    called = sorted(
        {
            node.func.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in denied
        }
    )
    if called:
        allowed = ", ".join(sorted(catalog.names)) or "nothing"
        raise FilterError(
            f"on_event may only read; it calls {', '.join(f'{n}()' for n in called)}: "
            f"{denied[called[0]]}. A filter may call: {allowed}"
        )


def sample_event(*, watch: str, uri: str, event_log: bool) -> dict[str, Any]:
    """A plausible event for a dry run. Filters reading keys it lacks get KeyError, which
    a dry run accepts."""
    base: dict[str, Any] = {"watch": watch, "uri": uri, "type": "ADDED", "old": None, "changed": []}
    if event_log:
        base.update(seq=1, object={})
    else:
        base.update(key="sample", new={}, item={})
    return base


async def dry_run(
    engine: FilterEngine,
    source: str,
    *,
    sample: Mapping[str, Any],
    catalog: Catalog | None = None,
    limits: Limits | None = None,
) -> FilterOutcome:
    """Run ``source`` once on ``sample`` in a throwaway session; raise FilterError for a
    failure that every event would hit (NameError, import/open/dunder, timeout, memory,
    a worker crash)."""
    session = await engine.open(source, catalog=catalog or EmptyCatalog(), limits=limits)
    try:
        return await session.dry_run(sample)
    finally:
        await session.aclose()


def check_dry_run(outcome: FilterOutcome) -> FilterOutcome:
    """Raise FilterError if a dry-run outcome is a failure every event would hit."""
    if outcome.error is not None and outcome.error_type in DRY_RUN_FATAL:
        if outcome.error_type == "worker":  # the worker died: the engine's failure, not the filter's
            raise FilterEngineError(f"on_event could not be dry-run: {outcome.error}")
        if outcome.error_type == "timeout":  # maybe slow only now (a catalog read of a starting server)
            raise FilterTimeoutError(f"on_event timed out on a sample event: {outcome.error}")
        raise FilterError(f"on_event fails on a sample event: {outcome.error}")
    return outcome


@asynccontextmanager
async def open_session(
    engine: FilterEngine, source: str, *, catalog: Catalog, limits: Limits | None = None
) -> AsyncIterator[FilterSession]:
    """``async with open_session(engine, source, catalog=c) as s:`` closes the session on exit."""
    session = await engine.open(source, catalog=catalog, limits=limits)
    try:
        yield session
    finally:
        await session.aclose()
