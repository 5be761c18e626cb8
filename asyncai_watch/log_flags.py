"""The logging flags every console script shares: ``-v``/``-q``, ``--log-level``, ``--log-file``.

One place for the argparse wiring (:func:`add_log_flags`) and for what the flags do
(:func:`configure_logging`), so a server and a client read the same way:

- ``--log-level LEVEL`` (DEBUG, INFO, WARNING, ERROR, CRITICAL; any case): what is logged.
- ``-v`` / ``--verbose``: ``--log-level DEBUG``.
- ``-q`` / ``--quiet``: nothing on stderr below ERROR (``--log-file`` still gets every record).
- ``--log-file PATH``: every record at the level, appended to PATH as NDJSON (the
  :class:`~asyncai_watch.log.NdjsonFormatter` shape, secrets redacted).

The clients (``asyncai-watch``, ``asyncai-agent``) take the same flags with two differences a
person at a terminal wants (:func:`logging_configured` with ``client=True``): ``--log-file`` takes
the log off stderr (stderr keeps warnings and errors) and, given alone, logs at DEBUG; and the level
applies to this project's loggers, the libraries under them (httpx, the MCP SDK) staying at WARNING,
so ``-v`` shows every watch event, not every HTTP request.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final, Literal, TextIO

from asyncai_watch.log import NdjsonFormatter

__all__ = [
    "LEVELS",
    "OWN_LOGGERS",
    "LogFlagError",
    "add_log_flags",
    "configure_logging",
    "log_level",
    "logging_configured",
]

LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
OWN_LOGGERS: Final = ("asyncai_watch", "asyncai_agent", "asyncai_servers")
"""The loggers a client's ``--log-level`` applies to (every other one logs at WARNING)."""
_MARK: Final = "_asyncai_watch_log_flags"
_DEFAULTS: Final = "_log_flag_defaults"
_FILE_DEST: Final = "_log_flag_file_dest"


def _log_file(args: argparse.Namespace) -> Path | None:
    path: Path | None = getattr(args, getattr(args, _FILE_DEST, "log_file"))
    return path


class LogFlagError(ValueError):
    """A logging flag's value is not accepted (the message names the flag and what is)."""


def _level(text: str) -> str:
    level = text.upper()
    if level not in LEVELS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(LEVELS)} (any case), got {text!r}")
    return level


def add_log_flags(
    parser: argparse.ArgumentParser,
    *,
    default_level: str = "WARNING",
    file_level: str | None = None,
    verbose_help: str = "log at DEBUG (same as --log-level debug)",
    quiet_help: str = "nothing on stderr below ERROR (--log-file still gets all)",
    log_file_help: str = "append every record at the level to PATH as NDJSON",
    log_file_aliases: tuple[str, ...] = (),
    log_file_dest: str = "log_file",
) -> None:
    """Add ``-v``/``-q``, ``--log-level`` and ``--log-file`` to ``parser`` (as one group).

    ``file_level``: the level when ``--log-file`` is given without ``--log-level`` (a client's
    log file gets every event); ``log_file_aliases``: older spellings of ``--log-file``;
    ``log_file_dest``: its attribute on the parsed arguments."""
    group = parser.add_argument_group("logging")
    loud = group.add_mutually_exclusive_group()
    loud.add_argument("-v", "--verbose", action="store_true", help=verbose_help)
    loud.add_argument("-q", "--quiet", action="store_true", help=quiet_help)
    shown_default = default_level.upper()
    if file_level is not None:
        shown_default += f"; {file_level.upper()} with --log-file"
    group.add_argument(
        "--log-level",
        type=_level,
        # A string: argparse checks it with _level, so a bad env value is a usage error. None
        # when --log-file changes the default (resolved in log_level()).
        default=default_level if file_level is None else None,
        metavar="LEVEL",
        help=f"what to log: {', '.join(LEVELS)} (any case; default {shown_default})",
    )
    group.add_argument(
        "--log-file", *log_file_aliases, dest=log_file_dest, type=Path, metavar="PATH", help=log_file_help
    )
    if log_file_dest != "log_file":
        parser.set_defaults(**{_FILE_DEST: log_file_dest})
    if file_level is not None:
        parser.set_defaults(**{_DEFAULTS: (_level(default_level), _level(file_level))})


