"""Compile-checking ``on_event`` under the sandbox policy, without running it.

Its own module so that both the engine interface (``validate_on_event``'s default check) and
the RestrictedPython engine can import it: neither imports the other for it.
"""

from __future__ import annotations

from typing import Final

from asyncai_watch.errors import FilterError
from asyncai_watch.filters import sandbox

__all__ = ["FILENAME", "check_source"]

FILENAME: Final = "<on_event>"
"""The file name filter code compiles and reports errors under."""


def check_source(source: str) -> None:
    """Compile ``source`` under the filter policy (no execution); FilterError if it fails."""
    try:
        sandbox.compile_repl(source, filename=FILENAME)
    except SyntaxError as exc:
        raise FilterError(f"on_event does not compile: {sandbox.describe_error(exc, FILENAME)}") from None
