"""The model backend interface: one call, the whole thread in, one assistant message out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Protocol

from asyncai_agent.thread import Message, ToolSpec

__all__ = ["MAX_TOKENS", "TIMEOUT_SECONDS", "Backend", "BackendError"]

MAX_TOKENS: Final = 8192
"""Output cap per request: an uncapped local model once decoded 71 486 tokens (seen in a live run)."""
TIMEOUT_SECONDS: Final = 600.0


class BackendError(Exception):
    """The model could not answer (bad configuration, HTTP error, malformed response).

    The message is shown to the user as is, so it names the backend and what failed.
    """


class Backend(Protocol):
    @property
    def name(self) -> str:
        """``openai:MODEL``, ``anthropic:MODEL`` or ``scripted:FILE``."""
        ...

    async def complete(
        self, *, system: str, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> Message:
        """Return the assistant's next message (text and/or tool calls). Raises BackendError."""
        ...

    async def aclose(self) -> None: ...
