"""ChannelPuller's degrade-to-pull rules, against a pull-only fake client (no server needed).

The durable queue is the delivery of record: whatever happens to a doorbell or a notice, the
next drain must announce every open todo the agent has not been told about.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from asyncai_agent.channels import ChannelPuller
from asyncai_watch.notice import Notice


def todo(n: int) -> dict[str, Any]:
    return {"id": f"t{n}", "queue": "ops", "kind": "k", "summary": f"todo {n}"}


class PullOnly:
    """``todo_pull`` over a list of open todos; ``subscriptions/listen`` is refused."""

    def __init__(self, *todos: dict[str, Any]) -> None:
        self.open = list(todos)
        self.listens = 0

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        assert name == "todo_pull", name
        page = {"todos": list(self.open), "next_after": None}
        return SimpleNamespace(is_error=False, structured_content=page, content=[])

    @asynccontextmanager
    async def listen(self, **_filters: Any) -> AsyncIterator[Any]:
        self.listens += 1
        raise MCPError(-32601, "this harness has no subscriptions/listen")
        yield  # pragma: no cover


def ids(notices: list[Notice]) -> list[str]:
    return [n.meta["todo_id"] for n in notices]


def received(puller: ChannelPuller) -> list[Notice]:
    out = []
    while True:
        try:
            out.append(puller.notices.receive_nowait())
        except anyio.WouldBlock:
            return out


@pytest.mark.anyio
async def test_a_notice_dropped_on_a_full_buffer_is_announced_by_the_next_drain() -> None:
    client = PullOnly(todo(1), todo(2))
    puller = ChannelPuller(buffer=1)
    assert await puller.drain(client) == 2  # type: ignore[arg-type]
    assert puller.dropped == 1
    assert ids(received(puller)) == ["t1"]
    await puller.drain(client)  # type: ignore[arg-type]
    assert ids(received(puller)) == ["t2"]  # not lost, and t1 is not announced twice


@pytest.mark.anyio
async def test_a_todo_that_returns_to_the_queue_is_announced_again() -> None:
    client = PullOnly(todo(1))
    puller = ChannelPuller()
    await puller.drain(client)  # type: ignore[arg-type]
    assert ids(received(puller)) == ["t1"]
    client.open = []  # claimed by someone
    await puller.drain(client)  # type: ignore[arg-type]
    client.open = [todo(1)]  # released, or its lease expired
    await puller.drain(client)  # type: ignore[arg-type]
    assert ids(received(puller)) == ["t1"]


@pytest.mark.anyio
async def test_without_any_listen_the_queue_is_still_drained_at_start() -> None:
    client = PullOnly(todo(7))

    async def never(_delay: float) -> None:  # park the re-listen backoff: no real waiting
        await anyio.sleep_forever()

    puller = ChannelPuller(sleep=never)
    async with anyio.create_task_group() as tg:
        tg.start_soon(puller.run, client)
        with anyio.fail_after(10):
            notice = await puller.notices.receive()
        tg.cancel_scope.cancel()
    assert notice.meta["todo_id"] == "t7"
    assert client.listens == 1
    assert not puller.attached.is_set()
