"""Watch notices as user events of a Google ADK session (offline: a scripted model, no API key).

It starts the memo MCP server over stdio, gives an ADK ``LlmAgent`` the watch tools, asks the
agent to watch memo://notes, changes the memo from a second MCP client, and prints the agent's
reply to that change. For a real model, give ``LlmAgent`` a model name such as
``"gemini-2.5-flash"`` instead of the scripted ``BaseLlm`` (docs/integrations/google-adk.md).

    pip install 'asyncai-watch[google-adk]'
    python examples/google_adk_agent.py
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import AsyncGenerator
from pathlib import Path

import anyio
from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.genai import types

from asyncai_watch import Limits, McpResourceSource, WatchManager
from asyncai_watch.integrations.google_adk import watch_runner, watch_tools


class ScriptedModel(BaseLlm):
    """Stands in for an LLM: starts a watch when asked, then reports each change it is shown."""

    model: str = "scripted"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        part = (llm_request.contents[-1].parts or [types.Part()])[-1]
        if part.function_response is not None:  # watch_start answered
            yield say_text("Watching memo://notes.")
        elif "<watch-event" in (part.text or ""):  # '<watch-event name=... uri=...>\nADDED todo\n...'
            yield say_text(f"The memo changed: {(part.text or '').splitlines()[1]}")
        else:
            call = types.FunctionCall(name="watch_start", args={"name": "notes", "uri": "memo://notes"})
            yield answer(types.Part(function_call=call))


def say_text(text: str) -> LlmResponse:
    return answer(types.Part(text=text))


def answer(part: types.Part) -> LlmResponse:
    # Token counts too: ADK's telemetry logs a warning for a response without them.
    usage = types.GenerateContentResponseUsageMetadata(prompt_token_count=1, total_token_count=1)
    return LlmResponse(content=types.Content(role="model", parts=[part]), usage_metadata=usage)


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
            agent = LlmAgent(name="watcher", model=ScriptedModel(), tools=watch_tools(watches))
            runner = InMemoryRunner(agent=agent, app_name="watcher")
            async with watch_runner(runner, watches, publish=say) as turns:
                await turns.ask("Watch memo://notes and tell me what changes.")

                url = url_file.read_text().split()[1]  # "READY http://127.0.0.1:PORT/mcp"
                async with McpResourceSource.http(url) as someone_else:
                    print("someone else: memo_set todo = 'buy milk'")
                    await someone_else.call_tool("memo_set", {"key": "todo", "value": "buy milk"})

                with anyio.fail_after(30):  # the change arrives as a notice, the notice as a turn
                    await turns.wait(lambda stats: stats.published == 2)


if __name__ == "__main__":
    anyio.run(main)
