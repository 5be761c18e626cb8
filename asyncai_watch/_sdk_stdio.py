"""A linear line reader for the ``mcp`` SDK's stdio client (a workaround, installed on import).

The SDK's ``stdio_client`` (mcp 2.3, ``mcp/client/stdio.py``) splits the server's stdout into
lines with ``lines = (buffer + chunk).split("\\n")`` per chunk of at most 64 KiB. For a message
longer than a chunk, every chunk copies (and scans) all of the line received so far: quadratic
in the message size, on the event loop. A 50 MB ``resources/read`` answer cost 22 s of CPU there,
during which every other watch waited between chunks.

:class:`WholeLines` hands the SDK's loop chunks that each hold a newline (the last may be the
stream's unterminated tail): a long line's pieces are joined once, and ``buffer`` only ever
holds what followed the last newline of one raw chunk. Linear, and the same text in the same
order. It replaces the SDK module's ``TextReceiveStream`` name, the one thing
its reader looks up; nothing else in the SDK changes.
"""

from __future__ import annotations

from typing import Final

import anyio
import mcp.client.stdio as _sdk_stdio
from anyio.streams.text import TextReceiveStream

__all__ = ["WholeLines", "install"]

_NAME: Final = "TextReceiveStream"
_ORIGINAL: Final = vars(_sdk_stdio)[_NAME]


class WholeLines(TextReceiveStream):
    """A :class:`~anyio.streams.text.TextReceiveStream` whose every chunk holds a newline."""

    _ended = False

    async def receive(self) -> str:
        if self._ended:
            raise anyio.EndOfStream
        parts = [await super().receive()]
        while "\n" not in parts[-1]:
            try:
                parts.append(await super().receive())
            except anyio.EndOfStream:
                self._ended = True  # hand over the unterminated tail first, as the SDK's loop would
                break
        return "".join(parts)


def install() -> None:
    """Make the SDK's stdio client read with :class:`WholeLines` (idempotent)."""
    namespace = vars(_sdk_stdio)
    if namespace[_NAME] is _ORIGINAL:
        namespace[_NAME] = WholeLines
