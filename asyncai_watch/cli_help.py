"""``--help`` for every command the distribution installs: a description, then examples.

argparse wraps a description and an epilog alike; examples are command lines, so the
``examples:`` epilog :func:`examples` makes is kept line by line while the description is
still wrapped to the terminal. tests/test_help.py checks that every command and subcommand
has both, and that each example parses.
"""

from __future__ import annotations

import argparse
from typing import Final

__all__ = ["EXAMPLES", "HelpFormatter", "examples"]

EXAMPLES: Final = "examples:\n"


def examples(*lines: str) -> str:
    """The ``epilog`` of a command: one example command line (or ``# comment``) per line."""
    return EXAMPLES + "\n".join(f"  {line}" for line in lines)


class HelpFormatter(argparse.HelpFormatter):
    """Wraps descriptions; keeps an :func:`examples` epilog as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith(EXAMPLES):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)
