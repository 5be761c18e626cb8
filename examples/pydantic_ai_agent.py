"""Watch notices as PydanticAI agent runs (offline: a scripted model, no API key).

It starts the memo MCP server over stdio, gives a PydanticAI agent the watch tools, asks the
agent to watch memo://notes, changes the memo from a second MCP client, and prints the agent's
reply to that change. For a real model, give ``Agent`` a model name such as
``"openai:gpt-5.2"`` instead of the ``FunctionModel`` (docs/integrations/pydantic-ai.md).

    pip install 'asyncai-watch[pydantic-ai]'
    python examples/pydantic_ai_agent.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import anyio
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from asyncai_watch import Limits, McpResourceSource, WatchManager
from asyncai_watch.integrations.pydantic_ai import watch_runner, watch_toolset


def scripted_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Stands in for an LLM: starts a watch when asked, then reports each change it is shown."""
    last = messages[-1].parts[-1]
    if not isinstance(last, UserPromptPart):  # watch_start answered
        return ModelResponse(parts=[TextPart("Watching memo://notes.")])
    prompt = str(last.content)
    if "<watch-event" in prompt:  # a notice: '<watch-event name=... uri=...>\nADDED todo\n</watch-event>...'
        return ModelResponse(parts=[TextPart(f"The memo changed: {prompt.splitlines()[1]}")])
    return ModelResponse(parts=[ToolCallPart("watch_start", {"name": "notes", "uri": "memo://notes"})])


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
            agent = Agent(FunctionModel(scripted_model), toolsets=[watch_toolset(watches)])
            async with watch_runner(agent, watches, publish=say) as runner:
                await runner.ask("Watch memo://notes and tell me what changes.")

                url = url_file.read_text().split()[1]  # "READY http://127.0.0.1:PORT/mcp"
                async with McpResourceSource.http(url) as someone_else:
                    print("someone else: memo_set todo = 'buy milk'")
                    await someone_else.call_tool("memo_set", {"key": "todo", "value": "buy milk"})

                with anyio.fail_after(30):  # the change arrives as a notice, the notice as a run
                    await runner.wait(lambda stats: stats.published == 2)


if __name__ == "__main__":
    anyio.run(main)
