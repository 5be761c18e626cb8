"""A switchboard core over an in-memory ledger with its credentials, and what the tests collect of it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import anyio

from asyncai_servers.switchboard.config import Credentials, parse_credentials
from asyncai_servers.switchboard.core import Switchboard
from asyncai_servers.switchboard.doorbell import Doorbell
from asyncai_servers.switchboard.hub import Subscriber
from asyncai_servers.switchboard.ledger import Ledger
from tests.support.pg import Store

WAIT = 10
CONFIG: dict[str, Any] = {
    "credentials": [
        {
            "name": "alice",
            "token": "alice-token",
            "queues": ["ops"],
            "attribution": "human",
            "verified": True,
        },
        {
            "name": "carol",
            "token": "carol-token",
            "queues": ["ops"],
            "attribution": "human",
            "verified": False,
        },
        {"name": "bot", "token": "bot-token-1", "queues": ["*"], "attribution": "agent", "verified": True},
        {"name": "eve", "token": "eve-token-1", "queues": ["ops"], "attribution": "agent"},
        {
            "name": "dave",
            "token": "dave-token",
            "queues": ["other"],
            "attribution": "human",
            "verified": True,
        },
    ]
}
CREDS: Credentials = parse_credentials(CONFIG)
ALICE, CAROL, BOT, EVE, DAVE = (cast(Any, CREDS.by_name(n)) for n in ("alice", "carol", "bot", "eve", "dave"))


@asynccontextmanager
async def board(store: Store, **kw: Any) -> AsyncIterator[Switchboard]:
    async with Switchboard(cast(Ledger, store.ledger()), CREDS, **kw) as b:
        yield b


async def collect(sub: Subscriber, n: int) -> list[str]:
    """The todo_ids of the next ``n`` doorbells ``sub`` receives."""
    ids: list[str] = []
    while len(ids) < n:
        ids += [x.meta["todo_id"] for x in await next_bells(sub)]
    return ids


async def next_bells(sub: Subscriber) -> list[Doorbell]:
    with anyio.fail_after(WAIT):
        while True:  # next_batch waits on an event; uri-only batches are skipped
            batch = await sub.next_batch()
            assert batch is not None
            if batch[0]:
                return batch[0]
