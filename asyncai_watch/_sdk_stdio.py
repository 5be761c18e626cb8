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
its reader looks up for that.

Each line is then parsed by the SDK's ``_parse_line``: pydantic's ``validate_json`` of the whole
JSON-RPC message, on the event loop, holding the GIL throughout. For a large message that is
slow: 340 ms for a 50 MB ``resources/read`` answer (the large-body bench's whole remaining
stall). :func:`parse_line` decodes a line longer than :data:`LARGE_LINE` with msgspec instead
(2-3x faster on such a message, mostly one long string) and validates the decoded value with the
same pydantic model (``validate_python``: the message types are strings, numbers and dicts, so
the model is the same, ``tests/test_mcp_source.py``); shorter lines, and any line msgspec
refuses, take the SDK's own path unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import anyio
import mcp.client.stdio as _sdk_stdio
import msgspec
from anyio.streams.text import TextReceiveStream
from mcp import types
from mcp.shared.message import SessionMessage

__all__ = ["LARGE_LINE", "WholeLines", "install", "parse_line"]

_NAME: Final = "TextReceiveStream"
_ORIGINAL: Final = vars(_sdk_stdio)[_NAME]
_PARSE: Final = "_parse_line"
_SDK_PARSE: Final[Callable[[str], Any]] = vars(_sdk_stdio)[_PARSE]
LARGE_LINE: Final = 1 << 20
"""Lines longer than this (characters) are decoded by msgspec before the SDK's model sees them."""
_decode: Final = msgspec.json.Decoder().decode


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


def parse_line(line: str) -> Any:
    """The SDK's ``_parse_line`` (a ``SessionMessage``, or the error as a value), faster for a
    line longer than :data:`LARGE_LINE`."""
    if len(line) > LARGE_LINE:
        try:
            message = types.jsonrpc_message_adapter.validate_python(_decode(line), by_name=False)
        except (msgspec.DecodeError, RecursionError, ValueError):
            pass  # not plain JSON to msgspec, or not a message: the SDK's path says what is wrong
        else:
            return SessionMessage(message)
    return _SDK_PARSE(line)


def install() -> None:
    """Make the SDK's stdio client read with :class:`WholeLines` and parse with
    :func:`parse_line` (idempotent)."""
    namespace = vars(_sdk_stdio)
    if namespace[_NAME] is _ORIGINAL:
        namespace[_NAME] = WholeLines
    if namespace[_PARSE] is _SDK_PARSE:
        namespace[_PARSE] = parse_line
