"""The ``mcp`` SDK's stdio client, reading lines linearly and large ones off the event loop.

Installed on import (:func:`install`); the SDK's own reader loop stays, with two of its names
replaced.

**Lines.** The SDK's ``stdio_client`` (mcp 2.3, ``mcp/client/stdio.py``) splits the server's
stdout into lines with ``lines = (buffer + chunk).split("\\n")`` per chunk of at most 64 KiB.
For a message longer than a chunk, every chunk copies (and scans) all of the line received so
far: quadratic in the message size, on the event loop (a 50 MB ``resources/read`` answer cost
22 s of CPU). Its ``TextReceiveStream`` (the one name the loop looks up for that) is replaced:
for UTF-8, the SDK's default, by :class:`LineChunks`, which splits lines as bytes and hands the
loop chunks of whole lines; for any other encoding by :class:`WholeLines`, which joins a long
line's text once.

**Large lines.** The SDK parses each line with pydantic's ``validate_json`` of the whole
JSON-RPC message: one call holding the GIL, 340 ms for a 50 MB answer. :class:`LineChunks`
decodes a line longer than :data:`LARGE_LINE` itself, in steps with the event loop running
between them (``asyncai_watch.mcp._stepped_json``: no step holds it much more than 20 ms, where the
line's text alone took 60 ms to decode and 90 ms to join and split), validates the value with the
SDK's own model (``validate_python``), and hands the loop a one-line token for it, which
:func:`parse_line` (the SDK's replaced ``_parse_line``) exchanges for the message. A large line
that is not JSON, or not a message, gets the SDK's own parse and error. :func:`parse_line`
also decodes a large line it is given as text (the :class:`WholeLines` path) with msgspec, 2-3x
faster than ``validate_json`` on such a message.
"""

from __future__ import annotations

import codecs
import itertools
from collections.abc import Callable
from typing import Any, Final

import anyio
import anyio.lowlevel
import mcp.client.stdio as _sdk_stdio
import msgspec
from anyio.abc import ByteReceiveStream, ObjectReceiveStream
from anyio.streams.text import TextReceiveStream
from mcp import types
from mcp.shared.message import SessionMessage

from asyncai_watch.mcp._stepped_json import parse_in_steps

__all__ = ["LARGE_LINE", "LineChunks", "WholeLines", "install", "parse_line"]

_NAME: Final = "TextReceiveStream"
_ORIGINAL: Final = vars(_sdk_stdio)[_NAME]
_PARSE: Final = "_parse_line"
_SDK_PARSE: Final[Callable[[str], Any]] = vars(_sdk_stdio)[_PARSE]
LARGE_LINE: Final = 1 << 20
"""Lines longer than this (bytes in :class:`LineChunks`, characters in :func:`parse_line`) are
decoded by msgspec, not by the SDK's ``validate_json``."""
_decode: Final = msgspec.json.Decoder().decode
_TOKEN: Final = "\x00asyncai-large-line "  # never the start of a JSON-RPC line (JSON has no NUL)
_decoded: dict[str, SessionMessage | Exception] = {}  # token -> the large line's parse
_tokens = itertools.count(1)
_KEEP: Final = 64  # tokens a cancelled reader never handed on: the oldest are dropped beyond this


def text_stream(
    transport: ByteReceiveStream, encoding: str = "utf-8", errors: str = "strict"
) -> ObjectReceiveStream[str]:
    """What the SDK's reader gets in place of ``TextReceiveStream(transport, encoding, errors)``."""
    if codecs.lookup(encoding).name == "utf-8":
        return LineChunks(transport, errors=errors)
    return WholeLines(transport, encoding=encoding, errors=errors)


