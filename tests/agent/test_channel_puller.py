"""ChannelPuller's degrade-to-pull rules, against a pull-only fake client (no server needed),
and its NDJSON log records, against a real switchboard over Streamable HTTP.

The durable queue is the delivery of record: whatever happens to a doorbell or a notice, the
next drain must announce every open todo the agent has not been told about.
"""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from asyncai_agent.channels import ChannelPuller
from asyncai_watch import log
from asyncai_watch.core.backoff import Backoff
from asyncai_watch.core.notice import Notice
from asyncai_watch.testing import FakeClock
from tests.support.pg import Store
from tests.support.switchboard_server import WAIT, call, connect, switchboard_http


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
    puller = ChannelPuller(clock=FakeClock())  # the re-listen backoff stays parked
    async with anyio.create_task_group() as tg:
        tg.start_soon(puller.run, client)  # type: ignore[arg-type]
        with anyio.fail_after(10):
            notice = await puller.notices.receive()
        tg.cancel_scope.cancel()
    assert notice.meta["todo_id"] == "t7"
    assert client.listens == 1
    assert not puller.attached.is_set()


class Stepped(PullOnly):
    """A pull-only client whose each ``todo_pull`` waits until the test lets it answer."""

    def __init__(self) -> None:
        super().__init__(todo(1))
        self.entered, self._entered_rx = anyio.create_memory_object_stream[None](8)
        self._release_tx, self._release = anyio.create_memory_object_stream[None](8)

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        await self.entered.send(None)
        await self._release.receive()
        return await super().call_tool(name, arguments)

    async def pulled(self) -> None:
        """Wait until a ``todo_pull`` is in flight."""
        with anyio.fail_after(WAIT):
            await self._entered_rx.receive()

    async def answer(self) -> None:
        await self._release_tx.send(None)


@pytest.mark.anyio
async def test_drained_is_set_only_once_every_drain_asked_for_is_done() -> None:
    # An owner that awaits `drained` (before it restarts a server, say) must not be told "caught
    # up" while a drain it asked for, or one a listen asked for, has not run yet.
    client = Stepped()
    puller = ChannelPuller(clock=FakeClock())
    async with anyio.create_task_group() as tg:
        tg.start_soon(puller.run, client)  # type: ignore[arg-type]
        await client.pulled()  # the start-up drain is pulling ...
        puller.completed()  # ... when a completion asks for another
        waited_on = puller.drained
        await client.answer()
        await client.pulled()  # the second drain has begun, so the first is done
        assert puller.drains == 1
        assert not waited_on.is_set()  # one drain done, one asked for: not caught up
        await client.answer()
        with anyio.fail_after(WAIT):
            await waited_on.wait()
        assert puller.drains == 2
        tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_a_refused_listen_is_retried_forever_1_2_4_8_16_then_every_16_s() -> None:
    client = PullOnly()
    clock = FakeClock()
    puller = ChannelPuller(clock=clock)
    async with anyio.create_task_group() as tg:
        tg.start_soon(puller.run, client)  # type: ignore[arg-type]
        for attempt, delay in enumerate([1.0, 2.0, 4.0, 8.0, 16.0, 16.0, 16.0], start=1):
            with anyio.fail_after(WAIT):
                await clock.wait_for_sleepers(1)
            assert client.listens == attempt
            assert clock.deadlines() == [clock.now() + delay], f"attempt {attempt}"
            clock.advance(delay)
        tg.cancel_scope.cancel()


def test_a_backoff_that_gives_up_is_refused() -> None:
    # The listen is what lets doorbells in: a puller that stopped re-listening would go deaf.
    with pytest.raises(ValueError, match="attempts must be None"):
        ChannelPuller(backoff=Backoff(initial=1.0, cap=16.0, attempts=5))


# -- the NDJSON log -----------------------------------------------------------------------------


class NdjsonLines(io.StringIO):
    """A log stream that parses each NDJSON line as it is written and wakes whoever waits for one."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[dict[str, Any]] = []
        self._partial = ""
        self._grew = anyio.Event()

    def write(self, s: str) -> int:
        *complete, self._partial = (self._partial + s).split("\n")
        for line in complete:
            record = json.loads(line)  # every line is one JSON object
            assert isinstance(record, dict)
            self.records.append(record)
        if complete:
            grew, self._grew = self._grew, anyio.Event()
            grew.set()
        return super().write(s)

    def events(self) -> list[str]:
        return [r["event"] for r in self.records]

    async def first(self, event: str, since: int = 0, **fields: Any) -> dict[str, Any]:
        """The first record of ``event`` (from index ``since``) with these field values, awaited."""
        with anyio.fail_after(WAIT):
            while True:
                for record in self.records[since:]:
                    if record["event"] == event and all(record.get(k) == v for k, v in fields.items()):
                        return record
                await self._grew.wait()


@pytest.fixture
def ndjson() -> Iterator[NdjsonLines]:
    saved = (list(log.logger.handlers), log.logger.level, log.logger.propagate)
    lines = NdjsonLines()
    yield lines
    for handler in log.logger.handlers:
        if handler not in saved[0]:
            handler.close()
    log.logger.handlers[:], log.logger.level, log.logger.propagate = saved


def common(record: dict[str, Any], level: str = "INFO") -> None:
    """The shape every record of the project's NDJSON log has (docs/watch-manager.md, Logging)."""
    assert record["level"] == level
    assert record["logger"] == "asyncai_watch"
    assert isinstance(record["ts"], str)
    assert record["ts"]
    assert record["server"] == "switchboard"


