"""asyncai-watch in LangGraph: the watch built-ins as LangChain tools, notices as graph runs.

::

    tools = [*watch_tools(watches), *await server_tools(watches.sources)]
    graph = ...  # a compiled graph over MessagesState that calls `tools` (see the docs)
    async with watch_runner(graph, watches, publish=send) as runner:
        await runner.ask("Watch memo://notes and tell me when the todo changes.")

:func:`watch_tools` gives ``list_resources``, ``read_resource``, ``watch_start``, ``watch_stop`` and
``watch_list`` as ``StructuredTool`` values; :func:`server_tools` the watched servers' own tools
over the watch's connections (one connection per server: the agent hears its own changes). A call the library refuses raises ``ToolException``
with the library's message, and ``handle_tool_error`` turns it into a ``ToolMessage`` with
``status="error"`` the model reads. :class:`GraphTurns` runs the graph once per turn: with a
checkpointer on one ``thread_id`` (the graph keeps the history), else with the message list
it keeps itself; :func:`watch_runner` puts it behind the shared
:class:`~asyncai_watch.integrations.TurnRunner`. Docs: docs/integrations/langgraph.md.
"""

from __future__ import annotations

import functools
import uuid
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
    from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
    from langchain_core.runnables import RunnableConfig
    from langchain_core.tools import BaseTool, StructuredTool, ToolException
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.pregel import Pregel
except ImportError:  # pragma: no cover - exercised with the framework hidden
    require("langgraph", feature=__name__)  # absent: one line naming the extra
    raise  # installed but broken: the import's own error

__all__ = ["GraphTurns", "server_tools", "watch_runner", "watch_tools"]


def _tool(fn: Callable[..., Awaitable[Any]]) -> StructuredTool:
    @functools.wraps(fn)
    async def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        except TOOL_ERRORS as exc:
            raise ToolException(tool_error_text(exc)) from exc

    # handle_tool_error=True: a ToolException becomes the tool's answer (status="error"), not a crash.
    return StructuredTool.from_function(coroutine=call, parse_docstring=True, handle_tool_error=True)


def watch_tools(watches: WatchApi) -> list[BaseTool]:
    """The watch built-ins over ``watches`` (a :class:`~asyncai_watch.WatchManager`) as LangChain tools."""
    return [_tool(fn) for fn in watch_functions(watches)]


def _forward(found: ServerTool) -> StructuredTool:
    async def call(**kwargs: Any) -> Any:
        try:
            return await found.value(**kwargs)
        except TOOL_ERRORS as exc:  # the server's error result, or a refused call
            raise ToolException(tool_error_text(exc)) from exc

    return StructuredTool(
        name=found.name,
        description=found.description,
        args_schema=found.input_schema,
        coroutine=call,
        handle_tool_error=True,
    )


async def server_tools(sources: Sequence[ResourceSource]) -> list[BaseTool]:
    """Every tool of ``sources`` (e.g. ``watches.sources``) as a LangChain tool called over that
    connection: one connection per server, so the agent's own writes reach its watches."""
    return [_forward(found) for found in await _server_tools(sources)]


class GraphTurns:
    """One conversation with a compiled graph whose state has ``messages`` (``MessagesState``).

    Each call sends the turn's text as a ``HumanMessage`` and answers the last message's text.
    With a checkpointer the graph keeps the history on ``thread_id`` (one is made when not
    given); without one, :attr:`messages` keeps it and every run gets the whole list.
    """

    def __init__(
        self,
        graph: Pregel[Any, Any, Any, Any],
        *,
        thread_id: str | None = None,
        config: RunnableConfig | None = None,
    ) -> None:
        self.graph = graph
        self.checkpointed = isinstance(graph.checkpointer, BaseCheckpointSaver)
        self.config: RunnableConfig = dict(config or {})  # type: ignore[assignment]
        if self.checkpointed:
            configurable = dict(self.config.get("configurable") or {})
            configurable.setdefault("thread_id", thread_id if thread_id is not None else uuid.uuid4().hex)
            self.config["configurable"] = configurable
        self.messages: list[AnyMessage] = []
        """The history, when the graph has no checkpointer."""

    async def __call__(self, prompt: str) -> str | None:
        sent = [HumanMessage(prompt)] if self.checkpointed else [*self.messages, HumanMessage(prompt)]
        state = await self.graph.ainvoke({"messages": sent}, self.config)
        messages: list[AnyMessage] = list(state["messages"])
        if not self.checkpointed:
            self.messages = messages
        last = messages[-1] if messages else None
        return last.text if isinstance(last, AIMessage) else None


def watch_runner(
    graph: Pregel[Any, Any, Any, Any],
    watches: WatchManager,
    *,
    publish: Publish,
    thread_id: str | None = None,
    config: RunnableConfig | None = None,
) -> TurnRunner:
    """A :class:`~asyncai_watch.integrations.TurnRunner` feeding ``watches``' notices to ``graph``."""
    return TurnRunner(
        GraphTurns(graph, thread_id=thread_id, config=config),
        watches.notices,
        publish=publish,
        taken=watches.notice_taken,
    )
