"""asyncai-watch in the Claude Agent SDK: the watch built-ins as an in-process MCP server, notices
as turns of the same session.

::

    async with watch_session({"memo": "asyncai-mcp-simple"}, publish=send) as session:
        await session.runner.ask("Watch memo://notes and tell me when the todo changes.")

:func:`watch_server` is an SDK MCP server (``{"type": "sdk", ...}``, what the SDK's
``create_sdk_mcp_server`` makes) with ``list_resources``, ``read_resource``, ``watch_start``,
``watch_stop`` and ``watch_list``, all of it from the one tool table
(:mod:`asyncai_watch.core.tools`): descriptions, input and output schemas, read-only and
idempotent annotations, structured content (Claude Code shows the model only that), and the
library's refusals as ``isError`` results. ``alwaysLoad`` is set, so the tools are there on the
first turn instead of behind a tool search. With ``tools=`` it also offers the servers' own
tools over the watch's connections (:func:`server_tools`): one connection per server, so the
agent's own writes reach its watches.

:class:`ClientTurns` runs one turn on a connected ``ClaudeSDKClient``: it stamps the query with
a fresh ``uuid`` and reads until the result whose ``user_message_uuids`` hold it (a result can
belong to a turn the CLI injected). :func:`watch_runner` puts it behind the shared
:class:`~asyncai_watch.integrations.TurnRunner`; :func:`watch_session` opens the servers, the
manager and the client in that order and closes them in reverse. :func:`serve_entry` writes the
``mcp_servers`` entry of ``asyncai-watch serve`` for those who prefer the external bridge (the
SDK delivers no channel push: the model pulls with ``watch_notices`` there).
Docs: docs/integrations/claude-agent-sdk.md.
"""

from __future__ import annotations

import dataclasses
import shlex
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, Final, cast

import attrs
import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext

from asyncai_watch.codemode import WatchApi, builtins
from asyncai_watch.core.limits import Limits
from asyncai_watch.core.tools import WATCH_TOOLS, ToolSpec
from asyncai_watch.extras import require
from asyncai_watch.integrations._builtins import TOOL_ERRORS, result_text, structured_result, tool_error_text
from asyncai_watch.integrations._runner import Publish, TurnRunner
from asyncai_watch.integrations._server_tools import ServerTool, server_tools
from asyncai_watch.mcp.client import McpResourceSource
from asyncai_watch.runtime.manager import WatchManager

try:
    from claude_agent_sdk import ClaudeAgentOptions, ClaudeSDKClient, McpSdkServerConfig, ResultMessage
except ImportError:  # pragma: no cover - exercised with the framework hidden
    require("claude-agent-sdk", feature=__name__)  # absent: one line naming the extra
    raise  # installed but broken: the import's own error

__all__ = [
    "ClientTurns",
    "TurnError",
    "WatchSession",
    "serve_entry",
    "server_tools",
    "watch_runner",
    "watch_server",
    "watch_session",
]

SERVER_NAME: Final = "watch"
"""The ``mcp_servers`` key the watch server goes under: its tools are ``mcp__watch__<tool>``."""


class TurnError(RuntimeError):
    """The CLI ended the turn with an error result (API error, max turns, interrupted)."""


def _annotations(read_only: bool, idempotent: bool | None) -> types.ToolAnnotations:
    return types.ToolAnnotations(
        read_only_hint=read_only, destructive_hint=False, idempotent_hint=idempotent, open_world_hint=False
    )


def _text(value: str) -> list[types.ContentBlock]:
    return [types.TextContent(type="text", text=value)]


def _builtin_tool(spec: ToolSpec) -> types.Tool:
    return types.Tool(
        name=spec.name,
        description=spec.full_description(),
        input_schema=spec.input_schema,
        output_schema=spec.structured_schema,
        annotations=_annotations(spec.read_only, spec.idempotent),
    )


