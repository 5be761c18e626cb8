"""asyncai-watch in Google's Agent Development Kit: the watch built-ins as ADK tools, notices as
new user events of an ADK session.

::

    agent = LlmAgent(name="watcher", model="gemini-2.5-flash", tools=watch_tools(watches))
    runner = InMemoryRunner(agent=agent, app_name="watcher")
    async with watch_runner(runner, watches, publish=send) as turns:
        await turns.ask("Watch memo://notes and tell me when the todo changes.")

:func:`watch_tools` gives ``list_resources``, ``read_resource``, ``watch_start``, ``watch_stop``
and ``watch_list`` as ADK tools (``BaseTool``) whose function declarations are the tool table's
own JSON Schemas (:mod:`asyncai_watch.core.tools`). A tool answers the structured content
``serve`` answers (an object, as a Gemini function response must be: ``{"resources": [...]}``,
``{"uri", "value"}``, ...); a call the library refuses answers ``{"error": "Type: message"}``, the
ADK way of telling the model a tool failed. :func:`server_tools` offers the watched servers' own
tools over the watch's connections, so the agent's own writes reach its watches.
:class:`SessionTurns` sends each turn as a new user ``Content`` to ``Runner.run_async`` on one
session (made on the first turn when it does not exist) and answers the final response's text;
:func:`watch_runner` puts it behind the shared :class:`~asyncai_watch.integrations.TurnRunner`.
Docs: docs/integrations/google-adk.md.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from asyncai_watch.codemode import WatchApi, builtins
from asyncai_watch.core.tools import WATCH_TOOLS, ToolSpec
from asyncai_watch.extras import require
from asyncai_watch.integrations._builtins import TOOL_ERRORS, structured_result, tool_error_text
from asyncai_watch.integrations._runner import Publish, TurnRunner
from asyncai_watch.integrations._server_tools import ServerTool
from asyncai_watch.integrations._server_tools import server_tools as _server_tools
from asyncai_watch.mcp.source import ResourceSource
from asyncai_watch.runtime.manager import WatchManager

try:
    from google.adk.runners import Runner
    from google.adk.tools.base_tool import BaseTool
    from google.adk.tools.tool_context import ToolContext
    from google.genai import types
except ImportError:  # pragma: no cover - exercised with the framework hidden
    require("google-adk", feature=__name__)  # absent: one line naming the extra
    raise  # installed but broken: the import's own error

__all__ = ["SessionTurns", "WatchTool", "server_tools", "watch_runner", "watch_tools"]


Call = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class WatchTool(BaseTool):
    """An ADK tool whose declaration is a JSON Schema and whose answer is a JSON object."""

    def __init__(self, *, name: str, description: str, input_schema: Mapping[str, Any], call: Call) -> None:
        super().__init__(name=name, description=description)
        self.input_schema = dict(input_schema)
        self._call = call

    def _get_declaration(self) -> types.FunctionDeclaration:
        return types.FunctionDeclaration(
            name=self.name, description=self.description, parameters_json_schema=self.input_schema
        )

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> Any:
        try:
            return await self._call(args)
        except TOOL_ERRORS as exc:  # refused: the model reads why and fixes its next call
            return {"error": tool_error_text(exc)}


def _builtin(spec: ToolSpec, fn: Callable[..., Awaitable[Any]]) -> WatchTool:
    async def call(args: dict[str, Any]) -> dict[str, Any]:
        return structured_result(spec, args, await fn(**args))

    return WatchTool(
        name=spec.name, description=spec.full_description(), input_schema=spec.input_schema, call=call
    )


def watch_tools(watches: WatchApi) -> list[BaseTool]:
    """The watch built-ins over ``watches`` (a :class:`~asyncai_watch.WatchManager`) as ADK tools."""
    fns = builtins(watches)
    return [_builtin(spec, fns[spec.name]) for spec in WATCH_TOOLS]


def _forward(found: ServerTool) -> WatchTool:
    async def call(args: dict[str, Any]) -> dict[str, Any]:
        result = await found.call(args)
        if result.is_error:
            return {"error": result.text}
        if isinstance(result.structured, dict):
            return result.structured
        return {"result": result.text}

    return WatchTool(
        name=found.name, description=found.description, input_schema=found.input_schema, call=call
    )


async def server_tools(sources: Sequence[ResourceSource]) -> list[BaseTool]:
    """Every tool of ``sources`` (e.g. ``watches.sources``) as an ADK tool called over that
    connection: the agent's own writes reach its watches (no second connection)."""
    return [_forward(found) for found in await _server_tools(sources)]


class SessionTurns:
    """One ADK session: each call is one ``Runner.run_async`` with the text as a new user event.

    The session (``session_id`` for ``user_id``) is made on the first call when the runner's
    session service does not have it; the history is the session's events.
    """

    def __init__(self, runner: Runner, *, user_id: str = "user", session_id: str | None = None) -> None:
        self.runner = runner
        self.user_id = user_id
        self.session_id = session_id
        self._ready = False

    async def _session(self) -> str:
        service, app = self.runner.session_service, self.runner.app_name
        if self.session_id is not None:
            found = await service.get_session(app_name=app, user_id=self.user_id, session_id=self.session_id)
            if found is not None:
                return self.session_id
        made = await service.create_session(app_name=app, user_id=self.user_id, session_id=self.session_id)
        return made.id

    async def __call__(self, prompt: str) -> str | None:
        if not self._ready:
            self.session_id = await self._session()
            self._ready = True
        assert self.session_id is not None
        message = types.Content(role="user", parts=[types.Part(text=prompt)])
        reply: str | None = None
        async for event in self.runner.run_async(
            user_id=self.user_id, session_id=self.session_id, new_message=message
        ):
            if event.is_final_response() and event.content is not None and event.content.parts:
                reply = "".join(p.text or "" for p in event.content.parts if not p.thought)
        return reply


def watch_runner(
    runner: Runner,
    watches: WatchManager,
    *,
    publish: Publish,
    user_id: str = "user",
    session_id: str | None = None,
) -> TurnRunner:
    """A :class:`~asyncai_watch.integrations.TurnRunner` feeding ``watches``' notices to ``runner``
    as user events of one session."""
    return TurnRunner(
        SessionTurns(runner, user_id=user_id, session_id=session_id),
        watches.notices,
        publish=publish,
        taken=watches.notice_taken,
    )
