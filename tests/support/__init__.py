"""Helpers shared by the tests: fakes, servers run as subprocesses, fixtures' building blocks.

Nothing here is collected as a test. ``ROOT`` is the checkout, ``SUPPORT`` this folder (the
helper scripts run by path live here, with ``bin/`` and ``peers/``).
"""

from __future__ import annotations

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
ROOT = SUPPORT.parent.parent
