"""Google ADK end to end, offline: an ``LlmAgent`` on a scripted ``BaseLlm`` (ADK's own way to
plug in a model) with the watch tools, the real memo server over stdio, and a second client whose
changes become new user events of the same ADK session."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

import anyio
import pydantic
import pytest
from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.adk.tools.base_tool import BaseTool
from google.genai import types

from asyncai_watch.integrations.google_adk import SessionTurns, server_tools, watch_runner, watch_tools
from tests.support.integration_memo import (
    WAIT,
    Brain,
    Call,
    Published,
    ask_call,
    memo,
    own_write_reaches_the_watch,
    two_notices_during_one_run,
)

pytestmark = pytest.mark.anyio


class ScriptedLlm(BaseLlm):
    """Answers from the last content of each request, as the :class:`Brain` decides."""

    model: str = "scripted"
    brain: Any = None
    requests: list[LlmRequest] = pydantic.Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(llm_request)
        last = llm_request.contents[-1]
        parts = last.parts or []
        for part in parts:
            if part.function_response is not None:
                said = json.dumps(part.function_response.response, separators=(",", ":"))
                yield reply(self.brain.on_tool_result(said))
                return
        prompt = "".join(p.text or "" for p in parts)
        answer = await self.brain.on_user(prompt)
        if isinstance(answer, Call):
            call = types.FunctionCall(name=answer.name, args=answer.args)
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))
        else:
            yield reply(answer)


def reply(text: str) -> LlmResponse:
    return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))


def runner_for(brain: Brain, tools: list[BaseTool]) -> tuple[InMemoryRunner, ScriptedLlm]:
    model = ScriptedLlm(brain=brain, requests=[])
    agent = LlmAgent(name="watcher", model=model, instruction="Watch what you are asked to.", tools=tools)
    return InMemoryRunner(agent=agent, app_name="watcher"), model


def user_texts(request: LlmRequest) -> list[str]:
    return [
        "".join(p.text or "" for p in c.parts or [])
        for c in request.contents
        if c.role == "user" and any(p.text for p in c.parts or [])
    ]


async def test_a_change_becomes_a_user_event_of_the_session_and_history_is_kept() -> None:
    brain, published = Brain(), Published()
    async with memo() as m:
        runner, model = runner_for(brain, watch_tools(m.watches))
        async with watch_runner(runner, m.watches, publish=published) as turns:
            ask = ask_call("watch_start", name="notes", uri="memo://notes")
            with anyio.fail_after(WAIT):
                first = await turns.ask(ask)
            assert first.reply == 'tool said: {"name":"notes","uri":"memo://notes","shape":"state"}'
            await m.set("todo", "milk")
            with anyio.fail_after(WAIT):
                stats = await turns.wait(lambda s: s.runs_completed == 2)
            assert stats.published == 2
            assert published.texts[1] == "seen: ADDED todo"
            # The notice's turn carries the first turn: one session, its events the history.
            assert user_texts(model.requests[-1]) == [ask, turns.runs[1].prompt]
            declared = model.requests[0].config.tools[0].function_declarations  # type: ignore[index,union-attr]
            start = next(d for d in declared if d.name == "watch_start")
            assert start.parameters_json_schema["required"] == ["name", "uri"]


async def test_a_no_reply_turn_publishes_nothing_and_refusals_are_error_answers() -> None:
    brain, published = Brain(), Published()
    async with memo() as m:
        runner, _ = runner_for(brain, watch_tools(m.watches))
        async with watch_runner(runner, m.watches, publish=published) as turns:
            with anyio.fail_after(WAIT):
                bad = await turns.ask(ask_call("watch_start", name="a b", uri="memo://notes"))
                await turns.ask(ask_call("watch_start", name="notes", uri="memo://notes"))
                await m.set("noise", 1)
                stats = await turns.wait(lambda s: s.runs_completed == 3)
            assert bad.reply is not None
            assert bad.reply.startswith('tool said: {"error":"InvalidWatchNameError: watch_start: invalid')
            assert turns.runs[2].reply == "NO_REPLY"
            assert (stats.published, stats.suppressed) == (2, 1)


async def test_two_notices_during_a_run_give_one_follow_up_run() -> None:
    brain, published = Brain(), Published()
    async with memo() as m:
        runner, _ = runner_for(brain, watch_tools(m.watches))
        async with watch_runner(runner, m.watches, publish=published) as turns:
            await two_notices_during_one_run(turns, m, brain, published)


async def test_the_agents_own_write_through_the_server_tools_reaches_its_watch() -> None:
    brain, published = Brain(), Published()
    async with memo() as m:
        tools = [*watch_tools(m.watches), *await server_tools(m.watches.sources)]
        runner, _ = runner_for(brain, tools)
        async with watch_runner(runner, m.watches, publish=published) as turns:
            await own_write_reaches_the_watch(turns, m, published)


async def test_session_turns_makes_the_named_session_once() -> None:
    runner, _ = runner_for(Brain(), [])
    turns = SessionTurns(runner, session_id="s1")
    with anyio.fail_after(WAIT):
        assert await turns("hello") == "ok"
        assert await turns("again") == "ok"
        session = await runner.session_service.get_session(
            app_name="watcher", user_id="user", session_id="s1"
        )
    assert session is not None
    assert [e.content.parts[0].text for e in session.events if e.author == "user"] == ["hello", "again"]  # type: ignore[union-attr,index]
