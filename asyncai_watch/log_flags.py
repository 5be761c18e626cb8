"""The logging flags every console script shares: ``-v``/``-q``, ``--log-level``, ``--log-file``.

One place for the argparse wiring (:func:`add_log_flags`) and for what the flags do
(:func:`configure_logging`), so a server and a client read the same way:

- ``--log-level LEVEL`` (DEBUG, INFO, WARNING, ERROR, CRITICAL; any case): what is logged.
- ``-v`` / ``--verbose``: ``--log-level DEBUG``.
- ``-q`` / ``--quiet``: nothing on stderr below ERROR (``--log-file`` still gets every record).
- ``--log-file PATH``: every record at the level, appended to PATH as NDJSON (the
  :class:`~asyncai_watch.log.NdjsonFormatter` shape, secrets redacted).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Final

from asyncai_watch.log import NdjsonFormatter

__all__ = ["LEVELS", "LogFlagError", "add_log_flags", "configure_logging", "log_level"]

LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_MARK: Final = "_asyncai_watch_log_flags"


class LogFlagError(ValueError):
    """A logging flag's value is not accepted (the message names the flag and what is)."""


def _level(text: str) -> str:
    level = text.upper()
    if level not in LEVELS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(LEVELS)} (any case), got {text!r}")
    return level


def add_log_flags(parser: argparse.ArgumentParser, *, default_level: str = "WARNING") -> None:
    """Add ``-v``/``-q``, ``--log-level`` and ``--log-file`` to ``parser`` (as one group)."""
    group = parser.add_argument_group("logging")
    loud = group.add_mutually_exclusive_group()
    loud.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG (same as --log-level debug)")
    loud.add_argument(
        "-q", "--quiet", action="store_true", help="nothing on stderr below ERROR (--log-file still gets all)"
    )
    group.add_argument(
        "--log-level",
        type=_level,
        default=default_level,  # a string: argparse checks it with _level, a bad env value is a usage error
        metavar="LEVEL",
        help=f"what to log: {', '.join(LEVELS)} (any case; default {default_level.upper()})",
    )
    group.add_argument(
        "--log-file", type=Path, metavar="PATH", help="append every record at the level to PATH as NDJSON"
    )


def log_level(args: argparse.Namespace) -> int:
    """The level the flags ask for (``-v`` wins over ``--log-level``)."""
    return logging.DEBUG if args.verbose else logging.getLevelNamesMapping()[args.log_level]


def configure_logging(args: argparse.Namespace) -> None:
    """Set the root logger up as the flags say: text on stderr, NDJSON in ``--log-file``.

    Calling it again replaces the handlers it installed before. Raises :class:`LogFlagError` if
    ``--log-file`` cannot be opened for appending.
    """
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _MARK, False)]:
        root.removeHandler(old)
        old.close()
    level = log_level(args)
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    stderr.setLevel(logging.ERROR if args.quiet else level)
    handlers: list[logging.Handler] = [stderr]
    if args.log_file is not None:
        try:
            to_file = logging.FileHandler(args.log_file, mode="a", encoding="utf-8")
        except OSError as exc:
            raise LogFlagError(
                f"--log-file: cannot open {str(args.log_file)!r} for appending: {exc.strerror or exc}"
            ) from exc
        to_file.setFormatter(NdjsonFormatter())
        to_file.setLevel(level)
        handlers.append(to_file)
    for handler in handlers:
        setattr(handler, _MARK, True)
        root.addHandler(handler)
    root.setLevel(level)
