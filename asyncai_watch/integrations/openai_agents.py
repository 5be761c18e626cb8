"""asyncai-watch in the OpenAI Agents SDK: the watch built-ins as function tools, notices as runs.

::

    agent = Agent(name="watcher", model=model, tools=[*watch_tools(watches), *await server_tools(watches.sources)])
    async with watch_runner(agent, watches, publish=send) as runner:
        await runner.ask("Watch memo://notes and tell me when the todo changes.")

:func:`watch_tools` gives ``list_resources``, ``read_resource``, ``watch_start``, ``watch_stop`` and
``watch_list`` as ``FunctionTool`` values (``function_tool`` over typed functions). A tool answers
compact JSON text in the design's shapes; a call the library refuses answers its error message
(``Type: message``) instead of the SDK's generic one, so the model can fix its next call.
:func:`server_tools` offers the watched servers' own tools over the watch's connections (one
connection per server: the agent hears its own changes).
:class:`AgentTurns` runs ``Runner.run`` once per turn with the history so far
(``result.to_input_list()``); :func:`watch_runner` puts it behind the shared
:class:`~asyncai_watch.integrations.TurnRunner`. Docs: docs/integrations/openai-agents.md.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from asyncai_watch.codemode import WatchApi
from asyncai_watch.extras import require
from asyncai_watch.integrations._builtins import TOOL_ERRORS, tool_error_text, watch_functions
from asyncai_watch.integrations._runner import Publish, TurnRunner
from asyncai_watch.integrations._server_tools import ServerTool
from asyncai_watch.integrations._server_tools import server_tools as _server_tools
from asyncai_watch.mcp.source import ResourceSource
from asyncai_watch.runtime.manager import WatchManager

try:
    from agents import Agent, FunctionTool, RunConfig, RunContextWrapper, Runner, Tool, function_tool
    from agents.items import TResponseInputItem
    from agents.run_config import DEFAULT_MAX_TURNS
    from agents.tool import default_tool_error_function
except ImportError:  # pragma: no cover - exercised with the framework hidden
    require("openai-agents", feature=__name__)  # absent: one line naming the extra
    raise  # installed but broken: the import's own error

__all__ = ["AgentTurns", "server_tools", "watch_runner", "watch_tools"]


def _tool_error(ctx: RunContextWrapper[Any], exc: Exception) -> str:
    """The library's own message for a refused call; the SDK's generic text for anything else."""
    if isinstance(exc, TOOL_ERRORS):
        return tool_error_text(exc)
    return default_tool_error_function(ctx, exc)


def _json_tool(fn: Callable[..., Awaitable[Any]]) -> FunctionTool:
    # The SDK sends a tool's str() to the model; a dict's str() is a Python repr, so answer JSON.
    @functools.wraps(fn)
    async def tool(*args: Any, **kwargs: Any) -> str:
        return json.dumps(await fn(*args, **kwargs), ensure_ascii=False)

    return function_tool(tool, failure_error_function=_tool_error)


def watch_tools(watches: WatchApi) -> list[Tool]:
    """The watch built-ins over ``watches`` (a :class:`~asyncai_watch.WatchManager`) as function tools."""
    return [_json_tool(fn) for fn in watch_functions(watches)]


def _forward(found: ServerTool) -> FunctionTool:
    async def invoke(ctx: Any, raw: str) -> str:
        try:
            value = await found.value(**(json.loads(raw) if raw.strip() else {}))
        except TOOL_ERRORS as exc:  # the server's error result, or a refused call
            return tool_error_text(exc)
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

    # The server's schema as it is: MCP schemas are not written for the SDK's strict mode.
    return FunctionTool(
        name=found.name,
        description=found.description,
        params_json_schema=found.input_schema,
        on_invoke_tool=invoke,
        strict_json_schema=False,
    )


async def server_tools(sources: Sequence[ResourceSource]) -> list[Tool]:
    """Every tool of ``sources`` (e.g. ``watches.sources``) as a function tool called over that
    connection: one connection per server, so the agent's own writes reach its watches."""
    return [_forward(found) for found in await _server_tools(sources)]


class AgentTurns:
    """One conversation with ``agent``: each call is one ``Runner.run`` over the history so far.

    ``items`` is the history (``result.to_input_list()`` of the last run). ``context`` and
    ``run_config`` are passed to every run (e.g. ``RunConfig(tracing_disabled=True)`` offline).
    """

    def __init__(
        self,
        agent: Agent[Any],
        *,
        context: Any = None,
        run_config: RunConfig | None = None,
        max_turns: int = DEFAULT_MAX_TURNS,
    ) -> None:
        self.agent = agent
        self.context = context
        self.run_config = run_config
        self.max_turns = max_turns
        self.items: list[TResponseInputItem] = []

    async def __call__(self, prompt: str) -> str | None:
        turn: list[TResponseInputItem] = [*self.items, {"role": "user", "content": prompt}]
        result = await Runner.run(
            self.agent, turn, context=self.context, run_config=self.run_config, max_turns=self.max_turns
        )
        self.items = result.to_input_list()
        output = result.final_output
        return output if isinstance(output, str) or output is None else str(output)


def watch_runner(
    agent: Agent[Any],
    watches: WatchManager,
    *,
    publish: Publish,
    context: Any = None,
    run_config: RunConfig | None = None,
) -> TurnRunner:
    """A :class:`~asyncai_watch.integrations.TurnRunner` feeding ``watches``' notices to ``agent``."""
    turns = AgentTurns(agent, context=context, run_config=run_config)
    return TurnRunner(turns, watches.notices, publish=publish, taken=watches.notice_taken)
