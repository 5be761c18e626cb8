"""How ``asyncai-agent`` ends on an error: one line on stderr naming it, and an exit code.

Shared by the command line (:mod:`asyncai_agent.cli`) and the demo (:mod:`asyncai_agent.demo`).
"""

from __future__ import annotations

import sys
from typing import Final

from asyncai_agent.backends.base import BackendError
from asyncai_agent.transcript import TranscriptError
from asyncai_watch import WatchError
from asyncai_watch.exception_groups import leaves

__all__ = ["PROG", "fail", "known_error", "warn"]

PROG: Final = "asyncai-agent"

_KNOWN_ERRORS: Final = (WatchError, BackendError, TranscriptError, ValueError, OSError)


def known_error(exc: BaseException) -> BaseException | None:
    """The user-facing error inside ``exc`` (task groups wrap them), if it is one we report."""
    for leaf in leaves(exc):
        if isinstance(leaf, _KNOWN_ERRORS):
            return leaf
    return None


def fail(message: str, code: int = 1) -> int:
    """One line on stderr, then the exit code."""
    print(f"{PROG}: error: {message}", file=sys.stderr, flush=True)
    return code


def warn(message: str) -> None:
    """One warning line on stderr; the agent goes on."""
    print(f"{PROG}: warning: {message}", file=sys.stderr, flush=True)
