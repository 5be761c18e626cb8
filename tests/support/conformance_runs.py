"""Running the official MCP conformance suite and judging its checks (``tests/support/conformance.toml``).

A *run* is one suite version with one set of arguments (``--suite all``,
``--requirements 2026-07-28``, ...) and the scenarios it covers, as the toml lists them. A run
is made once per *target*: each reference server that serves Streamable HTTP, and ``client``
(``scripts/conformance_client.py``). :class:`Runs` makes each (run, target) once, on first use,
and keeps the checks; :func:`judge` decides one scenario against its expectation.
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import sys
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

from asyncai_watch._tasks import enter_task_group
from asyncai_watch.server.http import serve_http
from asyncai_watch.server.policy import HttpPolicy
from tests.support.bearer_proxy import BearerProxy
from tests.support.http_servers import reference_server
from tests.support.script_module import load_script

ROOT = Path(__file__).resolve().parents[2]
EXPECTED_FILE = Path(__file__).with_name("conformance.toml")
CLIENT = Path(__file__).with_name("conformance_slot.py")  # starts scripts/conformance_client.py
CLIENT_SLOTS = 4  # clients running at once (the suite starts them all; conformance_slot.py holds them back)
SUITE_TIMEOUT = 600  # seconds for one suite invocation (all of a target's scenarios in a run)
CLIENT_TIMEOUT = 300  # seconds the suite gives one client command, including its wait for a slot

Checks = list[dict[str, Any]]


def _load_fetcher() -> Any:
    return load_script("scripts/fetch_conformance.py", "fetch_conformance")


def fetch_suite() -> Any:
    """The installed suites (installing what is missing); a skip, or under CI a failure, without them."""
    try:
        return _load_fetcher().fetch()
    except Exception as exc:
        reason = f"the MCP conformance suite is unavailable (npm install into .tools/): {exc}"
        if os.environ.get("ASYNCAI_REQUIRE_CONFORMANCE") == "1":
            pytest.fail(reason)
        pytest.skip(reason)


def _expected() -> dict[str, Any]:
    with EXPECTED_FILE.open("rb") as f:
        return tomllib.load(f)


EXPECTED = _expected()


@attrs.frozen
class Run:
    id: str
    """``<suite version>/<name>``: the test ids' prefix and the key of overrides for this run."""
    suite: str
    args: tuple[str, ...]
    """What the suite is given besides the target (``--suite all``, ``--requirements X``)."""
    list_args: tuple[str, ...]
    """What ``list`` is given to name this run's scenarios."""
    scenarios: Mapping[str, tuple[str, ...]]
    """``server`` / ``client``: the scenarios this run covers for that kind of target."""


RUNS = tuple(
    Run(
        id=f"{run['suite']}/{run['name']}",
        suite=run["suite"],
        args=tuple(run["args"]),
        list_args=tuple(run["list"]),
        scenarios={kind: tuple(run[kind]) for kind in ("server", "client") if kind in run},
    )
    for run in EXPECTED["run"]
)


@attrs.frozen
class Expectation:
    """``pass``, or why not: every check passes, or the scenario needs what we do not offer."""

    reason: str | None
    """``None``: the scenario passes. Otherwise why it cannot."""
    failing: frozenset[str] | None = None
    """With a reason: exactly these check ids fail and every other one passes (``None``: any)."""


def expectation(kind: str, run: Run, target: str, scenario: str) -> Expectation:
    """What ``scenario`` should give for ``target`` in ``run``; the most specific entry wins."""
    section: Mapping[str, Any] = EXPECTED[kind]
    only: Mapping[str, Mapping[str, Any]] = section.get("only", {})
    for where in (f"{run.id}/{target}", run.id, target, run.suite):
        if scenario in only.get(where, {}):
            return _parse(only[where][scenario])
    if scenario not in section["scenarios"]:
        raise AssertionError(f"{scenario!r} ({kind}) has no expectation in {EXPECTED_FILE.name}")
    return _parse(section["scenarios"][scenario])


def _parse(entry: str | Mapping[str, Any]) -> Expectation:
    if isinstance(entry, str):
        return Expectation(None if entry == "pass" else entry)
    return Expectation(str(entry["reason"]), frozenset(entry["failing"]))


def cases(kind: str, targets: Sequence[str]) -> Iterator[tuple[str, str, str]]:
    """Every (run id, target, scenario) to judge for ``kind``."""
    for run in RUNS:
        for scenario in run.scenarios.get(kind, ()):
            for target in targets:
                yield run.id, target, scenario


def run_by_id(run_id: str) -> Run:
    return next(run for run in RUNS if run.id == run_id)


_STAMP = re.compile(r"-\d{4}-\d\d-\d\dT[\d-]+Z$")


def read_results(out: Path, *, prefix: str = "") -> dict[str, Checks]:
    """The suite's checks per scenario, from its ``-o`` directory (``<scenario>-<timestamp>/checks.json``)."""
    results: dict[str, Checks] = {}
    for path in out.rglob("checks.json"):
        name = _STAMP.sub("", path.parent.relative_to(out).as_posix())
        results[name.removeprefix(prefix)] = json.loads(path.read_text(encoding="utf-8"))
    return results


