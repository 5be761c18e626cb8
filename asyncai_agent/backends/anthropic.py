"""``anthropic:MODEL`` through the official SDK (Messages API with tools)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import anyio

from asyncai_agent.backends.base import MAX_TOKENS, TIMEOUT_SECONDS, BackendError
from asyncai_agent.thread import Message, ToolCall, ToolSpec
from asyncai_watch.extras import MissingExtraError, require

__all__ = ["AnthropicBackend", "to_wire_messages", "to_wire_tools"]


def to_wire_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The Messages API ``messages`` array: tool results are user-role blocks; same roles merge.

    The API wants user/assistant alternation and tool results first in the user
    message after a ``tool_use``, so consecutive blocks of one role become one message.
    """
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for m in messages:
        if m.role == "user":
            add("user", [{"type": "text", "text": m.text}])
        elif m.role == "tool":
            add("user", [{"type": "tool_result", "tool_use_id": m.tool_call_id or "", "content": m.text}])
        else:
            blocks: list[dict[str, Any]] = [{"type": "text", "text": m.text}] if m.text else []
            blocks += [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.arguments)}
                for c in m.tool_calls
            ]
            # An empty reply (a NO_REPLY) has no block the API accepts; leaving it out is harmless.
            add("assistant", blocks)
    return out


def to_wire_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [{"name": t.name, "description": t.description, "input_schema": dict(t.parameters)} for t in tools]


class AnthropicBackend:
    """Messages API with tools; ``max_tokens`` 8192, 600 s timeout; key from ANTHROPIC_API_KEY."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        max_retries: int = 2,
        timeout: float = TIMEOUT_SECONDS,
    ) -> None:
        try:
            anthropic = require("anthropic", feature="anthropic:MODEL")  # an optional extra
        except MissingExtraError as exc:
            raise BackendError(str(exc)) from exc
        if not model:
            raise BackendError("--model anthropic:MODEL needs a model name, e.g. anthropic:claude-sonnet-4-5")
        key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY")
        if not key:
            raise BackendError(f"anthropic:{model}: set ANTHROPIC_API_KEY in the environment")
        self._model = model
        self._deadline = timeout
        self._anthropic = anthropic
        self._timeout = timeout
        self._client = anthropic.AsyncAnthropic(
            api_key=key, base_url=base_url, timeout=timeout, max_retries=max_retries
        )

    @property
    def name(self) -> str:
        return f"anthropic:{self._model}"

    async def complete(
        self, *, system: str, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> Message:
        request: dict[str, Any] = {
            "model": self._model,
            "max_tokens": MAX_TOKENS,
            "system": system,
            "messages": to_wire_messages(messages),
        }
        if tools:
            request["tools"] = to_wire_tools(tools)
        try:
            # The SDK retries a timed-out request; the deadline here bounds the whole call.
            with anyio.fail_after(self._deadline):
                response = await self._client.messages.create(**request)
        except TimeoutError as exc:
            raise BackendError(
                f"{self.name}: no answer within {self._deadline:g} s (retries included)"
            ) from exc
        except self._anthropic.APITimeoutError as exc:
            raise BackendError(f"{self.name}: no answer within {self._timeout} s") from exc
        except self._anthropic.APIConnectionError as exc:
            raise BackendError(f"{self.name}: cannot reach {self._client.base_url}: {exc}") from exc
        except self._anthropic.APIStatusError as exc:
            raise BackendError(f"{self.name}: HTTP {exc.status_code}: {exc.message}") from exc
        except self._anthropic.AnthropicError as exc:
            raise BackendError(f"{self.name}: {exc}") from exc
        texts: list[str] = []
        calls: list[ToolCall] = []
        for block in response.content:
            if block.type == "text":
                texts.append(block.text)
            elif block.type == "tool_use":
                args = block.input
                if isinstance(args, dict):
                    calls.append(ToolCall(id=block.id, name=block.name, arguments=args))
                else:
                    calls.append(ToolCall(id=block.id, name=block.name, invalid_arguments=repr(args)))
        return Message(role="assistant", text="\n".join(texts), tool_calls=tuple(calls))

    async def aclose(self) -> None:
        await self._client.close()
