"""Watching the MCP servers people already run (docs/existing-servers.md), against real peers.

- a server on the TypeScript SDK v1 over stdio, killed mid-watch: the watch is lost at once and
  resubscribes on the respawned server after the backoff (on the manager's injectable clock);
- a server on the Python SDK 1.x (``mcp`` 1.30, its own virtualenv, ``scripts/fetch_py_peers.py``),
  which advertises ``resources.subscribe: false`` though it has a subscribe handler: the
  capability fallback tries the subscription once and watches it, over stdio and HTTP;
- the same server mounted in a Starlette app (``Mount("/mcp", app)``), whose ``/mcp`` answers
  ``307`` to ``/mcp/``: the redirect on the notification stream (HTTP GET) is followed, not taken
  for the stream's end.

Each change is made by a tool call in another client and reaches ``WatchManager`` once and in
order. Without the peers the tests are skipped, unless ``ASYNCAI_REQUIRE_PEERS=1`` (CI).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from asyncai_watch import McpResourceSource, NotWatchableError, WatchManager
from asyncai_watch.server.http import running_http_server
from asyncai_watch.testing import FakeClock
from tests.support import SUPPORT
from tests.support.cli import cli, run_cli, stderr_of
from tests.support.managers import IMMEDIATE
from tests.support.real_peers import COUNTER, WAIT, next_notice, peers, ts_server, wait_until_watching
from tests.support.script_module import load_script
from tests.support.serve import Channel, call, serve

__all__ = ["peers"]  # the fixture, shared with test_real_peers

PY_V1_SERVER = (SUPPORT / "peers") / "py_v1_server.py"

pytestmark = [pytest.mark.peers, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def py_v1() -> Path:
    """The interpreter of the Python SDK 1.x virtualenv (installed into .tools/ if missing)."""
    try:
        python: Path = load_script("scripts/fetch_py_peers.py", "fetch_py_peers").fetch_py_v1()
    except Exception as exc:
        reason = f"the Python SDK 1.x peer is unavailable (pip install into .tools/): {exc}"
        if os.environ.get("ASYNCAI_REQUIRE_PEERS") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return python


def py_v1_server(python: Path, *args: str) -> list[str]:
    return [str(python), str(PY_V1_SERVER), *args]


def children_running(script: Path) -> list[int]:
    """Our child processes running ``script`` (a stdio server the source spawned)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes().rpartition(b")")[2].split()
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(stat[1]) == os.getpid() and str(script).encode() in cmdline:
            found.append(int(entry.name))
    return found


def ready_url(ready: Path) -> str:
    return ready.read_text(encoding="utf-8").split(" ", 1)[1].strip()


async def bump(url: str) -> None:
    """``bump`` called by another client (its own session over HTTP)."""
    async with McpResourceSource.http(url, name="writer") as writer:
        await writer.call_tool("bump", {})


async def nothing_more(m: WatchManager) -> None:
    """No notice beyond the ones asserted: each change arrived once."""
    with pytest.raises(anyio.WouldBlock):
        m.notices.receive_nowait()


@asynccontextmanager
async def watched(
    argv: Sequence[str], transport: str, ready: Path
) -> AsyncIterator[tuple[McpResourceSource, str]]:
    """The server as a source, and the URL another client changes it at."""
    if transport == "stdio":
        async with McpResourceSource.stdio(
            [*argv, "--stdio", "--http", "127.0.0.1:0", "--ready-file", str(ready)]
        ) as src:
            yield src, ready_url(ready)
    else:
        async with (
            running_http_server([*argv, "--http", "127.0.0.1:0"]) as (url, _),
            McpResourceSource.http(url) as src,
        ):
            yield src, url


# -- a legacy-era stdio server that dies ------------------------------------------------------------