class Runs:
    """Makes each (run, target) once, on first use, and keeps the checks."""

    def __init__(self, suite: Any, tmp: Path) -> None:
        self.suite = suite
        self.tmp = tmp
        self._results: dict[tuple[str, str], dict[str, Checks]] = {}
        self._log = ""

    def results(self, run: Run, target: str) -> dict[str, Checks]:
        key = (run.id, target)
        if key not in self._results:
            out = self.tmp / run.id.replace("/", "_") / target
            if target == "client":
                anyio.run(self._client, run, out)
            else:
                anyio.run(self._server, run, target, out)
            found = read_results(out, prefix="" if target == "client" else "server-")
            if not found:
                raise AssertionError(
                    f"the conformance suite wrote no results for {run.id} {target}:\n{self._log}"
                )
            self._results[key] = found
        return self._results[key]

    async def _run_suite(self, run: Run, out: Path, *args: str, env: Mapping[str, str] | None = None) -> None:
        with anyio.fail_after(SUITE_TIMEOUT):
            proc = await anyio.run_process(
                self.suite.argv(run.suite, *args, *run.args, "-o", str(out)), check=False, env=env
            )
        self._log = (
            f"exit {proc.returncode}\n{proc.stdout.decode(errors='replace')[-3000:]}\n"
            f"{proc.stderr.decode(errors='replace')[-3000:]}"
        )

    async def _client(self, run: Run, out: Path) -> None:
        command = f"{sys.executable} {CLIENT}"
        if len(shlex.split(command)) != 2:
            raise AssertionError(f"the suite splits --command at spaces; {command!r} has a path with one")
        slots = out.with_name(out.name + "-slots")
        slots.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "ASYNCAI_CONFORMANCE_SLOTS": f"{slots} {CLIENT_SLOTS}"}
        timeout = str(CLIENT_TIMEOUT * 1000)
        await self._run_suite(run, out, "client", "--command", command, "--timeout", timeout, env=env)

    async def _server(self, run: Run, name: str, out: Path) -> None:
        async with AsyncExitStack() as stack:
            work = self.tmp / f"{name}-work" / run.id.replace("/", "_")
            served = await stack.enter_async_context(reference_server(name, work))
            url = served.url
            if served.headers:  # the suite cannot send headers: a proxy adds them
                url = await _start_proxy(stack, url, served.headers["Authorization"])
            await self._run_suite(run, out, "server", "--url", url)


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
            policy=HttpPolicy(insecure_no_auth=True),  # the suite cannot send a header: the proxy adds it
        )
    )
    with anyio.fail_after(30):
        await ready.wait()
    return urls[0]


def _describe(checks: Checks) -> str:
    return "\n".join(
        f"  {c.get('status')} {c.get('id')}: {c.get('errorMessage') or c.get('description') or ''}"
        for c in checks
    )


def judge(results: Mapping[str, Checks], kind: str, run: Run, target: str, scenario: str) -> None:
    """Fail unless ``scenario``'s checks are what its expectation says.

    A check fails when it is a ``FAILURE``, or a ``WARNING`` listed under ``judged_warnings`` (a
    "should" we meet); checks under ``ignored_checks`` are not judged. Other warnings are printed.
    """
    checks = results.get(scenario)
    assert checks is not None, f"the suite reported nothing for {scenario!r} (it has: {sorted(results)})"
    expected = expectation(kind, run, target, scenario)
    ignored = EXPECTED["ignored_checks"]
    judged_warnings = EXPECTED["judged_warnings"]
    failed = [
        c
        for c in checks
        if c.get("id") not in ignored
        and (
            c.get("status") == "FAILURE" or (c.get("status") == "WARNING" and c.get("id") in judged_warnings)
        )
    ]
    noted = [c for c in checks if c.get("status") == "WARNING" or c.get("id") in ignored]
    if noted:
        print(f"{run.id} {target} {scenario} warnings and unjudged checks:\n{_describe(noted)}")
    where = f"{target} in {run.id}"
    if expected.reason is None:
        assert not failed, f"{where} fails {scenario}:\n{_describe(failed)}"
        return
    assert failed, (
        f"{where} now passes {scenario}: replace its entry in {EXPECTED_FILE.name} with pass "
        f"(it said: {expected.reason})"
    )
    if expected.failing is not None:
        failed_ids = {str(c.get("id")) for c in failed}
        unexpected = [c for c in failed if c.get("id") not in expected.failing]
        assert not unexpected, (
            f"{where} fails {scenario} in checks its entry does not name ({expected.reason}):\n"
            f"{_describe(unexpected)}"
        )
        passing = sorted(expected.failing - failed_ids)
        assert not passing, (
            f"{where} now passes these checks of {scenario}: {passing}; remove them from its "
            f"failing list in {EXPECTED_FILE.name}"
        )


_LISTED = re.compile(r"^\s*- (\S+)(?: \[([^\]]*)\])?\s*$")


def parse_listing(text: str) -> dict[str, set[str]]:
    """The scenarios a ``list`` output names, by kind (``server`` / ``client``).

    A scenario's kind is its section's (``Server scenarios ...``, ``Client scenarios ...``) or,
    in a requirement set's "run and reported" part, its ``[server]`` / ``[client]`` tag.
    """
    found: dict[str, set[str]] = {"server": set(), "client": set()}
    kind: str | None = None
    for line in text.splitlines():
        if line.startswith("Server scenarios"):
            kind = "server"
        elif line.startswith("Client scenarios"):
            kind = "client"
        elif line.startswith("Authorization server scenarios") or line.startswith("Run and reported"):
            kind = None
        match = _LISTED.match(line)
        if match is None:
            continue
        tag = match.group(2)
        listed_kind = tag if tag in ("server", "client") else kind
        if listed_kind is not None:
            found[listed_kind].add(match.group(1))
    return found
