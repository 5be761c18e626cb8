"""``python -m asyncai_watch``: the ``asyncai-watch`` command (see :mod:`asyncai_watch.cli`)."""

from __future__ import annotations

import sys

if __name__ == "__main__":
    # The import is inside the try: Ctrl-C while it runs (a second of the SDK's imports on a
    # busy machine) is a quiet exit 0, as it is once main() runs.
    try:
        from asyncai_watch.cli import main

        code = main()
    except KeyboardInterrupt:
        code = 0
    sys.exit(code)