class LineChunks(ObjectReceiveStream[str]):
    """The UTF-8 text of a byte stream in chunks of whole lines (the unterminated tail last).

    Lines are found as bytes (a UTF-8 newline byte is always a newline), so a line's bytes are
    copied once as they arrive and decoded once. A line longer than :data:`LARGE_LINE` is parsed
    here, off the loop's critical path (see the module), and comes out as a token line.
    """

    def __init__(self, transport: ByteReceiveStream, *, errors: str = "strict") -> None:
        self._transport = transport
        self._errors = errors
        self._line = bytearray()  # the current line's bytes so far
        self._ended = False

    async def receive(self) -> str:
        if self._ended:
            raise anyio.EndOfStream
        while True:
            try:
                chunk = await self._transport.receive()
            except anyio.EndOfStream:
                self._ended = True
                if not self._line:
                    raise
                tail, self._line = self._line, bytearray()
                return tail.decode("utf-8", self._errors)  # the SDK's loop keeps it, as its own would
            last = chunk.rfind(b"\n")
            if last == len(chunk) - 1 and not self._line and last <= LARGE_LINE:
                return chunk.decode("utf-8", self._errors)  # the usual read: whole small lines
            if last < 0:
                self._line += chunk
                continue
            view = memoryview(chunk)
            if len(self._line) + last <= LARGE_LINE:  # no line here can be large: one decode
                self._line += view[: last + 1]
                text = self._line.decode("utf-8", self._errors)
            else:
                text = await self._lines_with_large(chunk, view, last)
            self._line = bytearray(view[last + 1 :])
            return text

    async def _lines_with_large(self, chunk: bytes, view: memoryview, last: int) -> str:
        """The text of ``chunk``'s lines up to ``last`` (its last newline), each large one as a token."""
        parts: list[str] = []
        small = bytearray()  # whole small lines not yet decoded
        start = 0
        while start <= last:
            end = chunk.index(b"\n", start)
            if len(self._line) + end - start > LARGE_LINE:
                self._line += view[start:end]
                line, self._line = self._line, bytearray()
                if small:
                    parts.append(small.decode("utf-8", self._errors))
                    small = bytearray()
                parts.append(await _parse_large(line, self._errors) + "\n")
            else:
                small += self._line
                small += view[start : end + 1]
                self._line = bytearray()
            start = end + 1
        if small:
            parts.append(small.decode("utf-8", self._errors))
        return "".join(parts)

    async def aclose(self) -> None:
        await self._transport.aclose()


async def _parse_large(line: bytearray, errors: str) -> str:
    """Parse a large line in steps; the token :func:`parse_line` exchanges for the result."""
    result: SessionMessage | Exception
    try:
        steps = parse_in_steps(line)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                value = done.value
                break
            await anyio.lowlevel.checkpoint()
        result = SessionMessage(types.jsonrpc_message_adapter.validate_python(value, by_name=False))
    except (msgspec.DecodeError, RecursionError, ValueError):
        # Not JSON to msgspec, or not a message: the SDK's own parse says what is wrong.
        result = _SDK_PARSE(line.decode("utf-8", errors))
    token = f"{_TOKEN}{next(_tokens)}"
    _decoded[token] = result
    while len(_decoded) > _KEEP:
        del _decoded[next(iter(_decoded))]
    return token


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
    """The SDK's ``_parse_line`` (a ``SessionMessage``, or the error as a value): a token from
    :class:`LineChunks` gives the message parsed for it; a line longer than :data:`LARGE_LINE`
    is decoded by msgspec."""
    if line.startswith(_TOKEN):
        found = _decoded.pop(line, None)
        if found is not None:
            return found
    elif len(line) > LARGE_LINE:
        try:
            message = types.jsonrpc_message_adapter.validate_python(_decode(line), by_name=False)
        except (msgspec.DecodeError, RecursionError, ValueError):
            pass  # not plain JSON to msgspec, or not a message: the SDK's path says what is wrong
        else:
            return SessionMessage(message)
    return _SDK_PARSE(line)


def install() -> None:
    """Make the SDK's stdio client read with :func:`text_stream` and parse with
    :func:`parse_line` (idempotent)."""
    namespace = vars(_sdk_stdio)
    if namespace[_NAME] is _ORIGINAL:
        namespace[_NAME] = text_stream
    if namespace[_PARSE] is _SDK_PARSE:
        namespace[_PARSE] = parse_line
