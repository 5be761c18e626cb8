"""``python -m asyncai_watch``: the ``asyncai-watch`` command (see :mod:`asyncai_watch.cli`)."""

from __future__ import annotations

import sys

from asyncai_watch.cli import main

if __name__ == "__main__":
    sys.exit(main())
