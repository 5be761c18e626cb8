"""A change made right after a listen is acknowledged is never lost (stock ``mcp`` client over stdio).

The listen is acknowledged only once the inotify watch is in place, and a read of a
``dir-events://`` URI with no watcher yet keeps one log per URI (same ``log_id``), so a
client that reads, listens and writes at once always gets an update and sees its change.
Each race is repeated many times on one server: a lost change shows up as no update.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.subscriptions import Subscription

pytestmark = pytest.mark.anyio

TRIALS = 30
WAIT = 15.0


@asynccontextmanager
async def files_server(root: Path) -> AsyncIterator[Client]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "asyncai_servers.files", str(root)])
    async with Client(params) as client:
        yield client


async def text_of(client: Client, uri: str) -> str:
    text = getattr((await client.read_resource(uri)).contents[0], "text", None)
    assert isinstance(text, str)
    return text


async def next_update(sub: Subscription, what: str) -> None:
    with anyio.fail_after(WAIT):
        event = await sub.__anext__()
    assert event is not None, what


async def events_after(client: Client, sub: Subscription, uri: str, baseline: dict[str, Any]) -> list[Any]:
    """Re-read after each update until the log has an event past the baseline; same log throughout."""
    while True:
        body = json.loads(await text_of(client, uri))
        assert body["log_id"] == baseline["log_id"], "the log started over between the baseline and now"
        events = [e for e in body["events"] if e["seq"] > baseline["last_seq"]]
        if events:
            return events
        await next_update(sub, "a second update")


async def test_read_listen_write_on_dir_events_never_loses_the_change(tmp_path: Path) -> None:
    async with files_server(tmp_path) as client:
        for trial in range(TRIALS):
            directory = tmp_path / f"d{trial}"
            directory.mkdir()
            uri = f"dir-events://{directory}"
            baseline = json.loads(await text_of(client, uri))  # a read with no watcher yet
            async with client.listen(resource_subscriptions=[uri]) as sub:
                (directory / "new.txt").write_text("x")  # right after the ack
                await next_update(sub, f"trial {trial}: no update for a write made after the ack")
                events = await events_after(client, sub, uri, baseline)
            # ADDED, and MODIFIED too when the creation was seen before the write landed.
            assert (events[0]["type"], events[0]["object"]["name"]) == ("ADDED", "new.txt"), (trial, events)
            assert {(e["type"], e["object"]["name"]) for e in events[1:]} <= {("MODIFIED", "new.txt")}
            assert events[0]["seq"] == baseline["last_seq"] + 1


async def test_listen_write_on_a_file_never_loses_the_change(tmp_path: Path) -> None:
    async with files_server(tmp_path) as client:
        for trial in range(TRIALS):
            directory = tmp_path / f"d{trial}"
            directory.mkdir()
            target = directory / "state.txt"
            target.write_text("before")
            uri = f"file://{target}"
            async with client.listen(resource_subscriptions=[uri]) as sub:
                target.write_text("after")  # right after the ack, before any read
                await next_update(sub, f"trial {trial}: no update for a write made after the ack")
                # The update may come for the truncation, before the text lands: then another follows.
                while await text_of(client, uri) != "after":
                    await next_update(sub, f"trial {trial}: no update once the write completed")


async def test_a_read_before_any_listen_keeps_one_log(tmp_path: Path) -> None:
    """Reads of an unwatched dir-events URI are one log: the same log_id, and what changed between them."""
    uri = f"dir-events://{tmp_path}"
    async with files_server(tmp_path) as client:
        first = json.loads(await text_of(client, uri))
        (tmp_path / "between.txt").write_text("x")
        second = json.loads(await text_of(client, uri))
        assert second["log_id"] == first["log_id"]
        assert [(e["type"], e["object"]["name"]) for e in second["events"]] == [("ADDED", "between.txt")]
        # A watch started later continues the same log.
        async with client.listen(resource_subscriptions=[uri]) as sub:
            (tmp_path / "later.txt").write_text("y")
            await next_update(sub, "no update for a write made after the ack")
            events = await events_after(client, sub, uri, second)
        assert (events[0]["type"], events[0]["object"]["name"]) == ("ADDED", "later.txt")
        assert events[0]["seq"] == second["last_seq"] + 1
