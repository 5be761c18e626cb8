"""The official MCP conformance suite against our HTTP servers and our client.

``@modelcontextprotocol/conformance`` (pinned in ``scripts/fetch_conformance.py``,
installed with a Node >= 22 under ``.tools/``) runs, once per target:

- its server scenarios against each reference server that serves Streamable HTTP
  (memo, files, switchboard through a proxy that adds its bearer token, kcp, postgres);
- its client scenarios against ``scripts/conformance_client.py``, a client built
  on :class:`~asyncai_watch.mcp.client.McpResourceSource`.

Then one test per (target, scenario) reads the suite's checks. A scenario fails
when one of its checks is a FAILURE (warnings are the suite's "should"s and are
printed, not judged; so are the few checks ``tests/conformance.toml`` lists under
``ignored_checks``, such as wall-clock timings). ``tests/conformance.toml`` lists every scenario: ``pass``,
or why it cannot pass here (a feature we do not offer). Any other failure fails,
and so does a listed scenario that passes (delete its reason then). The suite
covers protocol 2025-06-18 and 2025-11-25 only; our 2026-07-28 features
(``server/discover``, ``subscriptions/listen``) are covered by our own tests.

Without npm the tests are skipped, unless ``ASYNCAI_REQUIRE_CONFORMANCE=1`` (CI),
which turns the skip into a failure.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import shlex
import sys
import tomllib
from collections.abc import Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import pytest
from bearer_proxy import BearerProxy
from http_servers import SERVERS, reference_server

from asyncai_servers._http import serve_http
from asyncai_watch._tasks import enter_task_group

ROOT = Path(__file__).resolve().parent.parent
EXPECTED_FILE = Path(__file__).with_name("conformance.toml")
CLIENT = ROOT / "scripts" / "conformance_client.py"
SUITE_TIMEOUT = 600  # seconds for one suite invocation (all of a target's scenarios)
CLIENT_TIMEOUT = 120  # seconds the suite gives one client command

pytestmark = [pytest.mark.conformance, pytest.mark.timeout(900)]

Checks = list[dict[str, Any]]


def _expected() -> dict[str, Any]:
    with EXPECTED_FILE.open("rb") as f:
        return tomllib.load(f)


EXPECTED = _expected()


def expectation(kind: str, target: str, scenario: str) -> str:
    """``pass``, or the reason ``scenario`` cannot pass for ``target`` (``kind``: server or client)."""
    section: Mapping[str, Any] = EXPECTED[kind]
    specific = section.get("only", {}).get(target, {})
    if scenario in specific:
        return str(specific[scenario])
    return str(section["scenarios"][scenario])


SERVER_SCENARIOS = sorted(EXPECTED["server"]["scenarios"])
CLIENT_SCENARIOS = sorted(EXPECTED["client"]["scenarios"])


def _load_fetcher() -> Any:
    spec = importlib.util.spec_from_file_location(
        "fetch_conformance", ROOT / "scripts" / "fetch_conformance.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("fetch_conformance", module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def suite() -> Any:
    try:
        return _load_fetcher().fetch()
    except Exception as exc:
        reason = f"the MCP conformance suite is unavailable (npm install into .tools/): {exc}"
        if os.environ.get("ASYNCAI_REQUIRE_CONFORMANCE") == "1":
            pytest.fail(reason)
        pytest.skip(reason)


_STAMP = re.compile(r"-\d{4}-\d\d-\d\dT[\d-]+Z$")


def read_results(out: Path, *, prefix: str = "") -> dict[str, Checks]:
    """The suite's checks per scenario, from its ``-o`` directory (``<scenario>-<timestamp>/checks.json``)."""
    results: dict[str, Checks] = {}
    for path in out.rglob("checks.json"):
        name = _STAMP.sub("", path.parent.relative_to(out).as_posix())
        results[name.removeprefix(prefix)] = json.loads(path.read_text(encoding="utf-8"))
    return results


