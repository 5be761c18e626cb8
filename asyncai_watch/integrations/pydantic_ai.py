"""asyncai-watch in PydanticAI: the watch built-ins as a toolset, notices as agent runs.

::

    agent = Agent(model, toolsets=[watch_toolset(watches), await server_toolset(watches.sources)])
    async with watch_runner(agent, watches, publish=send) as runner:
        await runner.ask("Watch memo://notes and tell me when the todo changes.")

:func:`watch_toolset` is a ``FunctionToolset`` with ``list_resources``, ``read_resource``,
``watch_start``, ``watch_stop`` and ``watch_list``; :func:`server_toolset` the watched servers' own tools over the watch's
connections (one connection per server: the agent hears its own changes). A call the library refuses (unknown URI,
duplicate name, bad filter) is a ``ToolFailed`` the model sees and adapts to; a bad argument is a
``ModelRetry``. :class:`AgentTurns` runs the agent once per turn with the message history so far;
:func:`watch_runner` puts it behind the shared :class:`~asyncai_watch.integrations.TurnRunner`
(coalescing, ``NO_REPLY``). Docs: docs/integrations/pydantic-ai.md.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from asyncai_watch.codemode import WatchApi
from asyncai_watch.extras import require
from asyncai_watch.integrations._builtins import TOOL_ERRORS, tool_error_text, watch_functions
from asyncai_watch.integrations._runner import Publish, TurnRunner
from asyncai_watch.integrations._server_tools import server_tools
from asyncai_watch.mcp.source import ResourceSource
from asyncai_watch.runtime.manager import WatchManager

try:
    from pydantic_ai import FunctionToolset, ModelRetry, Tool, ToolFailed
    from pydantic_ai.agent import AbstractAgent
    from pydantic_ai.messages import ModelMessage
except ImportError:  # pragma: no cover - exercised with the framework hidden
    require("pydantic-ai", feature=__name__)  # absent: one line naming the extra
    raise  # installed but broken: the import's own error

__all__ = ["AgentTurns", "server_toolset", "watch_runner", "watch_toolset"]


def _as_tool(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(fn)
    async def tool(*args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        except TypeError as exc:  # a bad argument: say what is accepted, let the model retry
            raise ModelRetry(tool_error_text(exc)) from exc
        except TOOL_ERRORS as exc:  # refused for good (no such URI, duplicate name, bad filter)
            raise ToolFailed(tool_error_text(exc)) from exc

    return tool


def watch_toolset(watches: WatchApi) -> FunctionToolset[Any]:
    """The watch built-ins over ``watches`` (a :class:`~asyncai_watch.WatchManager`) as a toolset."""
    return FunctionToolset([_as_tool(fn) for fn in watch_functions(watches)], id="asyncai_watch")


async def server_toolset(sources: Sequence[ResourceSource]) -> FunctionToolset[Any]:
    """Every tool of ``sources`` (e.g. ``watches.sources``), called over that connection: one
    connection per server, so the agent's own writes reach its watches. A tool's error result is
    a ``ToolFailed`` with the server's text."""
    tools = [
        Tool.from_schema(
            _as_tool(found.value),
            name=found.name,
            description=found.description,
            json_schema=found.input_schema,
        )
        for found in await server_tools(sources)
    ]
    return FunctionToolset(tools, id="asyncai_watch_servers")


class AgentTurns:
    """One conversation with ``agent``: each call is one run, given the message history so far.

    ``messages`` is the history (``result.all_messages()`` of the last run). ``deps`` is passed
    to every run. A run whose output is not a ``str`` replies with its ``str()``.
    """

    def __init__(self, agent: AbstractAgent[Any, Any], *, deps: Any = None) -> None:
        self.agent = agent
        self.deps = deps
        self.messages: list[ModelMessage] = []

    async def __call__(self, prompt: str) -> str | None:
        result = await self.agent.run(prompt, message_history=self.messages, deps=self.deps)
        self.messages = result.all_messages()
        output = result.output
        return output if isinstance(output, str) or output is None else str(output)


def watch_runner(
    agent: AbstractAgent[Any, Any], watches: WatchManager, *, publish: Publish, deps: Any = None
) -> TurnRunner:
    """A :class:`~asyncai_watch.integrations.TurnRunner` feeding ``watches``' notices to ``agent``."""
    return TurnRunner(
        AgentTurns(agent, deps=deps), watches.notices, publish=publish, taken=watches.notice_taken
    )
