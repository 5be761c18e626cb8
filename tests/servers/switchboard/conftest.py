"""The switchboard's fixtures for this folder: ``config`` (its credentials file) and ``sqlite_store``."""

from __future__ import annotations

from tests.support.switchboard_server import config_fixture, sqlite_store_fixture  # noqa: F401  (fixtures)
