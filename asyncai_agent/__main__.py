"""``python -m asyncai_agent`` (console script ``asyncai-agent``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from asyncai_agent import cli

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
