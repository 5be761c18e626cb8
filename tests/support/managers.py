"""`WatchManager` as the tests drive it: an in-memory memo server, a manager over fakes or a server.

`memo_fake` is a `FakeSource` shaped like the memo server (one JSON resource, a template, two
tools); `manager` runs a `WatchManager` over fakes on a `FakeClock`; `stdio_manager` over one real
server subprocess. `IMMEDIATE` turns debouncing off, so each read's lines make a notice at once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from asyncai_watch.clock import Clock
from asyncai_watch.core.limits import Limits
from asyncai_watch.core.notice import Notice
from asyncai_watch.mcp.client import McpResourceSource
from asyncai_watch.mcp.source import ListedResource, ListedTemplate, ToolInfo
from asyncai_watch.runtime.manager import WatchManager
from asyncai_watch.testing import FakeClock, FakeSource

NOTES = "memo://notes"
EXAMPLE = 'await watch_start(name="notes", uri="memo://notes")'
# resubscribe_jitter=0: the resubscribe tests count the exact 1, 2, 4 ... s deadlines.
IMMEDIATE = Limits(debounce_quiet=0, debounce_max_wait=0, resubscribe_jitter=0)


def memo_fake(name: str = "memo", **kw: Any) -> FakeSource:
    fake = FakeSource(
        name,
        resources=[
            ListedResource(
                uri=NOTES,
                name="notes",
                description=f"The memo as a JSON object.\nExample: {EXAMPLE}",
                mime_type="application/json",
            ),
            ListedResource(
                uri="memo://readme", name="readme", description="plain text", mime_type="text/plain"
            ),
        ],
        templates=[
            ListedTemplate(
                uri_template="memo://notes/{key}",
                name="note",
                description='One note.\nExample: await watch_start(name="n", uri="memo://notes/todo")',
                mime_type="application/json",
            )
        ],
        tools=[
            (ToolInfo(name="memo_get", read_only=True), lambda a: {"value": a.get("key")}),
            (ToolInfo(name="memo_set", read_only=False), lambda a: "ok"),
        ],
        **kw,
    )
    fake.set(NOTES, {})
    fake.set("memo://readme", "hello", mime_type="text/plain")
    return fake


async def next_notice(m: WatchManager) -> Notice:
    with anyio.fail_after(5):
        return await m.notices.receive()


@asynccontextmanager
async def manager(
    *sources: FakeSource, limits: Limits = IMMEDIATE, clock: FakeClock | None = None, **kw: Any
) -> AsyncIterator[WatchManager]:
    """A manager over in-memory fakes; time moves only when the test advances the clock."""
    async with WatchManager(list(sources), limits=limits, clock=clock or FakeClock(), **kw) as m:
        yield m


@asynccontextmanager
async def stdio_manager(
    name: str, argv: list[str], limits: Limits = IMMEDIATE, clock: Clock | None = None
) -> AsyncIterator[WatchManager]:
    """A manager over one server run as a stdio subprocess (`argv`), on the system clock by default."""
    async with (
        McpResourceSource.stdio(argv, name=name) as source,
        WatchManager([source], limits=limits, clock=clock) as m,
    ):
        yield m
