"""The conversation as the agent keeps it: backend-neutral messages.

Each backend translates these to its wire shape. A tool result is its own
``tool`` message that answers one ``ToolCall`` by id, which both the OpenAI
and the Anthropic shapes can express.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs

__all__ = ["Message", "Role", "ToolCall", "ToolSpec"]

Role = Literal["user", "assistant", "tool"]


@attrs.frozen(kw_only=True)
class ToolCall:
    id: str
    name: str
    arguments: Mapping[str, Any] = attrs.field(factory=dict, hash=False)
    invalid_arguments: str | None = None
    """Set when the model sent arguments that are not a JSON object: the raw text."""


@attrs.frozen(kw_only=True)
class Message:
    role: Role
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    """For ``role == "tool"``: the call this result answers."""


@attrs.frozen(kw_only=True)
class ToolSpec:
    """A tool as offered to the model: name, description, JSON Schema of its arguments."""

    name: str
    description: str
    parameters: Mapping[str, Any] = attrs.field(hash=False)
