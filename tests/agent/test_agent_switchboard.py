"""The agent with a switchboard: drained and rung todos arrive as <channel> turns; completing one drains."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream

from asyncai_agent.backends.scripted import ScriptedBackend, parse_script
from asyncai_agent.events import AgentEvent, NoticeReceived, RunCompleted, RunFailed
from asyncai_agent.session import SessionConfig, open_session
from asyncai_watch.core.turns import CHANNEL_INSTRUCTION
from tests.support.pg import Store
from tests.support.switchboard_server import TOKENS, WAIT, call, connect, switchboard_http

SCRIPT = {
    "turns": [
        {
            "expect": "before the agent",
            "steps": [
                {
                    "run_code": (
                        'c = await todo_claim(queue="ops")\n'
                        'await todo_complete(todo_id=c["todo"]["id"], lease=c["lease"], result="done")\n'
                        'c["todo"]["summary"]'
                    )
                },
                {"expect": "before the agent", "reply": "Completed: {result}"},
            ],
        },
        {"expect": "push me", "steps": [{"reply": "NO_REPLY"}]},
    ]
}


class Channel:
    def __init__(self) -> None:
        self.sent: list[str] = []

    @property
    def name(self) -> str:
        return "ops"

    async def send(self, text: str) -> None:
        self.sent.append(text)


async def turn(events: MemoryObjectReceiveStream[AgentEvent], notices: list[NoticeReceived]) -> None:
    with anyio.fail_after(WAIT):
        async for event in events:
            if isinstance(event, NoticeReceived):
                notices.append(event)

            assert not isinstance(event, RunFailed), event.error
            if isinstance(event, RunCompleted):
                return


@pytest.mark.anyio
async def test_channel_notices_become_turns(sqlite_store: Store, config: Path) -> None:
    channel = Channel()
    notices: list[NoticeReceived] = []
    backend = ScriptedBackend(parse_script(SCRIPT))
    async with switchboard_http(sqlite_store, config) as sb, connect(sb.url, "alice") as alice:
        waiting = (await call(alice, "todo_create", queue="ops", kind="k", summary="before the agent"))[
            "todo"
        ]
        session_config = SessionConfig(mcp_http=(sb.url,), http_token=TOKENS["eve"])
        async with open_session(session_config, backend, default_channel=channel) as session:
            events = session.orchestrator.subscribe()
            (puller,) = session.pullers
            await turn(events, notices)  # the start-up drain announced the waiting todo
            # The agent's todo_complete asked the puller to drain again: requested, running or done.
            assert puller._drain_wanted.is_set() or not puller.drained.is_set() or puller.drains >= 2
            with anyio.fail_after(WAIT):
                await puller.attached.wait()
            await call(alice, "todo_create", queue="ops", kind="review", summary="push me")
            await turn(events, notices)
            with anyio.fail_after(WAIT):
                await session.orchestrator.wait_idle()
        done = await call(alice, "todo_list", queue="ops", status="done")
    assert backend.finished
    first = notices[0].rendered  # found by the pull: "via" stays in the meta, not in the tag
    assert notices[0].notice.meta["via"] == "pull"
    assert first.text == (
        f'<channel source="{puller.server}" todo_id="{waiting["id"]}" queue="ops" kind="k">'
        f"before the agent</channel>\n{CHANNEL_INSTRUCTION}"
    )
    assert notices[1].notice.text == "push me"
    assert channel.sent == ["Completed: before the agent"]
    assert [t["id"] for t in done["todos"]] == [waiting["id"]]
