"""PydanticAI end to end, offline: a ``FunctionModel`` agent with the watch toolset, the real memo
server over stdio, and a second client whose changes become agent runs."""

from __future__ import annotations

import anyio
import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import FunctionModel

from asyncai_watch.integrations.pydantic_ai import AgentTurns, server_toolset, watch_runner, watch_toolset
from tests.support.integration_memo import (
    WAIT,
    Brain,
    Published,
    ask_call,
    memo,
    own_write_reaches_the_watch,
    two_notices_during_one_run,
)
from tests.support.pydantic_ai_model import Model

pytestmark = pytest.mark.anyio


def user_prompts(messages: list[ModelMessage]) -> list[str]:
    return [
        part.content
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart) and isinstance(part.content, str)
    ]


async def test_a_change_becomes_a_turn_whose_reply_is_published_and_history_is_kept() -> None:
    brain, published = Brain(), Published()
    model = Model(brain)
    async with memo() as m:
        agent = Agent(FunctionModel(model.respond), toolsets=[watch_toolset(m.watches)])
        async with watch_runner(agent, m.watches, publish=published) as runner:
            ask = ask_call("watch_start", name="notes", uri="memo://notes")
            with anyio.fail_after(WAIT):
                first = await runner.ask(ask)
            assert first.reply == "tool said: " + '{"name":"notes","uri":"memo://notes","shape":"state"}'
            assert [w.name for w in m.watches.watch_list()] == ["notes"]

            await m.set("todo", "milk")
            with anyio.fail_after(WAIT):
                stats = await runner.wait(lambda s: s.runs_completed == 2)
            assert stats.published == 2
            assert published.texts[1] == "seen: ADDED todo"
            turn = runner.runs[1]
            assert [n.meta["name"] for n in turn.notices] == ["notes"]
            assert turn.prompt.startswith('<watch-event name="notes" uri="memo://notes">\nADDED todo\n')
            # Turn 2's request carries turn 1: the user's ask, the tool call and its return.
            history = model.requests[-1]
            assert user_prompts(history) == [ask, turn.prompt]
            assert any(
                isinstance(p, ToolCallPart) and p.tool_name == "watch_start"
                for msg in history
                if isinstance(msg, ModelResponse)
                for p in msg.parts
            )


async def test_a_no_reply_turn_publishes_nothing() -> None:
    brain, published = Brain(), Published()
    async with memo() as m:
        agent = Agent(FunctionModel(Model(brain).respond), toolsets=[watch_toolset(m.watches)])
        async with watch_runner(agent, m.watches, publish=published) as runner:
            with anyio.fail_after(WAIT):
                await runner.ask(ask_call("watch_start", name="notes", uri="memo://notes"))
                await m.set("noise", 1)
                stats = await runner.wait(lambda s: s.runs_completed == 2)
            assert runner.runs[1].reply == "NO_REPLY"
            assert not runner.runs[1].published
            assert (stats.published, stats.suppressed) == (1, 1)
            assert len(published.texts) == 1  # only the answer to the ask

            # The next change that matters is published again: suppression is per reply.
            with anyio.fail_after(WAIT):
                await m.set("todo", "milk")
                await runner.wait(lambda s: s.published == 2)
            assert published.texts[-1] == "seen: ADDED todo"


async def test_two_notices_during_a_run_give_one_follow_up_run() -> None:
    brain, published = Brain(), Published()
    model = Model(brain)
    async with memo() as m:
        agent = Agent(FunctionModel(model.respond), toolsets=[watch_toolset(m.watches)])
        async with watch_runner(agent, m.watches, publish=published) as runner:
            await two_notices_during_one_run(runner, m, brain, published)
            assert brain.prompts[-1].count("<watch-event") == 2


async def test_refused_calls_are_tool_errors_with_the_library_message() -> None:
    brain, published = Brain(), Published()
    async with memo() as m:
        agent = Agent(FunctionModel(Model(brain).respond), toolsets=[watch_toolset(m.watches)])
        async with watch_runner(agent, m.watches, publish=published) as runner:
            with anyio.fail_after(WAIT):
                unknown = await runner.ask(ask_call("watch_start", name="x", uri="nope://here"))
                bad_name = await runner.ask(ask_call("watch_start", name="a b", uri="memo://notes"))
                stopped = await runner.ask(ask_call("watch_stop", name="never"))
    assert unknown.error is None
    assert unknown.reply is not None
    # The server's refusal, as the library words it, reaches the model as a failed tool call.
    assert "ServerError: server 'memo': subscriptions/listen 'nope://here' failed" in unknown.reply
    assert bad_name.reply is not None
    assert "InvalidWatchNameError: watch_start: invalid watch name 'a b'" in bad_name.reply
    assert stopped.reply == "tool said: false"
    assert m.watches.watch_list() == []


async def test_a_filter_through_the_toolset_may_not_call_a_mutating_tool() -> None:
    brain, published = Brain(), Published()
    async with memo() as m:
        agent = Agent(FunctionModel(Model(brain).respond), toolsets=[watch_toolset(m.watches)])
        async with watch_runner(agent, m.watches, publish=published) as runner:
            on_event = 'memo_set(key="hijacked", value=True)'
            with anyio.fail_after(WAIT):
                started = await runner.ask(
                    ask_call("watch_start", name="notes", uri="memo://notes", on_event=on_event)
                )
            # Refused at its start, not on every event after it.
            assert started.reply is not None
            assert "FilterError: on_event may only read; it calls memo_set()" in started.reply
            assert "is not read-only" in started.reply
            assert m.watches.watch_list() == []
            assert await m.notes() == {}  # the filter wrote nothing


async def test_agent_turns_keeps_the_message_history_between_calls() -> None:
    brain = Brain()
    turns = AgentTurns(Agent(FunctionModel(Model(brain).respond)))
    with anyio.fail_after(WAIT):
        assert await turns("hello") == "ok"
        first = len(turns.messages)
        assert await turns("again") == "ok"
    assert first == 2
    assert len(turns.messages) == 4
    assert user_prompts(turns.messages) == ["hello", "again"]


async def test_the_agents_own_write_through_the_server_toolset_reaches_its_watch() -> None:
    brain, published = Brain(), Published()
    async with memo() as m:
        toolsets = [watch_toolset(m.watches), await server_toolset(m.watches.sources)]
        agent = Agent(FunctionModel(Model(brain).respond), toolsets=toolsets)
        async with watch_runner(agent, m.watches, publish=published) as runner:
            await own_write_reaches_the_watch(runner, m, published)
