"""OpenAI Agents SDK end to end, offline: an ``Agent`` whose model is a fake implementing the
SDK's ``Model`` interface, with the watch function tools, the real memo server over stdio, and
a second client whose changes become ``Runner.run`` turns."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from agents import Agent, ModelSettings, RunConfig, Tool
from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.models.interface import Model, ModelTracing
from agents.testing import assistant_message, function_call
from agents.usage import Usage
from openai.types.responses.response_prompt_param import ResponsePromptParam

from asyncai_watch.integrations.openai_agents import AgentTurns, server_tools, watch_runner, watch_tools
from tests.support.integration_memo import (
    WAIT,
    Brain,
    Call,
    Published,
    ask_call,
    memo,
    own_write_reaches_the_watch,
    two_notices_during_one_run,
)

pytestmark = pytest.mark.anyio

OFFLINE = RunConfig(tracing_disabled=True)


class FakeModel(Model):
    """The SDK's model interface over the test brain: the last input item decides the answer."""

    def __init__(self, brain: Brain) -> None:
        self.brain = brain
        self.inputs: list[list[Any]] = []
        self.calls = 0

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        items: list[Any] = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        self.inputs.append(items)
        last = items[-1]
        if last.get("type") == "function_call_output":
            answer: Call | str = self.brain.on_tool_result(str(last["output"]))
        else:
            answer = await self.brain.on_user(last["content"])
        if isinstance(answer, Call):
            self.calls += 1
            item = function_call(answer.name, answer.args, call_id=f"c{self.calls}")
        else:
            item = assistant_message(answer)
        return ModelResponse(output=[item], usage=Usage(), response_id=None)

    def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("the runner uses Runner.run, not streaming")


def user_texts(items: list[Any]) -> list[str]:
    return [item["content"] for item in items if item.get("role") == "user"]


async def test_a_change_becomes_a_turn_whose_reply_is_published_and_history_is_kept() -> None:
    brain, published = Brain(), Published()
    model = FakeModel(brain)
    async with memo() as m:
        agent = Agent(name="watcher", model=model, tools=watch_tools(m.watches))
        async with watch_runner(agent, m.watches, publish=published, run_config=OFFLINE) as runner:
            ask = ask_call("watch_start", name="notes", uri="memo://notes")
            with anyio.fail_after(WAIT):
                first = await runner.ask(ask)
            assert first.reply == 'tool said: {"name": "notes", "uri": "memo://notes", "shape": "state"}'
            assert [w.name for w in m.watches.watch_list()] == ["notes"]

            with anyio.fail_after(WAIT):
                await m.set("todo", "milk")
                stats = await runner.wait(lambda s: s.runs_completed == 2)
            assert stats.published == 2
            assert published.texts[1] == "seen: ADDED todo"
            turn = runner.runs[1]
            assert turn.prompt.startswith('<watch-event name="notes" uri="memo://notes">\nADDED todo\n')
            # Turn 2's input carries turn 1: the ask, the function call and its output.
            history = model.inputs[-1]
            assert user_texts(history) == [ask, turn.prompt]
            assert any(
                item.get("type") == "function_call" and item["name"] == "watch_start" for item in history
            )


async def test_a_no_reply_turn_publishes_nothing() -> None:
    brain, published = Brain(), Published()
    async with memo() as m:
        agent = Agent(name="watcher", model=FakeModel(brain), tools=watch_tools(m.watches))
        async with watch_runner(agent, m.watches, publish=published, run_config=OFFLINE) as runner:
            with anyio.fail_after(WAIT):
                await runner.ask(ask_call("watch_start", name="notes", uri="memo://notes"))
                await m.set("noise", 1)
                stats = await runner.wait(lambda s: s.runs_completed == 2)
            assert runner.runs[1].reply == "NO_REPLY"
            assert (stats.published, stats.suppressed) == (1, 1)
            assert len(published.texts) == 1


async def test_two_notices_during_a_run_give_one_follow_up_run() -> None:
    brain, published = Brain(), Published()
    async with memo() as m:
        agent = Agent(name="watcher", model=FakeModel(brain), tools=watch_tools(m.watches))
        async with watch_runner(agent, m.watches, publish=published, run_config=OFFLINE) as runner:
            await two_notices_during_one_run(runner, m, brain, published)


async def test_refused_calls_answer_the_library_message_and_filters_stay_read_only() -> None:
    brain, published = Brain(), Published()
    async with memo() as m:
        agent = Agent(name="watcher", model=FakeModel(brain), tools=watch_tools(m.watches))
        async with watch_runner(agent, m.watches, publish=published, run_config=OFFLINE) as runner:
            with anyio.fail_after(WAIT):
                bad_name = await runner.ask(ask_call("watch_start", name="a b", uri="memo://notes"))
                bad_filter = await runner.ask(
                    ask_call("watch_start", name="f", uri="memo://notes", on_event="import os")
                )
                started = await runner.ask(
                    ask_call(
                        "watch_start", name="notes", uri="memo://notes", on_event='memo_set(key="x", value=1)'
                    )
                )
                await runner.wait(lambda s: s.runs_completed == 3)
            assert [w.name for w in m.watches.watch_list()] == []
    # Not the SDK's generic "An error occurred while running the tool": the library's message.
    assert bad_name.reply is not None
    assert bad_name.reply.startswith(
        "tool said: InvalidWatchNameError: watch_start: invalid watch name 'a b'"
    )
    assert bad_filter.reply is not None
    assert bad_filter.reply.startswith("tool said: FilterError:")
    assert "import" in bad_filter.reply
    # A filter that writes is refused at its start, not on every event after it.
    assert started.reply is not None
    assert started.reply.startswith("tool said: FilterError: on_event may only read; it calls memo_set()")
    assert "tool 'memo_set' (server 'memo') is not read-only" in started.reply


async def test_agent_turns_keeps_the_history_between_calls() -> None:
    brain = Brain()
    model = FakeModel(brain)
    turns = AgentTurns(Agent(name="plain", model=model), run_config=OFFLINE)
    with anyio.fail_after(WAIT):
        assert await turns("hello") == "ok"
        assert await turns("again") == "ok"
    assert user_texts(model.inputs[-1]) == ["hello", "again"]
    assert user_texts(turns.items) == ["hello", "again"]


async def test_the_agents_own_write_through_the_server_tools_reaches_its_watch() -> None:
    brain, published = Brain(), Published()
    async with memo() as m:
        tools = [*watch_tools(m.watches), *await server_tools(m.watches.sources)]
        agent = Agent(name="watcher", model=FakeModel(brain), tools=tools)
        async with watch_runner(agent, m.watches, publish=published, run_config=OFFLINE) as runner:
            await own_write_reaches_the_watch(runner, m, published)
