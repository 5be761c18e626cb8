"""Watch notices as LangGraph runs (offline: a scripted LangChain chat model, no API key).

It starts the memo MCP server over stdio, builds a ReAct graph (model node, ToolNode,
tools_condition) with the watch tools, asks it to watch memo://notes, changes the memo from a
second MCP client, and prints the graph's reply to that change. For a real model, use any
LangChain chat model that supports tool calling (e.g. ``ChatOpenAI(model="gpt-4.1")`` from
langchain-openai) instead of ``ScriptedChatModel`` (docs/integrations/langgraph.md).

    pip install 'asyncai-watch[langgraph]'
    python examples/langgraph_agent.py
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from asyncai_watch import Limits, McpResourceSource, WatchManager
from asyncai_watch.integrations.langgraph import watch_runner, watch_tools


class ScriptedChatModel(BaseChatModel):
    """Stands in for an LLM: starts a watch when asked, then reports each change it is shown."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self  # the script knows its one tool call

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        last = messages[-1]
        if not isinstance(last, HumanMessage):  # watch_start answered
            reply = AIMessage("Watching memo://notes.")
        elif "<watch-event" in last.text:  # a notice: '<watch-event ...>\nADDED todo\n</watch-event>...'
            reply = AIMessage(f"The memo changed: {last.text.splitlines()[1]}")
        else:
            call = {"name": "watch_start", "args": {"name": "notes", "uri": "memo://notes"}, "id": "call-1"}
            reply = AIMessage("", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=reply)])


def react_graph(model: BaseChatModel, tools: list[Any]) -> Any:
    """The ReAct loop: the model answers or calls tools; tool answers go back to the model."""
    bound = model.bind_tools(tools)

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await bound.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=InMemorySaver())  # the checkpointer keeps the history


async def say(reply: str) -> None:
    print(f"agent: {reply}")


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        # --also-http: the same memo is also served over HTTP, so a second client can change it.
        url_file = Path(tmp) / "memo-url"
        memo_server = [sys.executable, "-m", "asyncai_servers.memo"]
        memo_server += ["--also-http", "127.0.0.1:0", "--ready-file", str(url_file)]
        async with (
            McpResourceSource.stdio(memo_server) as memo,
            # A short debounce so the example is quick (the default waits for 3 s of quiet).
            WatchManager([memo], limits=Limits(debounce_quiet=0.2, debounce_max_wait=1.0)) as watches,
        ):
            graph = react_graph(ScriptedChatModel(), watch_tools(watches))
            async with watch_runner(graph, watches, publish=say) as runner:
                await runner.ask("Watch memo://notes and tell me what changes.")

                url = url_file.read_text().split()[1]  # "READY http://127.0.0.1:PORT/mcp"
                async with McpResourceSource.http(url) as someone_else:
                    print("someone else: memo_set todo = 'buy milk'")
                    await someone_else.call_tool("memo_set", {"key": "todo", "value": "buy milk"})

                with anyio.fail_after(30):  # the change arrives as a notice, the notice as a run
                    await runner.wait(lambda stats: stats.published == 2)


if __name__ == "__main__":
    anyio.run(main)
