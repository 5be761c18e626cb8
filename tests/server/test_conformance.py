"""The official MCP conformance suite's server scenarios, in two suite versions.

``@modelcontextprotocol/conformance`` (each version pinned in ``scripts/fetch_conformance.py``,
installed with a Node >= 22 under ``.tools/``) is run as ``tests/support/conformance.toml`` lists under
``[[run]]``: 0.1.16 with ``--suite all``, and the newest with ``--requirements 2026-07-28`` and
``--requirements 2025-11-25`` (plus its 2025-03-26 client scenarios). Each run is made
once per reference server that serves Streamable HTTP: memo, files, switchboard (through a
proxy that adds its bearer token: the suite cannot send headers), kcp and postgres (no database).

One test per (run, target, scenario) reads the suite's checks; ``tests/support/conformance_runs.py``
judges them against ``tests/support/conformance.toml``: ``pass``, or why the scenario cannot pass here
(a feature we do not offer), optionally naming exactly the checks that fail. Any other failure
fails, and so does a scenario that passes with a reason (delete the reason). A scenario the suite
has and the toml does not list fails too (a new suite version is looked at, not skipped).

Without npm the tests are skipped, unless ``ASYNCAI_REQUIRE_CONFORMANCE=1`` (CI), which turns
the skip into a failure. (Servers and client are two modules so that pytest-xdist can run them
side by side.)
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from tests.support.conformance_runs import (
    EXPECTED,
    EXPECTED_FILE,
    RUNS,
    Runs,
    cases,
    fetch_suite,
    judge,
    parse_listing,
    run_by_id,
)
from tests.support.http_servers import SERVERS

pytestmark = [pytest.mark.conformance, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def suite() -> Any:
    return fetch_suite()


@pytest.fixture(scope="module")
def runs(suite: Any, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return Runs(suite, tmp_path_factory.mktemp("conformance"))


@pytest.mark.parametrize(("run_id", "server", "scenario"), list(cases("server", SERVERS)))
def test_server_scenario(runs: Runs, run_id: str, server: str, scenario: str) -> None:
    run = run_by_id(run_id)
    judge(runs.results(run, server), "server", run, server, scenario)


def test_every_scenario_of_each_suite_is_run_or_said_why_not(suite: Any) -> None:
    """A new suite version's scenarios must be judged here, not silently skipped."""
    problems = []
    for version in sorted({run.suite for run in RUNS}):
        every = parse_listing(anyio.run(_list, suite, version, ()))
        covered: dict[str, set[str]] = {"server": set(), "client": set()}
        for run in (run for run in RUNS if run.suite == version):
            listed = parse_listing(anyio.run(_list, suite, version, run.list_args))
            for kind, scenarios in run.scenarios.items():
                if set(scenarios) != listed[kind]:
                    problems.append(
                        f"{run.id} {kind}: the suite runs {sorted(listed[kind] - set(scenarios))} that "
                        f"{EXPECTED_FILE.name} does not list; listed but not run: "
                        f"{sorted(set(scenarios) - listed[kind])}"
                    )
                covered[kind] |= set(scenarios)
        not_run = EXPECTED.get("not_run", {}).get(version, {})
        for kind in ("server", "client"):
            missing = every[kind] - covered[kind] - set(not_run)
            if missing:
                problems.append(f"{version} {kind}: no run covers {sorted(missing)} and not_run says nothing")
        stale = set(not_run) & (covered["server"] | covered["client"])
        if stale:
            problems.append(f"{version}: not_run lists {sorted(stale)}, which a run covers")
    assert not problems, "\n".join(problems)


async def _list(suite: Any, version: str, args: tuple[str, ...]) -> str:
    proc = await anyio.run_process(suite.argv(version, "list", *args))
    return str(proc.stdout.decode())
