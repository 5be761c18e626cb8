"""What happens in the agent, as values: the transcript, the log and the terminal consume these."""

from __future__ import annotations

from typing import Protocol

import attrs

from asyncai_agent.thread import Message
from asyncai_watch import Notice, RenderedNotice

__all__ = [
    "AgentEvent",
    "InputReceived",
    "ModelMessage",
    "NoticeReceived",
    "ReplyChannel",
    "ReplyPublished",
    "ReplySuppressed",
    "RunCompleted",
    "RunFailed",
    "RunStarted",
    "ToolResult",
]


class ReplyChannel(Protocol):
    """Where a reply goes: the terminal, a chat channel, a test's list."""

    @property
    def name(self) -> str: ...

    async def send(self, text: str) -> None: ...


@attrs.frozen
class InputReceived:
    text: str
    channel: str


@attrs.frozen
class NoticeReceived:
    notice: Notice
    rendered: RenderedNotice


@attrs.frozen
class RunStarted:
    run_id: int
    channel: str
    claimed: int
    """How many inputs this run claimed (0 for a notice-only run)."""
    picked_up: int
    """How many messages (inputs and notices) this run is the first to see."""


@attrs.frozen
class ModelMessage:
    run_id: int
    message: Message


@attrs.frozen
class ToolResult:
    run_id: int
    call_id: str
    name: str
    code: str
    text: str
    ended_turn: bool = False


@attrs.frozen
class ReplyPublished:
    run_id: int
    channel: str
    text: str


@attrs.frozen
class ReplySuppressed:
    run_id: int
    channel: str
    text: str


@attrs.frozen
class RunFailed:
    run_id: int
    channel: str
    error: str


@attrs.frozen
class RunCompleted:
    run_id: int


AgentEvent = (
    InputReceived
    | NoticeReceived
    | RunStarted
    | ModelMessage
    | ToolResult
    | ReplyPublished
    | ReplySuppressed
    | RunFailed
    | RunCompleted
)
