"""Shared test configuration: anyio backends, bounded hypothesis profiles."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

# CI gets a bounded profile so the whole suite stays well under 15 minutes on 2 cores.
settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.register_profile(
    "dev", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # A test marked `trio` runs under both backends: the code it drives claims to be backend-neutral
    # (WatchManager and the runtime over in-memory sources). Everything else runs under asyncio only.
    if metafunc.definition.get_closest_marker("trio") and "anyio_backend" in metafunc.fixturenames:
        metafunc.parametrize("anyio_backend", ["asyncio", "trio"])