class Runs:
    """Runs the suite once per target, on first use, and keeps the checks."""

    def __init__(self, suite: Any, tmp: Path) -> None:
        self.suite = suite
        self.tmp = tmp
        self._results: dict[str, dict[str, Checks]] = {}
        self._log = ""

    def results(self, target: str) -> dict[str, Checks]:
        if target not in self._results:
            out = self.tmp / target
            if target == "client":
                anyio.run(self._client, out)
            else:
                anyio.run(self._server, target, out)
            found = read_results(out, prefix="" if target == "client" else "server-")
            if not found:
                raise AssertionError(f"the conformance suite wrote no results for {target}:\n{self._log}")
            self._results[target] = found
        return self._results[target]

    async def _run_suite(self, out: Path, *args: str) -> None:
        with anyio.fail_after(SUITE_TIMEOUT):
            proc = await anyio.run_process(self.suite.argv(*args, "-o", str(out)), check=False)
        self._log = (
            f"exit {proc.returncode}\n{proc.stdout.decode(errors='replace')[-3000:]}\n"
            f"{proc.stderr.decode(errors='replace')[-3000:]}"
        )

    async def _client(self, out: Path) -> None:
        command = f"{sys.executable} {CLIENT}"
        if len(shlex.split(command)) != 2:
            raise AssertionError(f"the suite splits --command at spaces; {command!r} has a path with one")
        # The suite starts every client at once; on a busy machine one may need more than its 30 s.
        timeout = str(CLIENT_TIMEOUT * 1000)
        await self._run_suite(out, "client", "--command", command, "--suite", "all", "--timeout", timeout)

    async def _server(self, name: str, out: Path) -> None:
        async with AsyncExitStack() as stack:
            served = await stack.enter_async_context(reference_server(name, self.tmp / f"{name}-work"))
            url = served.url
            if served.headers:  # the suite cannot send headers: a proxy adds them
                url = await _start_proxy(stack, url, served.headers["Authorization"])
            await self._run_suite(out, "server", "--url", url, "--suite", "all")


async def _start_proxy(stack: AsyncExitStack, upstream: str, authorization: str) -> str:
    """Serve a :class:`BearerProxy` to ``upstream`` in this process; return its URL."""
    tg = await enter_task_group(stack)
    ready = anyio.Event()
    stop = anyio.Event()
    urls: list[str] = []

    def on_ready(url: str) -> None:
        urls.append(url)
        ready.set()

    stack.callback(stop.set)
    tg.start_soon(
        lambda: serve_http(
            BearerProxy(upstream.removesuffix("/mcp"), authorization.removeprefix("Bearer ")),
            "127.0.0.1",
            0,
            ready=io.StringIO(),
            on_ready=on_ready,
            stop=stop,
        )
    )
    with anyio.fail_after(30):
        await ready.wait()
    return urls[0]


@pytest.fixture(scope="module")
def runs(suite: Any, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return Runs(suite, tmp_path_factory.mktemp("conformance"))


def _describe(checks: Checks) -> str:
    return "\n".join(
        f"  {c.get('status')} {c.get('id')}: {c.get('errorMessage') or c.get('description') or ''}"
        for c in checks
    )


def judge(results: Mapping[str, Checks], kind: str, target: str, scenario: str) -> None:
    checks = results.get(scenario)
    assert checks is not None, f"the suite reported nothing for {scenario!r} (it has: {sorted(results)})"
    expected = expectation(kind, target, scenario)
    ignored = EXPECTED["ignored_checks"]
    failed = [c for c in checks if c.get("status") == "FAILURE" and c.get("id") not in ignored]
    noted = [c for c in checks if c.get("status") == "WARNING" or c.get("id") in ignored]
    if noted:
        print(f"{target} {scenario} warnings and unjudged checks:\n{_describe(noted)}")
    if expected == "pass":
        assert not failed, f"{target} fails {scenario}:\n{_describe(failed)}"
    else:
        assert failed, (
            f"{target} now passes {scenario}: delete its entry in {EXPECTED_FILE.name} (it said: {expected})"
        )


@pytest.mark.parametrize("scenario", SERVER_SCENARIOS)
@pytest.mark.parametrize("server", SERVERS)
def test_server_scenario(runs: Runs, server: str, scenario: str) -> None:
    judge(runs.results(server), "server", server, scenario)


@pytest.mark.parametrize("scenario", CLIENT_SCENARIOS)
def test_client_scenario(runs: Runs, scenario: str) -> None:
    judge(runs.results("client"), "client", "client", scenario)


def test_every_scenario_of_the_suite_is_listed(suite: Any) -> None:
    """A new suite version's scenarios must be judged here, not silently skipped."""
    for kind in ("server", "client"):
        listing = anyio.run(_list, suite, kind)
        listed = set(re.findall(r"^\s*- (\S+)", listing, flags=re.MULTILINE))
        assert listed == set(EXPECTED[kind]["scenarios"]), (
            f"{kind} scenarios in the suite but not in {EXPECTED_FILE.name}: "
            f"{sorted(listed - set(EXPECTED[kind]['scenarios']))}; listed but gone: "
            f"{sorted(set(EXPECTED[kind]['scenarios']) - listed)}"
        )


async def _list(suite: Any, kind: str) -> str:
    proc = await anyio.run_process(suite.argv("list", f"--{kind}"))
    return str(proc.stdout.decode())