@pytest.mark.anyio
async def test_doorbells_drains_and_announcements_are_ndjson_records(
    sqlite_store: Store, config: Path, ndjson: NdjsonLines
) -> None:
    log.configure_ndjson(ndjson)  # not verbose: the puller's own verbose=True makes them INFO
    puller = ChannelPuller(server="switchboard", queue="ops", verbose=True)
    async with switchboard_http(sqlite_store, config) as sb, connect(sb.url, "alice") as alice:
        waiting = (await call(alice, "todo_create", queue="ops", kind="k", summary="before the agent"))[
            "todo"
        ]
        async with connect(sb.url, "eve", [puller.extension]) as eve, anyio.create_task_group() as tg:
            tg.start_soon(puller.run, eve)
            announced = await ndjson.first("channel.announced")
            attached = await ndjson.first("channel.attached")
            rung = (await call(alice, "todo_create", queue="ops", kind="review", summary="push me"))["todo"]
            doorbell = await ndjson.first("channel.doorbell")
            seen = len(ndjson.records)
            puller.completed()
            # The drain the attach asked for may still end after the doorbell (listing only the
            # first todo); the completion's drain starts after the create, so it lists both.
            last_drain = await ndjson.first("channel.drained", since=seen, listed=2)
            tg.cancel_scope.cancel()
    common(announced)
    assert announced["todo_id"] == waiting["id"]
    assert (announced["queue"], announced["kind"]) == ("ops", "k")
    assert announced["delivered"] is True
    assert announced["dropped"] == 0
    common(attached)
    assert attached["attempt"] == 0
    common(doorbell)
    assert doorbell["todo_id"] == rung["id"]
    assert doorbell["delivered"] is True
    # The start-up drain found the waiting todo and announced it; it is logged right after it.
    first_drain = ndjson.records[ndjson.records.index(announced) + 1]
    common(first_drain)
    assert first_drain["event"] == "channel.drained"
    assert first_drain["queue"] == "ops"
    assert (first_drain["drains"], first_drain["listed"], first_drain["announced"]) == (1, 1, 1)
    assert first_drain["forgotten"] == 0
    # A drain after the doorbell lists both open todos and announces neither again.
    common(last_drain)
    assert (last_drain["announced"], last_drain["forgotten"], last_drain["queue"]) == (0, 0, "ops")
    assert last_drain["drains"] >= 2
    # Only channel.* records: no plain-text lines from a stdlib logger of its own.
    assert {e.split(".")[0] for e in ndjson.events()} == {"channel"}


class FailingPull(PullOnly):
    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        text = SimpleNamespace(text="the ledger is down")
        return SimpleNamespace(is_error=True, structured_content=None, content=[text])


@pytest.mark.anyio
@pytest.mark.parametrize("verbose", [False, True])
async def test_a_failed_drain_is_always_logged_a_relisten_only_verbose(
    ndjson: NdjsonLines, verbose: bool
) -> None:
    log.configure_ndjson(ndjson)
    clock = FakeClock()
    backoff = Backoff(initial=4.0, cap=4.0, attempts=None)
    puller = ChannelPuller(server="switchboard", backoff=backoff, clock=clock, verbose=verbose)
    async with anyio.create_task_group() as tg:
        tg.start_soon(puller.run, FailingPull())  # type: ignore[arg-type]
        failed = await ndjson.first("channel.drain_failed")
        with anyio.fail_after(WAIT):
            await clock.wait_for_sleepers(1)  # the relisten record, if any, is written before the backoff
        assert clock.deadlines() == [4.0]
        tg.cancel_scope.cancel()
    common(failed, level="WARNING")
    assert failed["error"] == "MCPError: todo_pull failed: the ledger is down"
    assert failed["queue"] is None
    if not verbose:
        assert ndjson.events() == ["channel.drain_failed"]
        return
    relisten = await ndjson.first("channel.relistening")
    common(relisten)
    assert (relisten["attempt"], relisten["delay"]) == (1, 4.0)
    assert relisten["reason"] == "MCPError: this harness has no subscriptions/listen"
