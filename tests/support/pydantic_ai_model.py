"""PydanticAI's FunctionModel body driven by the scripted brain of integration_memo."""

from __future__ import annotations

from pydantic_ai.messages import (
    BaseToolReturnPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo

from tests.support.integration_memo import (
    Brain,
    Call,
)


class Model:
    """PydanticAI's ``FunctionModel`` body: turn the last request into the brain's answer."""

    def __init__(self, brain: Brain) -> None:
        self.brain = brain
        self.requests: list[list[ModelMessage]] = []
        self.calls = 0

    async def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests.append(list(messages))
        last = messages[-1]
        assert isinstance(last, ModelRequest)
        for part in last.parts:
            if isinstance(part, BaseToolReturnPart):
                return ModelResponse(parts=[TextPart(self.brain.on_tool_result(part.model_response_str()))])
            if isinstance(part, RetryPromptPart):
                return ModelResponse(parts=[TextPart(self.brain.on_tool_result(part.model_response()))])
        prompt = next(p.content for p in last.parts if isinstance(p, UserPromptPart))
        assert isinstance(prompt, str)
        answer = await self.brain.on_user(prompt)
        if isinstance(answer, Call):
            self.calls += 1
            return ModelResponse(
                parts=[ToolCallPart(answer.name, answer.args, tool_call_id=f"c{self.calls}")]
            )
        return ModelResponse(parts=[TextPart(answer)])
