"""JSON-RPC framing on MCP's stdio wire: one message per newline-terminated line, read linearly.

Shared by our client (:mod:`asyncai_watch.mcp.stdio`) and our servers (:mod:`asyncai_watch.server.stdio`),
so it sits a floor below both. (Not to be confused with notice lines, :mod:`asyncai_watch.core.lines`:
here a "line" is one framed JSON-RPC message.)

:class:`LineReader` splits a byte stream into lines as bytes: each chunk is searched once for
newlines, and a line longer than a chunk grows in one buffer, so every byte is copied once.
(The SDK's stdio reader, ``(buffer + chunk).split("\\n")`` per chunk of at most 64 KiB, copies
the whole partial line again for every chunk: quadratic in the line's length. A 50 MB
request took 78 s to read that way, and a 50 MB answer 22 s of CPU.)

:func:`read_message` turns one line into a ``SessionMessage`` with the SDK's own model. A line
up to :data:`LARGE_LINE` is parsed by the SDK's ``validate_json`` (one call, short). A longer
one is decoded in steps with the event loop running between them
(:mod:`asyncai_watch._stepped_json`: no step holds the loop much more than 20 ms, where one
decode of a 50 MB line held it 130 ms), then validated by the same model (``validate_python``).
A line the stepped decode refuses gets the SDK's own parse, so the two paths accept exactly
the same lines.

A line that is not a message comes back as a :class:`MessageError` saying which JSON-RPC error
it is (-32700 for text that is not JSON, or nested too deep to parse; -32600 for JSON that is
not a JSON-RPC message) and the request id, when one can be read from the line: a server
answers it with that error instead of leaving the request unanswered.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Final

import anyio
import anyio.lowlevel
import attrs
import msgspec
from anyio.abc import ByteReceiveStream
from mcp.shared.message import SessionMessage
from mcp_types import INVALID_REQUEST, PARSE_ERROR, jsonrpc_message_adapter
from pydantic import ValidationError

from asyncai_watch._stepped_json import parse_in_steps

__all__ = [
    "LARGE_LINE",
    "LineReader",
    "MessageError",
    "Overlong",
    "encode_message",
    "error_line",
    "is_blank",
    "next_message",
    "read_message",
]

LARGE_LINE: Final = 1 << 20
"""Lines longer than this (bytes) are decoded in steps (see the module)."""

_ID_SCAN: Final = 1 << 20
"""How far into a line that is not valid JSON the request id is looked for."""


_HEAD: Final = 64 << 10
"""Bytes of an over-long line kept to find its request id (the id usually comes first)."""
_TAIL: Final = 256
"""Bytes kept of an over-long line's end, for an id written last (the TypeScript SDK's order)."""


@attrs.frozen
class Overlong:
    """A line longer than the reader's ``max_line``: its size, and the bytes kept to find its id.

    Only :data:`_HEAD` bytes of its start and :data:`_TAIL` of its end are kept; the rest was
    dropped as it came, so a 1 GiB line costs no more memory than a short one."""

    size: int
    head: bytes
    tail: bytes

    def request_id(self) -> int | str | None:
        """The id of the response this line was, when the kept bytes show it."""
        found = _request_id(self.head)
        if found is not None:
            return found
        last = _LAST_ID.search(self.tail)
        if last is None:
            return None
        try:
            value: int | str = _decode_scalar(last.group(1))
        except msgspec.DecodeError:
            return None
        return value


class LineReader:
    """The lines of a byte stream, without their newlines; the unterminated tail last.

    With ``max_line`` (bytes), a line longer than that comes out as an :class:`Overlong`
    instead, its bytes dropped as they arrive (see :class:`Overlong`), and the lines after it
    as usual. :meth:`receive` raises ``anyio.EndOfStream`` once the stream has ended and every
    line was handed out.
    """

    def __init__(self, stream: ByteReceiveStream, *, max_line: int | None = None) -> None:
        self._stream = stream
        self._max = max_line
        self._lines: deque[bytes | bytearray | Overlong] = deque()
        self._partial = bytearray()  # the current line's bytes so far
        self._skipping: _Skipping | None = None  # the current line, once it is too long
        self._ended = False

    async def receive(self) -> bytes | bytearray | Overlong:
        while not self._lines:
            if self._ended:
                raise anyio.EndOfStream
            try:
                chunk = await self._stream.receive()
            except anyio.EndOfStream:
                self._ended = True
                if self._skipping is not None:
                    self._lines.append(self._skipping.done())
                    self._skipping = None
                elif self._partial:  # a last line without its newline is still a line
                    self._lines.append(self._partial)
                    self._partial = bytearray()
                continue
            self._take(chunk)
        return self._lines.popleft()

    def _take(self, chunk: bytes) -> None:
        first = chunk.find(b"\n")
        if self._skipping is not None:
            if first < 0:
                self._skipping.add(chunk)
                return
            self._skipping.add(memoryview(chunk)[:first])
            self._lines.append(self._skipping.done())
            self._skipping = None
            self._take(chunk[first + 1 :])
            return
        if first < 0:
            self._partial += chunk
            self._check_partial()
            return
        if self._partial:
            self._partial += memoryview(chunk)[:first]
            self._append(self._partial)
        else:
            self._append(chunk[:first])
        last = chunk.rfind(b"\n")
        if last > first:
            for line in chunk[first + 1 : last].split(b"\n"):
                self._append(line)
        self._partial = bytearray(memoryview(chunk)[last + 1 :])
        self._check_partial()

    def _append(self, line: bytes | bytearray) -> None:
        if self._max is not None and len(line) > self._max:
            skipping = _Skipping(bytes(line[:_HEAD]))
            skipping.add(memoryview(line)[_HEAD:])
            self._lines.append(skipping.done())
        else:
            self._lines.append(line)

    def _check_partial(self) -> None:
        if self._max is not None and len(self._partial) > self._max:
            self._skipping = _Skipping(bytes(self._partial[:_HEAD]))
            self._skipping.add(memoryview(self._partial)[_HEAD:])
            self._partial = bytearray()


class _Skipping:
    """The bytes kept of a line that is too long, while the rest of it goes by."""

    def __init__(self, head: bytes) -> None:
        self.head = head
        self.size = len(head)
        self.tail = head[-_TAIL:]

    def add(self, data: bytes | bytearray | memoryview) -> None:
        if not len(data):
            return
        self.size += len(data)
        self.tail = (self.tail + bytes(data[-_TAIL:]))[-_TAIL:]

    def done(self) -> Overlong:
        return Overlong(self.size, self.head, self.tail)


def is_blank(line: bytes | bytearray) -> bool:
    """A line with nothing to parse (a bare newline, or CRLF's leftover ``\\r``)."""
    return not line or line.isspace()


class MessageError(ValueError):
    """A line that is not a JSON-RPC message: the error code, the message, the request id if readable."""

    def __init__(self, code: int, message: str, request_id: int | str | None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id


async def next_message(lines: LineReader) -> SessionMessage | MessageError | Overlong | None:
    """The next non-blank line's message (or what is wrong with it; an :class:`Overlong` when the
    reader has a ``max_line``); ``None`` once the stream has ended. Both stdio ends, client and
    server, read through this."""
    while True:
        try:
            line = await lines.receive()
        except anyio.EndOfStream:
            return None
        if isinstance(line, Overlong):
            return line
        if not is_blank(line):
            return await read_message(line)


async def read_message(line: bytes | bytearray) -> SessionMessage | MessageError:
    """The message on ``line`` (see the module), or what is wrong with it."""
    if len(line) <= LARGE_LINE:
        return _validate_json(line)
    try:
        steps = parse_in_steps(line)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                value = done.value
                break
            await anyio.lowlevel.checkpoint()
    except (msgspec.DecodeError, RecursionError):
        return _validate_json(line)  # the SDK's parse decides, and says what is wrong
    try:
        return SessionMessage(jsonrpc_message_adapter.validate_python(value, by_name=False))
    except ValidationError:
        return MessageError(INVALID_REQUEST, _INVALID, _request_id(line))


_INVALID: Final = (
    "Invalid Request: not a JSON-RPC 2.0 message (an object with jsonrpc '2.0' and a method, "
    "or a result or error with an id)"
)


def _validate_json(line: bytes | bytearray) -> SessionMessage | MessageError:
    try:
        return SessionMessage(jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        json_errors = [e["msg"] for e in errors if e["type"] == "json_invalid"]
        if json_errors:  # not JSON (or too deep to parse): the parser's reason, with its position
            return MessageError(PARSE_ERROR, f"Parse error: {json_errors[0]}", _request_id(line))
        return MessageError(INVALID_REQUEST, _INVALID, _request_id(line))


class _Id(msgspec.Struct):
    id: int | str | None = None


_decode_id: Final = msgspec.json.Decoder(_Id).decode
_TOKEN: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')
_OPEN: Final = re.compile(rb"\s*\{")
_ID_VALUE: Final = re.compile(rb'\s*:\s*(-?(?:0|[1-9][0-9]*)(?![0-9.eE])|"[^"\\]*(?:\\.[^"\\]*)*")')
_decode_scalar: Final = msgspec.json.Decoder(int | str).decode
# The id as the last member of the line's object (its end is all an over-long line keeps).
_LAST_ID: Final = re.compile(rb'"id"\s*:\s*(-?(?:0|[1-9][0-9]*)|"[^"\\]*")\s*\}\s*$')


def _request_id(line: bytes | bytearray) -> int | str | None:
    """The ``id`` member of the object on ``line``, if one can be read; ``None`` otherwise."""
    try:
        return _decode_id(line).id
    except (msgspec.DecodeError, RecursionError):
        pass  # not valid JSON (or too deep), or not an object with a string or integer id
    # Scan the top level of the object for "id": strings are skipped whole, brackets counted,
    # so a nested "id" or one inside a string is never taken for it.
    opened = _OPEN.match(line)
    if opened is None:
        return None
    depth = 0
    for token in _TOKEN.finditer(line, opened.end(), min(len(line), _ID_SCAN)):
        first = line[token.start()]
        if first == 0x22:  # '"': a key or a string value
            if (
                depth == 0
                and token.end() - token.start() == 4
                and line[token.start() : token.end()] == b'"id"'
            ):
                value = _ID_VALUE.match(line, token.end())
                if value is None:
                    return None  # an id that is neither a string nor an integer
                try:
                    found: int | str = _decode_scalar(value.group(1))
                except msgspec.DecodeError:  # e.g. an integer msgspec cannot hold
                    return None
                return found
            continue
        depth += 1 if first in b"[{" else -1
        if depth < 0:  # the object closed without an id
            return None
    return None


def error_line(error: MessageError) -> bytes:
    """The JSON-RPC error response to a line that was not a message, newline included."""
    response = {
        "jsonrpc": "2.0",
        "id": error.request_id,
        "error": {"code": error.code, "message": error.message},
    }
    return msgspec.json.encode(response) + b"\n"


def encode_message(message: SessionMessage) -> bytes:
    """One message as a line of the wire (what the SDK writes, as bytes), newline included."""
    data: bytes = jsonrpc_message_adapter.dump_json(message.message, by_alias=True, exclude_unset=True)
    return data + b"\n"
