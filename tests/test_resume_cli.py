"""``asyncai-watch watch --watch-state``: killed (SIGKILL) and started again, it prints what it missed."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest
from test_cli import WAIT, cli, wait_until_watching
from test_memo_server import memo_http_server

from asyncai_watch import McpResourceSource

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
            assert restore["source"] == "watch.restore"
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
