"""asyncai-watch inside agent frameworks: the watch built-ins as native tools, and a runner
that turns notices into the framework's turns.

One module per framework, each behind its own extra, so importing this package needs none of them:

- :mod:`asyncai_watch.integrations.pydantic_ai` (``pip install 'asyncai-watch[pydantic-ai]'``);
- :mod:`asyncai_watch.integrations.openai_agents` (``pip install 'asyncai-watch[openai-agents]'``);
- :mod:`asyncai_watch.integrations.langgraph` (``pip install 'asyncai-watch[langgraph]'``);
- :mod:`asyncai_watch.integrations.claude_agent_sdk` (``pip install 'asyncai-watch[claude-agent-sdk]'``);
- :mod:`asyncai_watch.integrations.google_adk` (``pip install 'asyncai-watch[google-adk]'``).

Every framework runs turns through the same :class:`TurnRunner` (the library's turn rules:
render, coalesce, ``NO_REPLY``); only "run one turn with this text, return the reply" differs.
To wire another framework by hand: :func:`watch_functions` (the built-ins as typed functions),
:data:`TOOL_ERRORS` and :func:`tool_error_text` (which errors a tool reports to the model, and
how), :func:`structured_result` and :func:`result_text` (a result as MCP structured content and
its JSON text), and :func:`server_tools` (the servers' own tools over the watch's connections).
"""

from __future__ import annotations

from asyncai_watch.integrations._builtins import (
    TOOL_ERRORS,
    result_text,
    structured_result,
    tool_error_text,
    watch_functions,
)
from asyncai_watch.integrations._runner import Publish, RunnerStats, RunRecord, TurnFn, TurnRunner
from asyncai_watch.integrations._server_tools import ServerTool, server_tools

__all__ = [
    "TOOL_ERRORS",
    "Publish",
    "RunRecord",
    "RunnerStats",
    "ServerTool",
    "TurnFn",
    "TurnRunner",
    "result_text",
    "server_tools",
    "structured_result",
    "tool_error_text",
    "watch_functions",
]