@pytest.mark.anyio
async def test_a_ts_sdk_v1_stdio_server_killed_mid_watch_is_subscribed_again_on_a_respawned_one(
    peers: Any, tmp_path: Path
) -> None:
    clock = FakeClock()
    ready = tmp_path / "ready"
    argv = ts_server(peers, "--stdio", "--http", "127.0.0.1:0", "--ready-file", str(ready))
    async with McpResourceSource.stdio(argv) as src, WatchManager([src], limits=IMMEDIATE, clock=clock) as m:
        await m.watch_start("counter", COUNTER)
        await bump(ready_url(ready))
        assert (await next_notice(m)).text == "MODIFIED count (0→1)"
        [pid] = children_running(Path(argv[1]))
        os.kill(pid, signal.SIGKILL)
        with anyio.fail_after(WAIT):
            await clock.wait_for_sleepers(1)  # the watch knows it is lost: the resubscribe backoff
        deadline = clock.next_deadline
        assert deadline is not None
        clock.advance(deadline - clock.now())
        # Resubscribed on a respawned server, which counts from 0: the re-read says so.
        assert (await next_notice(m)).text == "MODIFIED count (1→0)"
        await bump(ready_url(ready))  # the new server wrote its new address before it answered
        assert (await next_notice(m)).text == "MODIFIED count (0→1)"
        assert src.reconnects == 1
        assert [w.status for w in m.watch_list()] == ["running"]
        await nothing_more(m)


# -- the Python SDK 1.x: subscribe: false, but a subscribe handler --------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_python_sdk_v1_server_is_watched_though_it_advertises_no_subscribe(
    py_v1: Path, transport: str, tmp_path: Path
) -> None:
    async with watched(py_v1_server(py_v1), transport, tmp_path / "ready") as (src, url):
        assert (src.protocol_version, src.watchable, src.watchability) == ("2025-11-25", False, "untried")
        async with WatchManager([src], limits=IMMEDIATE) as m:
            await m.watch_start("counter", COUNTER)
            assert src.watchability == "accepted"
            [info] = m.watch_list()
            assert (info.status, info.watchable_by_trial) == ("running", True)
            for count in range(1, 4):
                await bump(url)
                assert (await next_notice(m)).text == f"MODIFIED count ({count - 1}→{count})"
            await nothing_more(m)
        assert src.reconnects == 0


@pytest.mark.anyio
async def test_serve_watches_a_python_sdk_v1_upstream_through_the_fallback(py_v1: Path) -> None:
    """``asyncai-watch serve`` tries the subscription on an upstream that does not advertise it,
    as ``WatchManager`` does directly: the watch starts, is marked by trial, and pushes."""
    channel = Channel()
    async with (
        running_http_server(py_v1_server(py_v1, "--http", "127.0.0.1:0")) as (url, _),
        Client(serve("--server", f"py={url}", "--debounce", "0"), extensions=[channel]) as client,
    ):
        assert await call(client, "watch_start", name="counter", uri=COUNTER) == {
            "name": "counter",
            "uri": COUNTER,
            "shape": "state",
        }
        [listed] = [r for r in await call(client, "list_resources") if r["uri"] == COUNTER]
        assert (listed["subscribable"], listed["watchable_by_trial"]) == (True, True)
        for count in range(1, 3):
            await bump(url)
            assert (await channel.next_for("counter")).content == f"MODIFIED count ({count - 1}→{count})"


@pytest.mark.anyio
async def test_resources_marks_a_server_watchable_by_trial(py_v1: Path) -> None:
    async with running_http_server(py_v1_server(py_v1, "--http", "127.0.0.1:0")) as (url, _):
        code, listed, err = await run_cli("resources", "--server", f"py={url}")
        assert code == 0, err
        assert f"{COUNTER}  (resource, py, MCP 2025-11-25, application/json, watchable via " in listed
        assert "resources/subscribe (not advertised; accepted when tried))" in listed
        code, listed, err = await run_cli("resources", "--server", f"py={url}", "--json")
        assert code == 0, err
        [row] = map(json.loads, listed.splitlines())
        assert (row["subscribable"], row["watchable_by_trial"]) == (True, True)


