"""``python -m asyncai_watch --version``."""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import version


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="asyncai_watch", description=__doc__)
    parser.add_argument("--version", action="store_true", help="print the installed version and exit")
    args = parser.parse_args(argv)
    if args.version:
        print(f"asyncai-watch {version('asyncai-watch')}")
        return 0
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