def log_level(args: argparse.Namespace) -> int:
    """The level the flags ask for (``-v`` wins over ``--log-level``)."""
    if args.verbose:
        return logging.DEBUG
    name = args.log_level
    if name is None:
        default, with_file = getattr(args, _DEFAULTS)
        name = with_file if _log_file(args) is not None else default
    return logging.getLevelNamesMapping()[name]


def configure_logging(
    args: argparse.Namespace, *, client: bool = False, stderr_format: Literal["text", "ndjson"] = "text"
) -> TextIO | None:
    """Set the root logger up as the flags say: text (or NDJSON) on stderr, NDJSON in ``--log-file``.

    ``client``: ``--log-file`` takes the log off stderr (which keeps WARNING and above), and the
    level applies to :data:`OWN_LOGGERS` (the root stays at WARNING). Calling it again replaces the
    handlers it installed before. Returns the ``--log-file`` stream (a server's children may write
    to it too), or None. Raises :class:`LogFlagError` if ``--log-file`` cannot be opened for appending.
    """
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _MARK, False)]:
        root.removeHandler(old)
        old.close()
    level = log_level(args)
    log_file = _log_file(args)
    stderr = logging.StreamHandler(sys.stderr)
    if stderr_format == "ndjson":
        stderr.setFormatter(NdjsonFormatter())
    else:
        stderr.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    if args.quiet:
        stderr.setLevel(logging.ERROR)
    elif client and log_file is not None:
        stderr.setLevel(max(level, logging.WARNING))
    else:
        stderr.setLevel(level)
    handlers: list[logging.Handler] = [stderr]
    stream: TextIO | None = None
    if log_file is not None:
        try:
            to_file = logging.FileHandler(log_file, mode="a", encoding="utf-8")
        except OSError as exc:
            raise LogFlagError(
                f"--log-file: cannot open {str(log_file)!r} for appending: {exc.strerror or exc}"
            ) from exc
        to_file.setFormatter(NdjsonFormatter())
        to_file.setLevel(level)
        handlers.append(to_file)
        stream = to_file.stream
    for handler in handlers:
        setattr(handler, _MARK, True)
        root.addHandler(handler)
    if client:
        root.setLevel(logging.WARNING)
        for name in OWN_LOGGERS:
            logging.getLogger(name).setLevel(level)
            logging.getLogger(name).propagate = True  # to the handlers above (configure_ndjson stops it)
    else:
        root.setLevel(level)
    return stream


@contextmanager
def logging_configured(
    args: argparse.Namespace, *, client: bool = False, stderr_format: Literal["text", "ndjson"] = "text"
) -> Iterator[TextIO | None]:
    """:func:`configure_logging` for the ``with`` block, then logging as it was.

    For a command's ``main()`` run in a process that goes on (a test, a program calling it): a
    handler left on its stderr would outlive it and fail on every later record once that stream
    is closed."""
    root = logging.getLogger()
    own = [logging.getLogger(name) for name in OWN_LOGGERS]
    saved = (list(root.handlers), root.level, [(lg.level, lg.propagate, list(lg.handlers)) for lg in own])
    try:
        yield configure_logging(args, client=client, stderr_format=stderr_format)
    finally:
        for handler in root.handlers:
            if getattr(handler, _MARK, False) and handler not in saved[0]:
                handler.close()
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        for lg, (lvl, propagate, handlers) in zip(own, saved[2], strict=True):
            lg.setLevel(lvl)
            lg.propagate = propagate
            lg.handlers[:] = handlers
