"""One run of the model: rounds of ``backend.complete`` and ``run_code`` until a final reply."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Protocol

import attrs

from asyncai_agent.backends.base import Backend
from asyncai_agent.events import AgentEvent, ModelMessage, ToolResult
from asyncai_agent.runtime import Run
from asyncai_agent.thread import Message, ToolCall, ToolSpec
from asyncai_watch import NO_REPLY

__all__ = ["DEFAULT_MAX_ROUNDS", "RUN_CODE_TOOL", "Agent", "CodeOutcome", "CodeRunner"]

DEFAULT_MAX_ROUNDS: Final = 25

RUN_CODE_TOOL: Final = ToolSpec(
    name="run_code",
    description=(
        "Run Python (restricted; top-level `await` allowed) in your persistent scope. Every MCP tool "
        "is an async function (`await tool_name(arg=...)`), plus list_resources, read_resource, "
        "watch_start, watch_stop, watch_list. Returns what you print plus the last expression's value. "
        "Variables persist across calls and turns."
    ),
    parameters={
        "type": "object",
        "properties": {"code": {"type": "string", "description": "Python source to run"}},
        "required": ["code"],
        "additionalProperties": False,
    },
)


@attrs.frozen
class CodeOutcome:
    text: str
    """The tool result the model sees: printed output and the last value, or the error."""
    ended_turn: bool = False
    """The code was ``NO_REPLY``: the turn ends with no reply."""


class CodeRunner(Protocol):
    """Runs the model's code (:class:`asyncai_watch.codemode.CodeMode`): the tool result text."""

    async def run(self, code: str) -> str: ...

    def scope_note(self) -> str:
        """A short line naming the variables that exist, for the model's next request."""
        ...


class Agent:
    """The executor the orchestrator calls for each run."""

    def __init__(
        self,
        backend: Backend,
        code: CodeRunner,
        *,
        system_prompt: str,
        max_rounds: int = DEFAULT_MAX_ROUNDS,
    ) -> None:
        self.backend = backend
        self.code = code
        self.system_prompt = system_prompt
        self.max_rounds = max_rounds

    async def __call__(
        self, run: Run, thread: list[Message], emit: Callable[[AgentEvent], None]
    ) -> str | None:
        for _ in range(self.max_rounds):
            system = f"{self.system_prompt}\n\n{self.code.scope_note()}"
            reply = await self.backend.complete(system=system, messages=thread, tools=[RUN_CODE_TOOL])
            thread.append(reply)
            emit(ModelMessage(run_id=run.id, message=reply))
            if not reply.tool_calls:
                return reply.text
            ended = False
            for call in reply.tool_calls:
                # Every call gets a result, so the thread stays valid for the next request.
                if ended:
                    outcome = CodeOutcome("not run: the turn already ended with NO_REPLY")
                else:
                    outcome = await self._call(call)
                    ended = outcome.ended_turn
                thread.append(Message(role="tool", text=outcome.text, tool_call_id=call.id))
                emit(
                    ToolResult(
                        run_id=run.id,
                        call_id=call.id,
                        name=call.name,
                        code=str(call.arguments.get("code", "")),
                        text=outcome.text,
                        ended_turn=outcome.ended_turn,
                    )
                )
            if ended:
                return NO_REPLY
        return (
            f"(stopped: {self.max_rounds} model rounds in this turn without a final reply; "
            "ask again to continue)"
        )

    async def _call(self, call: ToolCall) -> CodeOutcome:
        if call.name != RUN_CODE_TOOL.name:
            return CodeOutcome(f"error: unknown tool {call.name!r}; the only tool is run_code(code)")
        if call.invalid_arguments is not None:
            return CodeOutcome(
                f'error: run_code arguments must be a JSON object {{"code": "..."}}, got {call.invalid_arguments!r}'
            )
        code = call.arguments.get("code")
        if not isinstance(code, str):
            return CodeOutcome(
                f'error: run_code needs {{"code": "<python source>"}}; got arguments {dict(call.arguments)!r}'
            )
        # A model that runs NO_REPLY as code means "no reply" (seen live): end the turn.
        head, _, last = code.rstrip().rpartition("\n")
        if last.strip() == NO_REPLY:
            if not head.strip():
                return CodeOutcome("NO_REPLY: the turn ends with no reply.", ended_turn=True)
            before = await self.code.run(head)
            return CodeOutcome(f"{before}\nNO_REPLY: the turn ends with no reply.", ended_turn=True)
        return CodeOutcome(await self.code.run(code))
