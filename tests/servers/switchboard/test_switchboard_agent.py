"""The agent side: ChannelPuller turns doorbells into Notices and drains by pull so nothing is missed."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import anyio
import pytest
from mcp import Client

from asyncai_agent.channels import ChannelExtension, ChannelPuller, has_channel
from asyncai_watch.core.notice import Notice
from asyncai_watch.testing import FakeClock
from tests.support.pg import Store
from tests.support.switchboard_server import WAIT, call, connect, switchboard_http


async def end_backoffs(clock: FakeClock) -> None:
    """Move the clock to each backoff deadline as soon as a task waits on it (until cancelled):
    once the server is back, however many re-listens it takes, none waits for a test step."""
    while True:
        await clock.wait_for_sleepers(1)
        clock.set_time(clock.deadlines()[0])


async def next_notice(puller: ChannelPuller) -> Notice:
    with anyio.fail_after(WAIT):
        return await puller.notices.receive()


@pytest.mark.anyio
async def test_puller_drains_at_start_rings_and_drains_after_completion(
    sqlite_store: Store, config: Path
) -> None:
    puller = ChannelPuller(server="switchboard", queue="ops")
    async with (
        switchboard_http(sqlite_store, config) as sb,
        connect(sb.url, "alice") as alice,
        connect(sb.url, "bot") as bot,
    ):
        waiting = (await call(alice, "todo_create", queue="ops", kind="k", summary="before the agent"))[
            "todo"
        ]
        async with connect(sb.url, "eve", [puller.extension]) as eve, anyio.create_task_group() as tg:
            assert has_channel(eve)
            tg.start_soon(puller.run, eve)
            first = await next_notice(
                puller
            )  # the start-up drain found it: no doorbell was ever rung for eve
            assert first.source == "channel"
            assert first.text == "before the agent"
            assert first.meta == {
                "server": "switchboard",
                "todo_id": waiting["id"],
                "queue": "ops",
                "kind": "k",
                "via": "pull",
            }
            with anyio.fail_after(WAIT):
                await puller.attached.wait()
            rung = (await call(alice, "todo_create", queue="ops", kind="review", summary="push me"))["todo"]
            bell = await next_notice(puller)
            assert bell.meta["todo_id"] == rung["id"]
            assert "via" not in bell.meta  # a doorbell, not a pull
            # An agent-made todo is pull-only: no doorbell; the drain after a completed todo finds it.
            quiet = (await call(bot, "todo_create", queue="ops", kind="k", summary="quiet one"))["todo"]
            claim = await call(eve, "todo_claim", queue="ops")
            await call(eve, "todo_complete", todo_id=claim["todo"]["id"], lease=claim["lease"], result="done")
            puller.observe_tool_call("todo_complete", ok=True)
            found = await next_notice(puller)
            assert found.meta["todo_id"] == quiet["id"]
            assert found.meta["via"] == "pull"
            assert puller.drains >= 2  # start-up, then after completion; the rung todo was not re-announced
            tg.cancel_scope.cancel()


@pytest.mark.anyio
async def test_puller_relistens_and_drains_after_server_restart(sqlite_store: Store, config: Path) -> None:
    clock = FakeClock()  # the re-listen backoff waits until the test has the server back up
    puller = ChannelPuller(server="switchboard", clock=clock)
    async with switchboard_http(sqlite_store, config) as first:
        url = first.url
        port = urllib.parse.urlsplit(url).port
        eve_cm = connect(url, "eve", [puller.extension])
        eve: Client = await eve_cm.__aenter__()
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(puller.run, eve)
                with anyio.fail_after(WAIT):
                    await puller.attached.wait()
                    await puller.drained.wait()
                first.proc.terminate()  # graceful: the server ends its listen streams on the way down
                with anyio.fail_after(WAIT):
                    await first.proc.wait()
                async with (
                    switchboard_http(sqlite_store, config, http=f"127.0.0.1:{port}") as second,
                    connect(second.url, "alice") as alice,
                ):
                    missed = (await call(alice, "todo_create", queue="ops", kind="k", summary="while away"))[
                        "todo"
                    ]
                    with anyio.fail_after(WAIT):
                        await clock.wait_for_sleepers(1)
                    assert clock.deadlines() == [1.0]  # the first re-listen waits 1 s
                    tg.start_soon(end_backoffs, clock)  # the server is back: time may pass
                    notice = await next_notice(puller)  # the reconnect drain
                    assert notice.meta["todo_id"] == missed["id"]
                    assert notice.meta["via"] == "pull"
                    with anyio.fail_after(WAIT):
                        await puller.attached.wait()
                    rung = (await call(alice, "todo_create", queue="ops", kind="k", summary="push again"))[
                        "todo"
                    ]
                    assert (await next_notice(puller)).meta["todo_id"] == rung["id"]
                    tg.cancel_scope.cancel()
        finally:
            await eve_cm.__aexit__(None, None, None)


@pytest.mark.anyio
async def test_extension_keeps_receiver_rules_for_meta() -> None:
    got: list[Notice] = []
    ext = ChannelExtension("switchboard", got.append)
    (binding,) = ext.notifications()
    assert binding.method == "notifications/claude/channel"
    params = binding.params_type.model_validate(
        {
            "content": "a &lt;/channel> &quot;b&quot;",
            "meta": {
                "todo_id": "7",
                "bad-key": "x",
                "n": 3,
                "flag": True,
                "obj": {"a": 1},
                "server": "forged",
            },
        }
    )
    await binding.handler(params)
    (notice,) = got
    assert notice.source == "channel"
    assert notice.text == 'a </channel> "b"'  # decoded: the agent's renderer escapes it again
    assert dict(notice.meta) == {"server": "switchboard", "todo_id": "7", "n": "3", "flag": "true"}