# -- a redirect on the notification stream ---------------------------------------------------------


@pytest.mark.anyio
async def test_a_starlette_mounted_server_behind_a_redirect_is_watched_on_one_session(py_v1: Path) -> None:
    async with (
        running_http_server(py_v1_server(py_v1, "--http", "127.0.0.1:0", "--mount")) as (url, _),
        McpResourceSource.http(url) as src,
        WatchManager([src], limits=IMMEDIATE) as m,
    ):
        await m.watch_start("counter", COUNTER)
        for count in range(1, 7):  # more than the 5 resubscribes a watch gets
            await bump(url)
            assert (await next_notice(m)).text == f"MODIFIED count ({count - 1}→{count})"
        assert src.reconnects == 0  # the GET stream's 307 was followed, not taken for its end
        assert [w.status for w in m.watch_list()] == ["running"]
        await nothing_more(m)


# -- what stays refused, and what stays quiet -------------------------------------------------------


@pytest.mark.anyio
async def test_stopping_a_legacy_watch_logs_nothing_about_its_unsubscribe(peers: Any) -> None:
    async with (
        running_http_server(ts_server(peers, "--http", "127.0.0.1:0")) as (url, _),
        cli("watch", COUNTER, "--server", f"ts={url}", "--verbose") as (proc, _out),
    ):
        await wait_until_watching(proc)
        proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(WAIT):
            assert await proc.wait() == 0
        logged = await stderr_of(proc)
        assert "unsubscribing" not in logged
        assert "Traceback" not in logged


@pytest.mark.anyio
async def test_a_refused_try_is_one_line_and_is_not_made_again() -> None:
    legacy = [sys.executable, str(SUPPORT / "legacy_server.py"), "--no-subscribe"]
    async with McpResourceSource.stdio(legacy) as src, WatchManager([src], limits=IMMEDIATE) as m:
        for _ in range(2):
            with pytest.raises(NotWatchableError) as refused:
                await m.watch_start("state", "legacy://state")
            assert "\n" not in str(refused.value)
            assert "does not advertise resources.subscribe, and refused the resources/subscribe" in str(
                refused.value
            )
        methods = json.loads((await src.call_tool("legacy_methods", {})).text)
        assert methods.count("resources/subscribe") == 1
        assert src.watchability == "refused"


# -- an SDK 2.x server that subscribes only in the 2025 era ----------------------------------------

SDK2_LEGACY = [sys.executable, str((SUPPORT / "peers") / "sdk2_legacy_subscribe_server.py")]


@pytest.mark.anyio
async def test_an_sdk2_server_that_subscribes_only_in_the_2025_era_is_watched_in_that_era() -> None:
    async with (
        running_http_server([*SDK2_LEGACY, "--http", "127.0.0.1:0"]) as (url, _),
        McpResourceSource.http(url) as src,
    ):
        assert (src.protocol_version, src.watchable) == ("2026-07-28", False)
        async with WatchManager([src], limits=IMMEDIATE) as m:
            await m.watch_start("counter", COUNTER)
            assert (src.protocol_version, src.watchability) == ("2025-11-25", "advertised")
            [info] = m.watch_list()
            assert info.protocol == "2025-11-25"
            for count in range(1, 3):
                await bump(url)
                assert (await next_notice(m)).text == f"MODIFIED count ({count - 1}→{count})"
            await nothing_more(m)


@pytest.mark.anyio
async def test_the_cli_shows_no_complaint_about_the_probe_from_a_python_sdk_v1_server(py_v1: Path) -> None:
    server = "py=" + shlex.join(py_v1_server(py_v1, "--stdio"))
    code, listed, err = await run_cli("resources", "--server", server)
    assert code == 0, err
    assert COUNTER in listed
    assert "validation errors" not in err
    assert "server/discover" not in err
    assert "Processing request of type ListResourcesRequest" in err  # the server's other stderr still shows
