"""Watch notices as OpenAI Agents SDK runs (offline: the SDK's ScriptedModel, no API key).

It starts the memo MCP server over stdio, gives an Agents SDK agent the watch tools, asks the
agent to watch memo://notes, changes the memo from a second MCP client, and prints the agent's
reply to that change. For a real model, give ``Agent`` ``model="gpt-4.1"`` (or any model the
SDK can reach) instead of the ScriptedModel, and drop ``tracing_disabled`` if you want traces
(docs/integrations/openai-agents.md).

    pip install 'asyncai-watch[openai-agents]'
    python examples/openai_agents_agent.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import anyio
from agents import Agent, RunConfig
from agents.items import TResponseOutputItem
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from asyncai_watch import Limits, McpResourceSource, WatchManager
from asyncai_watch.integrations.openai_agents import watch_runner, watch_tools


def report_change(call: ModelCall) -> list[TResponseOutputItem]:
    """The scripted model's answer to a notice: '<watch-event ...>\\nADDED todo\\n</watch-event>...'."""
    notice = call.input[-1]["content"]
    return [assistant_message(f"The memo changed: {notice.splitlines()[1]}")]


# Stands in for an LLM: one model call per step, in order.
scripted_model = ScriptedModel(
    [
        [function_call("watch_start", {"name": "notes", "uri": "memo://notes"}, call_id="call-1")],
        [assistant_message("Watching memo://notes.")],
        ModelStep.respond(report_change),
    ]
)


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
            agent = Agent(name="watcher", model=scripted_model, tools=watch_tools(watches))
            offline = RunConfig(tracing_disabled=True)  # no trace export without an API key
            async with watch_runner(agent, watches, publish=say, run_config=offline) as runner:
                await runner.ask("Watch memo://notes and tell me what changes.")

                url = url_file.read_text().split()[1]  # "READY http://127.0.0.1:PORT/mcp"
                async with McpResourceSource.http(url) as someone_else:
                    print("someone else: memo_set todo = 'buy milk'")
                    await someone_else.call_tool("memo_set", {"key": "todo", "value": "buy milk"})

                with anyio.fail_after(30):  # the change arrives as a notice, the notice as a run
                    await runner.wait(lambda stats: stats.published == 2)


if __name__ == "__main__":
    anyio.run(main)
