"""``openai:MODEL``: any OpenAI-compatible chat-completions endpoint (llama.cpp, vLLM, Ollama, OpenAI)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import anyio

from asyncai_agent.backends.base import MAX_TOKENS, TIMEOUT_SECONDS, BackendError
from asyncai_agent.thread import Message, ToolCall, ToolSpec
from asyncai_watch.extras import MissingExtraError, require

__all__ = ["OpenAIBackend", "to_wire_messages", "to_wire_tools"]


def to_wire_messages(system: str, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The chat-completions ``messages`` array for a thread."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for m in messages:
        if m.role == "user":
            out.append({"role": "user", "content": m.text})
        elif m.role == "assistant":
            wire: dict[str, Any] = {"role": "assistant", "content": m.text or None}
            if m.tool_calls:
                wire["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {
                            "name": c.name,
                            "arguments": c.invalid_arguments
                            if c.invalid_arguments is not None
                            else json.dumps(dict(c.arguments), ensure_ascii=False),
                        },
                    }
                    for c in m.tool_calls
                ]
            elif not m.text:
                wire["content"] = ""
            out.append(wire)
        else:
            out.append({"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.text})
    return out


def to_wire_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description, "parameters": dict(t.parameters)},
        }
        for t in tools
    ]


def _parse_call(call: Any) -> ToolCall:
    raw = call.function.arguments or "{}"
    try:
        args = json.loads(raw)
    except json.JSONDecodeError:
        args = None
    if not isinstance(args, dict):
        return ToolCall(id=call.id, name=call.function.name, invalid_arguments=raw)
    return ToolCall(id=call.id, name=call.function.name, arguments=args)


class OpenAIBackend:
    """Chat completions with tools; ``max_tokens`` 8192, 600 s timeout."""

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
            openai = require("openai", feature="openai:MODEL")  # an optional extra
        except MissingExtraError as exc:
            raise BackendError(str(exc)) from exc
        if not model:
            raise BackendError("--model openai:MODEL needs a model name, e.g. openai:gpt-4o-mini")
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        if not key:
            if base_url is None and not os.environ.get("OPENAI_BASE_URL"):
                raise BackendError(
                    f"openai:{model}: set OPENAI_API_KEY, or pass --base-url for a local "
                    "server (llama.cpp, vLLM, Ollama) that needs no key"
                )
            key = "not-needed"  # local servers ignore it; the SDK insists on a value
        self._model = model
        self._deadline = timeout
        self._openai = openai
        self._client = openai.AsyncOpenAI(
            api_key=key, base_url=base_url, timeout=timeout, max_retries=max_retries
        )

    @property
    def name(self) -> str:
        return f"openai:{self._model}"

    async def complete(
        self, *, system: str, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> Message:
        request: dict[str, Any] = {
            "model": self._model,
            "messages": to_wire_messages(system, messages),
            "max_tokens": MAX_TOKENS,
        }
        if tools:
            request["tools"] = to_wire_tools(tools)
        try:
            # The SDK retries a timed-out request; the deadline here bounds the whole call.
            with anyio.fail_after(self._deadline):
                response = await self._client.chat.completions.create(**request)
        except TimeoutError as exc:
            raise BackendError(
                f"{self.name}: no answer within {self._deadline:g} s (retries included)"
            ) from exc
        except self._openai.APITimeoutError as exc:
            raise BackendError(f"{self.name}: no answer within {self._client.timeout} s") from exc
        except self._openai.APIConnectionError as exc:
            raise BackendError(f"{self.name}: cannot reach {self._client.base_url}: {exc}") from exc
        except self._openai.APIStatusError as exc:
            raise BackendError(f"{self.name}: HTTP {exc.status_code}: {exc.message}") from exc
        except self._openai.OpenAIError as exc:
            raise BackendError(f"{self.name}: {exc}") from exc
        if not response.choices:
            raise BackendError(f"{self.name}: the response has no choices")
        msg = response.choices[0].message
        calls = tuple(_parse_call(c) for c in (msg.tool_calls or ()) if getattr(c, "function", None))
        return Message(role="assistant", text=msg.content or "", tool_calls=calls)

    async def aclose(self) -> None:
        await self._client.close()