def _server_tool(found: ServerTool) -> types.Tool:
    return types.Tool(
        name=found.name,
        description=found.description,
        input_schema=found.input_schema,
        annotations=types.ToolAnnotations(
            read_only_hint=found.info.read_only, destructive_hint=found.info.destructive
        ),
    )


ToolCall = Callable[[Mapping[str, Any]], Awaitable[types.CallToolResult]]


def _builtin_call(spec: ToolSpec, fn: Callable[..., Awaitable[Any]]) -> ToolCall:
    async def call(args: Mapping[str, Any]) -> types.CallToolResult:
        try:
            result = await fn(**args)
        except TOOL_ERRORS as exc:  # refused: the model reads why and fixes its next call
            return types.CallToolResult(content=_text(tool_error_text(exc)), is_error=True)
        return types.CallToolResult(
            content=_text(result_text(spec, args, result)),
            structured_content=structured_result(spec, args, result),
        )

    return call


def _forward_call(found: ServerTool) -> ToolCall:
    async def call(args: Mapping[str, Any]) -> types.CallToolResult:
        try:
            result = await found.call(args)
        except TOOL_ERRORS as exc:
            return types.CallToolResult(content=_text(tool_error_text(exc)), is_error=True)
        structured = result.structured if isinstance(result.structured, dict) else None
        return types.CallToolResult(
            content=_text(result.text), structured_content=structured, is_error=result.is_error
        )

    return call


def watch_server(
    watches: WatchApi, *, tools: Sequence[ServerTool] = (), name: str = SERVER_NAME
) -> McpSdkServerConfig:
    """The watch built-ins over ``watches`` (and ``tools``) as an SDK MCP server, ``alwaysLoad`` set.

    Put it in ``ClaudeAgentOptions(mcp_servers={"watch": watch_server(watches)})``; the model
    calls ``mcp__watch__watch_start`` and so on.
    """
    fns = builtins(watches)
    listed = [_builtin_tool(spec) for spec in WATCH_TOOLS] + [_server_tool(t) for t in tools]
    calls: dict[str, ToolCall] = {spec.name: _builtin_call(spec, fns[spec.name]) for spec in WATCH_TOOLS}
    calls.update({t.name: _forward_call(t) for t in tools})

    async def on_list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def on_call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        call = calls.get(params.name)
        if call is None:
            return types.CallToolResult(
                content=_text(f"no tool {params.name!r} here; the tools are {', '.join(calls)}"),
                is_error=True,
            )
        return await call(params.arguments or {})

    server: Server[Any] = Server(name, on_list_tools=on_list_tools, on_call_tool=on_call_tool)
    # alwaysLoad (passed through to the CLI's --mcp-config): the tools are listed on the first
    # turn; without it Claude Code defers them behind its tool search.
    config = {"type": "sdk", "name": name, "instance": server, "alwaysLoad": True}
    return cast(McpSdkServerConfig, config)


def _stamped(text: str, stamp: str) -> AsyncIterator[dict[str, Any]]:
    async def one() -> AsyncIterator[dict[str, Any]]:
        yield {
            "type": "user",
            "uuid": stamp,
            "message": {"role": "user", "content": text},
            "parent_tool_use_id": None,
        }

    return one()


class ClientTurns:
    """One conversation on a connected ``ClaudeSDKClient``: each call is one stamped query.

    The reply is the text of the result that took this query (``user_message_uuids``); results of
    other turns met on the way are skipped. An error result raises :class:`TurnError`.
    :attr:`results` keeps each turn's ``ResultMessage``.
    """

    def __init__(self, client: ClaudeSDKClient, *, session_id: str = "default") -> None:
        self.client = client
        self.session_id = session_id
        self.results: list[ResultMessage] = []

    async def __call__(self, prompt: str) -> str | None:
        stamp = str(uuid.uuid4())
        await self.client.query(_stamped(prompt, stamp), session_id=self.session_id)
        async for message in self.client.receive_messages():
            if not isinstance(message, ResultMessage):
                continue
            if stamp not in (message.user_message_uuids or [message.user_message_uuid or ""]):
                continue  # the result of a turn the CLI started by itself
            self.results.append(message)
            if message.is_error:
                why = "; ".join(message.errors or []) or message.result or message.subtype
                raise TurnError(f"the turn ended with an error ({message.terminal_reason}): {why}")
            return message.result
        raise TurnError("the Claude Code CLI ended before answering the turn")


