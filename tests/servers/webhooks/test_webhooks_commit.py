"""The webhooks server's group commit and its reads, in process on a SQLite file: deliveries that
arrive while a commit is on disk are committed together and each is answered only once committed;
a batch that fails fails every delivery in it and stores none; a read of a log is answered while a
commit waits on the disk (another connection holding SQLite's write lock stands in for a slow disk)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client import Client

from asyncai_servers.webhooks.config import load_config
from asyncai_servers.webhooks.server import WebhooksServer
from asyncai_servers.webhooks.uri import LogTarget
from asyncai_servers.webhooks.verify import Delivery
from tests.support.webhooks_helpers import WAIT, run_delivery, write_config

pytestmark = [pytest.mark.anyio]

RUNS = "webhook-events://github/workflow_run"


@asynccontextmanager
async def running(tmp: Path) -> AsyncIterator[WebhooksServer]:
    server = WebhooksServer(load_config(write_config(tmp)), tmp / "hooks.sqlite3")
    try:
        async with server.running():
            yield server
    finally:
        server.close()


@contextmanager
def write_locked(db: Path) -> Iterator[Callable[[], None]]:
    """Another connection holds the database's write lock (the writer's next commit waits, as on a
    slow disk) until the yielded function is called."""
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")

    def release() -> None:
        if other.in_transaction:
            other.execute("COMMIT")

    try:
        yield release
    finally:
        release()
        other.close()


def stored_ids(db: Path) -> list[str]:
    """The delivery ids committed to the file, as a new connection (another process) sees them."""
    check = sqlite3.connect(db)
    try:
        return sorted(r[0] for r in check.execute("SELECT delivery_id FROM deliveries"))
    finally:
        check.close()


async def test_deliveries_arriving_during_a_commit_are_committed_together_each_answered_after_it(
    tmp_path: Path,
) -> None:
    db = tmp_path / "hooks.sqlite3"
    answered: dict[str, bool] = {}
    async with running(tmp_path) as server:

        async def deliver(delivery: Delivery) -> None:
            answered[delivery.delivery_id] = await server.deliver(delivery)

        with anyio.fail_after(WAIT), write_locked(db) as release:
            async with anyio.create_task_group() as tg:
                for run_id in range(1, 6):
                    tg.start_soon(deliver, run_delivery(run_id)[0])
                await anyio.wait_all_tasks_blocked()
                assert answered == {}  # none is answered while its commit has not happened
                assert stored_ids(db) == []
                release()
        assert answered == {f"d-{i}": True for i in range(1, 6)}
        assert stored_ids(db) == [f"d-{i}" for i in range(1, 6)]  # on disk when answered


async def test_a_batch_that_fails_fails_every_delivery_in_it_and_stores_none(tmp_path: Path) -> None:
    db = tmp_path / "hooks.sqlite3"
    outcome: dict[str, str] = {}
    async with running(tmp_path) as server:

        async def deliver(delivery: Delivery) -> None:
            try:
                outcome[delivery.delivery_id] = "stored" if await server.deliver(delivery) else "duplicate"
            except Exception as exc:  # the receiver answers 503: the sender retries
                outcome[delivery.delivery_id] = type(exc).__name__

        # A payload the store cannot write (a verified one always can) fails the whole batch.
        broken = Delivery("github", "d-broken", "workflow_run", {"workflow_run": {"id": object()}})
        with anyio.fail_after(WAIT), write_locked(db) as release:
            async with anyio.create_task_group() as tg:
                tg.start_soon(deliver, run_delivery(1)[0])
                await anyio.wait_all_tasks_blocked()  # d-1's commit waits for the lock
                for delivery in (run_delivery(2)[0], broken, run_delivery(3)[0]):
                    tg.start_soon(deliver, delivery)  # the next batch, queued behind it
                await anyio.wait_all_tasks_blocked()
                release()
        assert outcome["d-1"] == "stored"
        assert {outcome[i] for i in ("d-2", "d-broken", "d-3")} == {"TypeError"}
        assert stored_ids(db) == ["d-1"]
        with anyio.fail_after(WAIT):
            assert await server.deliver(run_delivery(2)[0]) is True  # the sender's retry is stored
        assert stored_ids(db) == ["d-1", "d-2"]


async def test_a_log_is_read_while_a_commit_waits_on_the_disk(tmp_path: Path) -> None:
    db = tmp_path / "hooks.sqlite3"
    second: list[bool] = []
    async with running(tmp_path) as server, Client(server.server) as client:
        with anyio.fail_after(WAIT):
            assert await server.deliver(run_delivery(1)[0]) is True
        first = json.loads((await client.read_resource(RUNS)).contents[0].text)  # type: ignore[union-attr]
        with anyio.fail_after(WAIT), write_locked(db) as release:
            async with anyio.create_task_group() as tg:

                async def deliver() -> None:
                    second.append(await server.deliver(run_delivery(2)[0]))

                tg.start_soon(deliver)
                await anyio.wait_all_tasks_blocked()  # delivery 2's commit waits for the lock
                during: dict[str, Any] = json.loads(
                    (await client.read_resource(RUNS)).contents[0].text  # type: ignore[union-attr]
                )
                assert second == []  # answered while the commit was still waiting
                release()
        assert second == [True]
        assert during["log_id"] == first["log_id"]
        assert (during["last_seq"], [e["key"] for e in during["events"]]) == (1, ["1"])
        after = json.loads(
            server.store.read_log(LogTarget("github", "workflow_run"), (first["log_id"], 1)).text
        )
        assert (after["last_seq"], [e["key"] for e in after["events"]]) == (2, ["2"])
