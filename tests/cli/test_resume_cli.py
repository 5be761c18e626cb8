"""``asyncai-watch watch --watch-state``: killed (SIGKILL) and started again, it prints what it missed."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from asyncai_watch import McpResourceSource
from asyncai_watch.server.http import running_http_server
from tests.support.cli import WAIT, cli, wait_until_watching
from tests.support.fake_kubectl import FakeCluster
from tests.support.kcp_helpers import kcp_argv, kcp_env, write_kubeconfig
from tests.support.memo import memo_http_server

pytestmark = pytest.mark.anyio


async def next_record(out: Any) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(await out.next())
    return record


async def test_memo_changed_while_the_cli_was_killed_prints_the_net_change_on_restart(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    args = (
        "watch",
        "memo://notes",
        "--debounce",
        "0",
        "--json",
        "--name",
        "notes",
        "--watch-state",
        str(state),
    )
    async with memo_http_server() as (url, _), McpResourceSource.http(url) as writer:
        async with cli(*args, "--server", f"memo={url}") as (proc, out):
            await wait_until_watching(proc)
            await writer.call_tool("memo_set", {"key": "todo", "value": "milk"})
            assert (await next_record(out))["lines"] == ["ADDED todo"]
            proc.send_signal(signal.SIGKILL)  # no clean close: nothing staged is written
            with anyio.fail_after(WAIT):
                assert await proc.wait() == -signal.SIGKILL
        # While it is down: one key changed, one added.
        await writer.call_tool("memo_set", {"key": "todo", "value": "eggs"})
        await writer.call_tool("memo_set", {"key": "cat", "value": "fed"})
        async with cli(*args, "--server", f"memo={url}") as (proc, out):
            restore = await next_record(out)
            assert restore["kind"] == "watch.restore"
            assert any(
                "notes memo://notes: restored, caught up 2 changes" in line for line in restore["lines"]
            )
            away = await next_record(out)
            if away["redelivered"]:
                # Killed between printing "ADDED todo" and marking it taken: handed over again, flagged.
                assert away["lines"][-1] == "ADDED todo"
                away = await next_record(out)
            assert away["lines"][0].startswith("While you were away (2 changes to memo://notes")
            assert sorted(away["lines"][1:]) == ["ADDED cat", "MODIFIED todo (milk→eggs)"]
            await wait_until_watching(proc)
            await writer.call_tool("memo_set", {"key": "cat", "value": "asleep"})
            live = await next_record(out)  # and it goes on watching, from there
            assert live["lines"] == ["MODIFIED cat (fed→asleep)"]
            assert not live["redelivered"]
            proc.send_signal(signal.SIGTERM)
            with anyio.fail_after(WAIT):
                assert await proc.wait() == 0


async def watch_kcp_killed_and_restarted(tmp_path: Path, missed: int, *, ring: int) -> list[dict[str, Any]]:
    """A kcp server over HTTP (the fake kubectl) with a ring of ``ring`` events; the CLI watches
    its configmaps, takes one change, is SIGKILLed; ``missed`` configmaps are made while it is
    down; the records it prints once started again (restore notice first)."""
    cluster = FakeCluster(tmp_path / "cluster")
    kc = write_kubeconfig(tmp_path / "kc.json", "https://kcp.test:6443")
    env = {**os.environ, **kcp_env(cluster, tmp_path)}
    argv = [
        sys.executable,
        *kcp_argv(kc, "--backoff", "0:0", "--ring-events", str(ring), "--http", "127.0.0.1:0"),
    ]
    uri = "kcp-events://watch/root:app/configmaps?namespace=*"
    state = tmp_path / "state.json"
    async with (
        running_http_server(argv, env=env) as (url, _),
        McpResourceSource.http(url) as probe,
        probe.subscribe([uri]) as updates,
    ):
        # The probe keeps the server's watch of the URI open across the kill, and says when the
        # server has each change (no sleeping).
        args = (
            "watch",
            uri,
            "--server",
            f"kcp={url}",
            "--debounce",
            "0",
            "--json",
            "--watch-state",
            str(state),
        )
        async with cli(*args) as (proc, out):
            await wait_until_watching(proc)
            cluster.create("before", {"a": "1"})
            assert (await next_record(out))["lines"] == ["ADDED default/before"]
            proc.send_signal(signal.SIGKILL)
            with anyio.fail_after(WAIT):
                assert await proc.wait() == -signal.SIGKILL
        with anyio.fail_after(WAIT):
            await updates.__anext__()  # "before"
        await probe.read(uri)  # the server signals again once its reader has read
        for i in range(missed):
            cluster.create(f"down-{i}", {"i": str(i)})
            with anyio.fail_after(WAIT):
                await updates.__anext__()
            await probe.read(uri)
        async with cli(*args) as (proc, out):
            records = [await next_record(out), await next_record(out)]
            if records[1]["redelivered"]:
                # Killed between printing "before" and marking it taken: printed again, flagged.
                assert records[1]["lines"][-1] == "ADDED default/before"
                records[1] = await next_record(out)
            proc.send_signal(signal.SIGTERM)
            with anyio.fail_after(WAIT):
                await proc.wait()
    return records


async def test_kcp_every_event_made_while_the_cli_was_killed_arrives_in_order(tmp_path: Path) -> None:
    restore, away = await watch_kcp_killed_and_restarted(tmp_path, 5, ring=100)
    assert any("caught up 5 changes" in line for line in restore["lines"])
    assert away["lines"][0].startswith("While you were away (5 changes")
    assert away["lines"][1:] == [f"ADDED default/down-{i}" for i in range(5)]


async def test_kcp_changes_past_the_servers_retention_are_a_gap_then_what_it_still_holds(
    tmp_path: Path,
) -> None:
    restore, away = await watch_kcp_killed_and_restarted(tmp_path, 6, ring=3)
    assert any("fell out of the server's retention (GAP)" in line for line in restore["lines"])
    assert away["lines"][1].startswith("GAP")
    assert away["lines"][2:] == [f"ADDED default/down-{i}" for i in range(3, 6)]
