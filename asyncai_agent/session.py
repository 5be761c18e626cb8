"""Wiring: servers -> WatchManager -> code mode -> Agent -> Orchestrator, owned by one exit stack."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import attrs

from asyncai_agent.agent import DEFAULT_MAX_ROUNDS, Agent
from asyncai_agent.backends.base import Backend
from asyncai_agent.channels import ChannelPuller, has_channel
from asyncai_agent.events import AgentEvent, ReplyChannel
from asyncai_agent.orchestrator import Orchestrator
from asyncai_agent.prompt import build_system_prompt
from asyncai_agent.transcript import Transcript
from asyncai_watch import Limits, McpResourceSource, WatchManager
from asyncai_watch.codemode import CodeMode, builtins, tool_functions
from asyncai_watch.http_auth import HttpAuth

__all__ = ["AgentSession", "SessionConfig", "open_session"]


@attrs.frozen(kw_only=True)
class SessionConfig:
    mcp_stdio: tuple[str | tuple[str, ...], ...] = ()
    """Commands for stdio servers: a shell-like string, or an argv tuple."""
    mcp_http: tuple[str, ...] = ()
    http_token: str | None = None
    """Sent as ``Authorization: Bearer TOKEN`` to every --mcp-http server (``--token-file``)."""
    http_auth: HttpAuth | None = None
    """Bearer headers and/or an OAuth provider per --mcp-http server (``--token-file``, ``--auth``)."""
    watch_state: Path | None = None
    session_path: Path | None = None
    verbose: bool = False
    limits: Limits = attrs.field(factory=Limits)
    max_rounds: int = DEFAULT_MAX_ROUNDS


@attrs.frozen(kw_only=True)
class AgentSession:
    orchestrator: Orchestrator
    manager: WatchManager
    sources: tuple[McpResourceSource, ...]
    code: CodeMode
    agent: Agent
    pullers: tuple[ChannelPuller, ...] = ()
    """Channel doorbell pullers of the servers that declared ``claude/channel``."""


@attrs.frozen(kw_only=True)
class PendingSources:
    """Validated, not yet connected servers, each with the channel puller its client carries."""

    sources: tuple[McpResourceSource, ...]
    pullers: tuple[ChannelPuller, ...]


def make_sources(config: SessionConfig) -> PendingSources:
    """Validate every server argument before anything starts (a bad URL fails here).

    Every client advertises ``claude/channel``; the puller only runs for a server that
    declares it (a switchboard), so other servers are unaffected.
    """
    sources: list[McpResourceSource] = []
    pullers: list[ChannelPuller] = []
    for cmd in config.mcp_stdio:
        puller = ChannelPuller(verbose=config.verbose)
        sources.append(
            McpResourceSource.stdio(cmd if isinstance(cmd, str) else list(cmd), extensions=[puller.extension])
        )
        pullers.append(puller)
    auth = config.http_auth if config.http_auth is not None else HttpAuth()
    headers = {"Authorization": f"Bearer {config.http_token}"} if config.http_token else auth.headers
    for url in config.mcp_http:
        puller = ChannelPuller(verbose=config.verbose)
        try:
            sources.append(
                McpResourceSource.http(
                    url,
                    headers=headers,
                    auth=auth.auth_for(url),
                    extensions=[puller.extension],
                    connect_timeout=auth.connect_timeout,
                )
            )
        except ValueError as exc:
            raise ValueError(f"--mcp-http: {exc}") from exc
        pullers.append(puller)
    return PendingSources(sources=tuple(sources), pullers=tuple(pullers))


def _observe_completions(
    functions: dict[str, Callable[..., Awaitable[Any]]], pullers: Sequence[ChannelPuller]
) -> None:
    """After a successful ``todo_complete`` the pullers drain again (switchboard's contract)."""

    def observed(name: str, inner: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def wrapped(*args: Any, **kwargs: Any) -> Any:
            result = await inner(*args, **kwargs)  # a tool error raises: no drain for a failed completion
            for puller in pullers:
                puller.completed()
            return result

        wrapped.__name__ = wrapped.__qualname__ = name
        wrapped.__doc__ = inner.__doc__
        return wrapped

    for name in [n for n in functions if n == "todo_complete" or n.endswith("_todo_complete")]:
        functions[name] = observed(name, functions[name])


@asynccontextmanager
async def open_session(
    config: SessionConfig,
    backend: Backend,
    *,
    default_channel: ReplyChannel,
    observers: Sequence[Callable[[AgentEvent], None]] = (),
    sources: Sequence[McpResourceSource] | PendingSources | None = None,
) -> AsyncIterator[AgentSession]:
    """Connect, start the manager and the reactor; leaving cancels all of it, newest first."""
    if sources is None:
        sources = make_sources(config)
    if isinstance(sources, PendingSources):
        pending, pullers = list(sources.sources), list(sources.pullers)
    else:
        pending, pullers = list(sources), []
    async with AsyncExitStack() as stack:
        stack.push_async_callback(backend.aclose)
        transcript = None
        if config.session_path is not None:
            transcript = stack.enter_context(Transcript(config.session_path))
        connected = tuple([await stack.enter_async_context(src) for src in pending])
        manager = await stack.enter_async_context(
            WatchManager(
                connected, limits=config.limits, watch_state=config.watch_state, verbose=config.verbose
            )
        )
        functions = dict(await tool_functions(connected)) if connected else {}
        built = builtins(manager) if connected else {}
        functions.update(built)  # the built-ins win over a same-named MCP tool
        ringing = []
        for src, puller in zip(connected, pullers, strict=False):
            if has_channel(src.client):
                puller.server = puller.extension.server = src.name
                ringing.append((src, puller))
        _observe_completions(functions, [p for _, p in ringing])
        code = CodeMode(functions)
        prompt = build_system_prompt(
            functions, servers=[s.name for s in connected], builtin_names=list(built)
        )
        agent = Agent(backend, code, system_prompt=prompt, max_rounds=config.max_rounds)
        all_observers = ([transcript.record] if transcript is not None else []) + list(observers)
        orch = await stack.enter_async_context(
            Orchestrator(
                agent,
                default_channel=default_channel,
                observers=tuple(all_observers),
                verbose=config.verbose,
                notice_taken=manager.notice_taken,
            )
        )
        orch.forward_notices(manager.notices)
        async with anyio.create_task_group() as tg:
            for src, puller in ringing:
                orch.forward_notices(puller.notices)
                tg.start_soon(puller.run, src.client)
            try:
                yield AgentSession(
                    orchestrator=orch,
                    manager=manager,
                    sources=connected,
                    code=code,
                    agent=agent,
                    pullers=tuple(p for _, p in ringing),
                )
            finally:
                tg.cancel_scope.cancel()  # the pullers end with the session
