"""LangGraph end to end, offline: a ReAct graph (model node, ``ToolNode``, ``tools_condition``)
whose chat model is a LangChain fake that emits tool calls, with the watch tools, the real memo
server over stdio, and a second client whose changes become graph runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import pytest
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import BaseTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from pydantic import ConfigDict, Field

from asyncai_watch import WatchManager
from asyncai_watch.integrations.langgraph import GraphTurns, server_tools, watch_runner, watch_tools
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


class FakeChatModel(BaseChatModel):
    """A LangChain chat model over the test brain: the last message decides the answer."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    brain: Brain
    inputs: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "asyncai-test-fake"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> FakeChatModel:
        return self  # the brain names its tools itself

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        raise NotImplementedError("the graph runs async")

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.inputs.append(list(messages))
        last = messages[-1]
        if isinstance(last, ToolMessage):
            answer: Call | str = self.brain.on_tool_result(last.text)
        else:
            answer = await self.brain.on_user(last.text)
        if isinstance(answer, Call):
            n = sum(isinstance(m, AIMessage) for m in messages) + 1
            message = AIMessage("", tool_calls=[{"name": answer.name, "args": answer.args, "id": f"c{n}"}])
        else:
            message = AIMessage(answer)
        return ChatResult(generations=[ChatGeneration(message=message)])


def react_graph(
    model: BaseChatModel, tools: list[BaseTool], checkpointer: InMemorySaver | None = None
) -> CompiledStateGraph[Any, Any, Any, Any]:
    bound = model.bind_tools(tools)

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await bound.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=checkpointer)


def human_texts(messages: Sequence[BaseMessage]) -> list[str]:
    return [m.text for m in messages if isinstance(m, HumanMessage)]


@pytest.mark.parametrize("checkpointed", [True, False], ids=["checkpointer", "message-list"])
async def test_a_change_becomes_a_turn_whose_reply_is_published_and_history_is_kept(
    checkpointed: bool,
) -> None:
    brain, published = Brain(), Published()
    model = FakeChatModel(brain=brain)
    async with memo() as m:
        graph = react_graph(model, watch_tools(m.watches), InMemorySaver() if checkpointed else None)
        async with watch_runner(graph, m.watches, publish=published) as runner:
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
            # Turn 2's messages carry turn 1: the ask, the tool call and the tool's answer.
            history = model.inputs[-1]
            assert human_texts(history) == [ask, turn.prompt]
            assert any(isinstance(msg, ToolMessage) and msg.name == "watch_start" for msg in history)


async def test_a_no_reply_turn_publishes_nothing() -> None:
    brain, published = Brain(), Published()
    async with memo() as m:
        tools = watch_tools(m.watches)
        graph = react_graph(FakeChatModel(brain=brain), tools, InMemorySaver())
        async with watch_runner(graph, m.watches, publish=published) as runner:
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
        tools = watch_tools(m.watches)
        graph = react_graph(FakeChatModel(brain=brain), tools, InMemorySaver())
        async with watch_runner(graph, m.watches, publish=published) as runner:
            await two_notices_during_one_run(runner, m, brain, published)


async def test_refused_calls_are_tool_errors_and_filters_stay_read_only() -> None:
    brain, published = Brain(), Published()
    async with memo() as m:
        tools = watch_tools(m.watches)
        graph = react_graph(FakeChatModel(brain=brain), tools, InMemorySaver())
        async with watch_runner(graph, m.watches, publish=published) as runner:
            with anyio.fail_after(WAIT):
                bad_name = await runner.ask(ask_call("watch_start", name="a b", uri="memo://notes"))
                started = await runner.ask(
                    ask_call(
                        "watch_start", name="notes", uri="memo://notes", on_event='memo_set(key="x", value=1)'
                    )
                )
                await runner.wait(lambda s: s.runs_completed == 2)
            assert [w.name for w in m.watches.watch_list()] == []
    assert bad_name.reply is not None
    assert bad_name.reply.startswith(
        "tool said: InvalidWatchNameError: watch_start: invalid watch name 'a b'"
    )
    # A filter that writes is refused at its start, not on every event after it.
    assert started.reply is not None
    assert started.reply.startswith("tool said: FilterError: on_event may only read; it calls memo_set()")
    assert "tool 'memo_set' (server 'memo') is not read-only" in started.reply


async def test_a_tool_error_is_an_error_tool_message() -> None:
    async with WatchManager([]) as watches:
        tool = {t.name: t for t in watch_tools(watches)}["watch_start"]
        message = await tool.ainvoke(
            {
                "type": "tool_call",
                "name": "watch_start",
                "id": "c1",
                "args": {"name": "a b", "uri": "memo://x"},
            }
        )
    assert isinstance(message, ToolMessage)
    assert message.status == "error"
    assert message.text.startswith("InvalidWatchNameError: watch_start: invalid watch name 'a b'")


async def test_graph_turns_without_a_checkpointer_keeps_the_messages_itself() -> None:
    brain = Brain()
    model = FakeChatModel(brain=brain)
    turns = GraphTurns(react_graph(model, []))
    with anyio.fail_after(WAIT):
        assert await turns("hello") == "ok"
        assert await turns("again") == "ok"
    assert human_texts(model.inputs[-1]) == ["hello", "again"]
    assert human_texts(turns.messages) == ["hello", "again"]


async def test_the_agents_own_write_through_the_server_tools_reaches_its_watch() -> None:
    brain, published = Brain(), Published()
    async with memo() as m:
        tools = [*watch_tools(m.watches), *await server_tools(m.watches.sources)]
        graph = react_graph(FakeChatModel(brain=brain), tools, InMemorySaver())
        async with watch_runner(graph, m.watches, publish=published) as runner:
            await own_write_reaches_the_watch(runner, m, published)
