"""The official MCP conformance suite's client scenarios, in two suite versions.

``@modelcontextprotocol/conformance`` (each version pinned in ``scripts/fetch_conformance.py``,
installed with a Node >= 22 under ``.tools/``) is run as ``tests/support/conformance.toml`` lists under
``[[run]]``: 0.1.16 with ``--suite all``, and the newest with ``--requirements 2026-07-28`` and
``--requirements 2025-11-25`` (plus its 2025-03-26 client scenarios). Each run's client
scenarios are run against ``scripts/conformance_client.py``, a client built on
:class:`~asyncai_watch.mcp.client.McpResourceSource`.

One test per (run, target, scenario) reads the suite's checks; ``tests/support/conformance_runs.py``
judges them against ``tests/support/conformance.toml``: ``pass``, or why the scenario cannot pass here
(a feature we do not offer), optionally naming exactly the checks that fail. Any other failure
fails, and so does a scenario that passes with a reason (delete the reason).

Without npm the tests are skipped, unless ``ASYNCAI_REQUIRE_CONFORMANCE=1`` (CI), which turns
the skip into a failure. (Servers and client are two modules so that pytest-xdist can run them
side by side.)
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.conformance_runs import Runs, cases, fetch_suite, judge, run_by_id

pytestmark = [pytest.mark.conformance, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def suite() -> Any:
    return fetch_suite()


@pytest.fixture(scope="module")
def runs(suite: Any, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return Runs(suite, tmp_path_factory.mktemp("conformance-client"))


@pytest.mark.parametrize(("run_id", "target", "scenario"), list(cases("client", ["client"])))
def test_client_scenario(runs: Runs, run_id: str, target: str, scenario: str) -> None:
    run = run_by_id(run_id)
    judge(runs.results(run, target), "client", run, target, scenario)
