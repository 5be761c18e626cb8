"""``asyncai-watch`` (and ``python -m asyncai_watch``): watch MCP resources from the shell.

This module is the console script's entry and imports nothing heavy at its top: the commands
(:mod:`asyncai_watch.cli_commands`) take a second to import (the SDK, pydantic), and a Ctrl-C in
that second must end the command with exit 0 and no traceback, as it does at every later stage.
A closed stdout (``asyncai-watch watch ... | head -n1``) also ends it with exit 0, quietly.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Final

__all__ = ["PROG", "build_parser", "main"]

PROG: Final = "asyncai-watch"


def build_parser() -> argparse.ArgumentParser:
    """The command's parser (every subcommand and option)."""
    from asyncai_watch import cli_commands

    return cli_commands.build_parser()


def main(argv: Sequence[str] | None = None) -> int:
    try:
        from asyncai_watch import cli_commands

        return cli_commands.main(argv)
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:
        stdout_closed()
        return 0


def stdout_closed() -> None:
    """The reader of stdout left (``| head -n1``): point stdout at /dev/null, so the interpreter's
    flush at exit does not fail on the closed pipe and print an error of its own."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout has no file descriptor (a test's StringIO)
        pass
    finally:
        os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