def watch_runner(client: ClaudeSDKClient, watches: WatchManager, *, publish: Publish) -> TurnRunner:
    """A :class:`~asyncai_watch.integrations.TurnRunner` feeding ``watches``' notices to ``client``."""
    return TurnRunner(ClientTurns(client), watches.notices, publish=publish, taken=watches.notice_taken)


@attrs.frozen
class WatchSession:
    """What :func:`watch_session` opened."""

    sources: tuple[McpResourceSource, ...]
    watches: WatchManager
    client: ClaudeSDKClient
    runner: TurnRunner


def _open_source(name: str, target: str | Sequence[str]) -> Any:
    if isinstance(target, str) and target.startswith(("http://", "https://")):
        return McpResourceSource.http(target, name=name)
    return McpResourceSource.stdio(target, name=name)


@asynccontextmanager
async def watch_session(
    servers: Mapping[str, str | Sequence[str]],
    *,
    publish: Publish,
    options: ClaudeAgentOptions | None = None,
    watch_state: Path | str | None = None,
    limits: Limits | None = None,
    expose_server_tools: bool = True,
) -> AsyncIterator[WatchSession]:
    """Open the ``servers`` (name -> command line or http(s) URL), a :class:`WatchManager` over
    them, a ``ClaudeSDKClient`` with the watch server added to ``options``, and the runner; close
    them in reverse.

    With ``watch_state`` the watches are saved there and restored on entry, and the restore
    notice is the first turn. With ``expose_server_tools`` the servers' own tools are in the
    watch server too (permission for them is the user's: ``allowed_tools``, a permission mode).
    The watch built-ins are allowed.
    """
    options = options if options is not None else ClaudeAgentOptions()
    async with AsyncExitStack() as stack:
        sources = tuple(
            [await stack.enter_async_context(_open_source(n, target)) for n, target in servers.items()]
        )
        watches = await stack.enter_async_context(
            WatchManager(sources, limits=limits, watch_state=watch_state)
        )
        tools = await server_tools(sources) if expose_server_tools else []
        mcp_servers = dict(options.mcp_servers) if isinstance(options.mcp_servers, dict) else {}
        mcp_servers[SERVER_NAME] = watch_server(watches, tools=tools)
        allowed = [*options.allowed_tools, *(f"mcp__{SERVER_NAME}__{t.name}" for t in WATCH_TOOLS)]
        client = ClaudeSDKClient(dataclasses.replace(options, mcp_servers=mcp_servers, allowed_tools=allowed))
        await stack.enter_async_context(client)
        runner = await stack.enter_async_context(watch_runner(client, watches, publish=publish))
        yield WatchSession(sources, watches, client, runner)


def serve_entry(
    servers: Mapping[str, str | Sequence[str]],
    *,
    watch_state: Path | str | None = None,
    python: str = sys.executable,
) -> dict[str, Any]:
    """The ``mcp_servers`` entry that runs ``asyncai-watch serve`` over ``servers`` as an external
    bridge, ``alwaysLoad`` set: ``ClaudeAgentOptions(mcp_servers={"watch": serve_entry(...)})``.

    Pull only: an Agent SDK session never receives the bridge's channel pushes, so the model has
    to call ``watch_notices`` itself. Prefer :func:`watch_session` to get notices as turns.
    """
    args = ["-m", "asyncai_watch", "serve"]
    for name, target in servers.items():
        line = target if isinstance(target, str) else shlex.join(target)
        args += ["--server", f"{name}={line}"]
    if watch_state is not None:
        args += ["--watch-state", str(watch_state)]
    return {"type": "stdio", "command": python, "args": args, "alwaysLoad": True}
