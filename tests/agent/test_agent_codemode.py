"""run_code: the persistent scope, result shape, errors, NO_REPLY as code, the scope note."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import pytest

from asyncai_agent.agent import Agent
from asyncai_agent.backends.scripted import ScriptedBackend, parse_script
from asyncai_agent.events import AgentEvent, ReplySuppressed, RunCompleted, ToolResult
from asyncai_agent.orchestrator import Orchestrator
from asyncai_agent.runtime import Run
from asyncai_agent.thread import Message, ToolCall, ToolSpec
from asyncai_watch.codemode import CodeMode
from asyncai_watch.mcp.client import McpResourceSource
from asyncai_watch.runtime.tools import tool_functions


async def lookup(**kwargs: Any) -> dict[str, Any]:
    return {"asked": kwargs, "items": [1, 2, 3]}


class Channel:
    def __init__(self) -> None:
        self.sent: list[str] = []

    @property
    def name(self) -> str:
        return "c"

    async def send(self, text: str) -> None:
        self.sent.append(text)


@pytest.mark.anyio
async def test_result_is_printed_output_plus_last_value() -> None:
    code = CodeMode({"lookup": lookup})
    out = await code.run('r = await lookup(q="x")\nprint("found", len(r["items"]))\nr["asked"]')
    assert out == "found 3\n{'q': 'x'}"
    assert await code.run("x = 1") == "(no output)"
    assert await code.run('"text as is"') == "text as is"


@pytest.mark.anyio
async def test_scope_persists_across_calls() -> None:
    code = CodeMode({"lookup": lookup})
    await code.run("r = await lookup(q=1)\ncount = 0")
    await code.run("count += len(r['items'])")
    assert await code.run("count") == "3"
    assert code.variables() == {"r": "dict, 2 keys", "count": "int"}


@pytest.mark.anyio
async def test_errors_come_back_as_concise_text() -> None:
    code = CodeMode({"lookup": lookup})
    out = await code.run("print('before')\nvalue = {}['missing']")
    assert out == "before\nError: KeyError: 'missing' (line 2)\n  line 2: value = {}['missing']"
    out = await code.run("import os")
    assert out.startswith("Error: ")
    assert "import of 'os' is not allowed" in out
    out = await code.run("def broken(:\n  pass")
    assert out.startswith("Error: SyntaxError")
    assert "line 1: def broken(:" in out
    out = await code.run("await nope()")
    assert "NameError" in out
    assert "lookup" in out  # names the functions that do exist


@pytest.mark.anyio
async def test_big_results_are_truncated_with_a_note() -> None:
    code = CodeMode({}, max_result=100)
    out = await code.run("'x' * 1000")
    assert out.startswith("x" * 100 + "\n[truncated: 900 more characters.")


@pytest.mark.anyio
async def test_a_hanging_await_is_cancelled_with_a_clear_error() -> None:
    never = anyio.Event()

    async def wait_forever() -> None:
        await never.wait()

    code = CodeMode({"wait_forever": wait_forever}, run_timeout=0.05)
    out = await code.run("print('start')\nawait wait_forever()")
    assert out.startswith("start\nError: TimeoutError: run_code was cancelled after 0.05 s")


def test_scope_note_names_variables() -> None:
    code = CodeMode({"lookup": lookup})
    assert "no variables yet" in code.scope_note()
    code.scope["rows"] = [1, 2]
    code.scope["name"] = "abc"
    assert code.scope_note().endswith("rows (list, 2 items), name (str, 3 chars).")
    assert "lookup" not in code.scope_note()


class RecordingBackend:
    """A model stand-in that answers from a list and records every request's system prompt."""

    def __init__(self, answers: list[Message]) -> None:
        self.answers = answers
        self.systems: list[str] = []

    @property
    def name(self) -> str:
        return "recording"

    async def complete(
        self, *, system: str, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> Message:
        self.systems.append(system)
        return self.answers.pop(0)

    async def aclose(self) -> None:
        return None


def _run_code(code: str, call_id: str = "c1") -> Message:
    return Message(
        role="assistant", tool_calls=(ToolCall(id=call_id, name="run_code", arguments={"code": code}),)
    )


@pytest.mark.anyio
async def test_no_reply_run_as_code_ends_the_turn() -> None:
    backend = RecordingBackend([_run_code("seen = True\nNO_REPLY"), Message(role="assistant", text="unused")])
    code = CodeMode({})
    agent = Agent(backend, code, system_prompt="S")
    channel = Channel()
    async with Orchestrator(agent, default_channel=channel) as orch:
        events = orch.subscribe()
        orch.submit("anything new?", channel)
        seen: list[AgentEvent] = []
        with anyio.fail_after(5):
            async for event in events:
                seen.append(event)
                if isinstance(event, RunCompleted):
                    break
    assert len(backend.systems) == 1  # no second model round after NO_REPLY
    assert channel.sent == []
    assert any(isinstance(e, ReplySuppressed) for e in seen)
    results = [e for e in seen if isinstance(e, ToolResult)]
    assert results[0].ended_turn
    assert code.scope["seen"] is True  # the code before NO_REPLY still ran


@pytest.mark.anyio
async def test_scope_note_reaches_the_model_on_the_next_request() -> None:
    backend = RecordingBackend([_run_code("total = 41 + 1"), Message(role="assistant", text="done")])
    agent = Agent(backend, CodeMode({}), system_prompt="BASE")
    run = Run(id=1, picked_up=())
    reply = await agent(run, [Message(role="user", text="add")], lambda _e: None)
    assert reply == "done"
    assert "no variables yet" in backend.systems[0]
    assert backend.systems[1].startswith("BASE\n\n")
    assert "total (int)" in backend.systems[1]


@pytest.mark.anyio
async def test_run_code_scope_persists_across_turns_with_real_mcp_tools() -> None:
    """Turn 1 stores a tool result in a variable; turn 2 reuses it without calling the tool."""
    script = parse_script(
        {
            "turns": [
                {
                    "steps": [
                        {
                            "run_code": 'await memo_set(key="owner", value="ada")\nsaved = await memo_get(key="owner")'
                        },
                        {"reply": "stored"},
                    ]
                },
                {"steps": [{"run_code": 'saved["value"]'}, {"expect": "ada", "reply": "owner is {result}"}]},
            ]
        }
    )
    async with McpResourceSource.stdio([sys.executable, "-m", "asyncai_servers.memo"]) as memo:
        calls: list[str] = []
        functions = await tool_functions([memo])

        def counting(name: str) -> Callable[..., Any]:
            fn = functions[name]

            async def wrapper(**kwargs: Any) -> Any:
                calls.append(name)
                return await fn(**kwargs)

            return wrapper

        code = CodeMode({name: counting(name) for name in functions})
        agent = Agent(ScriptedBackend(script), code, system_prompt="S")
        channel = Channel()
        async with Orchestrator(agent, default_channel=channel) as orch:
            events = orch.subscribe()
            orch.submit("remember the owner", channel)
            with anyio.fail_after(20):
                async for event in events:
                    if isinstance(event, RunCompleted):
                        break
            assert calls == ["memo_set", "memo_get"]
            orch.submit("who is the owner?", channel)
            with anyio.fail_after(20):
                async for event in events:
                    if isinstance(event, RunCompleted):
                        break
    assert channel.sent == ["stored", "owner is ada"]
    assert calls == ["memo_set", "memo_get"]  # turn 2 made no MCP call


@pytest.mark.anyio
async def test_run_code_stops_a_loop_that_never_awaits_and_the_scope_stays_usable() -> None:
    code_mode = CodeMode({}, max_loop_steps=10_000)
    out = await code_mode.run("x = 1\nwhile True:\n    x += 1")
    assert out.startswith("Error: StepLimitError: the code made more than 10,000 loop iterations and calls")
    assert "watch_start waits for changes" in out
    assert await code_mode.run("x > 10_000") == "True"  # what it did before the stop is kept
