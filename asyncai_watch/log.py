"""NDJSON logging of watch events (a public contract: see docs/watch-manager.md).

Every record goes to the stdlib logger ``"asyncai_watch"``; :func:`configure_ndjson`
attaches a python-json-logger handler that writes one JSON object per line::

    {"ts": "2026-11-03T10:00:00.123456+00:00", "level": "INFO", "logger": "asyncai_watch",
     "event": "watch.notice", "watch": "notes", "uri": "memo://notes", "lines": 1, "text": "ADDED owner"}

``watch.notice`` is logged at INFO always. The other events are verbose: they
are logged at DEBUG (shown when ``configure_ndjson(..., verbose=True)`` or any
DEBUG-level logging config asks for them), or at INFO when the emitter itself
was created verbose (``WatchManager(verbose=True)``).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any, Final

from pythonjsonlogger.json import JsonFormatter

from asyncai_watch.echo import redact

if TYPE_CHECKING:
    from asyncai_watch.core.deliver import EventRecord

__all__ = [
    "ALWAYS_LOGGED",
    "EVENTS",
    "LOGGER_NAME",
    "NdjsonFormatter",
    "configure_ndjson",
    "emit",
    "events",
    "events_enabled",
    "logger",
    "ndjson_logging",
    "restored",
]

LOGGER_NAME: Final = "asyncai_watch"
logger: Final = logging.getLogger(LOGGER_NAME)

EVENTS: Final = (
    "watch.started",
    "watch.subscribed",
    "watch.event",
    "watch.notice",
    "watch.resubscribing",
    "watch.failed",
    "watch.stopped",
    "watch.restored",
)
"""The events :class:`asyncai_watch.runtime.manager.WatchManager` emits (fields in docs/watch-manager.md)."""

ALWAYS_LOGGED: Final = frozenset({"watch.notice"})

_HANDLER_MARK: Final = "_asyncai_watch_ndjson"


class NdjsonFormatter(JsonFormatter):
    """``ts``, ``level``, ``logger``, ``event``, then the record's extra fields.

    Every string field (a traceback included) goes through :func:`~asyncai_watch.echo.redact`
    on its way out: whatever a caller logs, no URL keeps its secret parameters or userinfo and no
    bearer token is written.
    """

    def __init__(self) -> None:
        """The one NDJSON shape: no options (the base class's own are set here)."""
        super().__init__(
            "%(levelname)s %(name)s %(message)s",
            rename_fields={"levelname": "level", "name": "logger", "message": "event"},
            timestamp="ts",
            json_ensure_ascii=False,
        )

    def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
        return {key: _redacted(value) for key, value in super().process_log_record(log_data).items()}


def _redacted(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list | tuple):
        return [_redacted(v) for v in value]
    if isinstance(value, dict):
        return {k: _redacted(v) for k, v in value.items()}
    return value


def emit(event: str, *, verbose: bool = False, **fields: Any) -> None:
    """Log one watch event.

    ``watch.notice`` (and anything in :data:`ALWAYS_LOGGED`) is INFO; other
    events are INFO when ``verbose`` else DEBUG. Field names must not clash with
    :class:`logging.LogRecord` attributes (``name``, ``msg``, ``args``, ...).
    """
    level = logging.INFO if verbose or event in ALWAYS_LOGGED else logging.DEBUG
    if logger.isEnabledFor(level):
        logger.log(level, event, extra=fields)


def events_enabled(*, verbose: bool = False) -> bool:
    """Whether :func:`events` would log anything now (usually not: then a caller need not
    build the records at all)."""
    # The level emit() would log each at.
    return logger.isEnabledFor(logging.INFO if verbose or "watch.event" in ALWAYS_LOGGED else logging.DEBUG)


def events(records: Iterable[EventRecord], *, watch: str, uri: str, verbose: bool = False) -> None:
    """One ``watch.event`` record per event: what became of it (kept, deduped, dropped, ...)."""
    # Checked once: usually nobody listens (a call per event).
    if not events_enabled(verbose=verbose):
        return
    for rec in records:
        ev = rec.event
        emit(
            "watch.event",
            verbose=verbose,
            watch=watch,
            uri=uri,
            type=ev.type,
            key=ev.key,
            seq=ev.seq,
            kept=rec.outcome == "kept",
            outcome=rec.outcome,
            line=rec.line,
        )


def configure_ndjson(stream: IO[str] | None = None, verbose: bool = False) -> logging.Handler:
    """Write the ``asyncai_watch`` logger as NDJSON to ``stream`` (stderr by default).

    With ``verbose`` every event is written, otherwise only ``watch.notice``.
    Calling it again replaces the handler it installed before. Returns the handler.
    """
    for old in [h for h in logger.handlers if getattr(h, _HANDLER_MARK, False)]:
        logger.removeHandler(old)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(NdjsonFormatter())
    setattr(handler, _HANDLER_MARK, True)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if verbose else logging.INFO)
    # The NDJSON stream is the contract; a root handler would print the same record as text.
    logger.propagate = False
    return handler


@contextmanager
def restored() -> Iterator[None]:
    """Run the block, then put the logger's handlers, level and propagation back as they were.

    For a command's ``main()``: run in a process that goes on (a test, a program calling it), a
    handler it left on its stderr would outlive it and fail on every later record once that
    stream is closed ("I/O operation on closed file")."""
    saved = (list(logger.handlers), logger.level, logger.propagate)
    try:
        yield
    finally:
        logger.handlers[:] = saved[0]
        logger.setLevel(saved[1])
        logger.propagate = saved[2]


@contextmanager
def ndjson_logging(stream: IO[str] | None = None, verbose: bool = False) -> Iterator[logging.Handler]:
    """:func:`configure_ndjson` for the ``with`` block, then the logger as it was (:func:`restored`)."""
    with restored():
        yield configure_ndjson(stream, verbose=verbose)
