"""Decode a large JSON text in bounded steps, so an event loop can run between them.

Pure: :func:`parse_in_steps` is a generator that yields (``None``) between steps and returns
the value, exactly what ``msgspec.json.decode`` returns for the whole text. The caller awaits a
checkpoint at each yield (``asyncai_watch.jsonrpc_framing`` does, for a huge stdio line).

Why: decoding is one C call holding the GIL. A 50 MB ``resources/read`` answer held the agent's
event loop about 60 ms in the decode alone, and turning its one big string into a Python ``str``
is most of that. Here no step does more than one msgspec scan of a value (which builds only
``msgspec.Raw`` slices of the next level: about 22 ms for 50 MB) or decodes more than about
``step`` bytes of it:

- an object or list larger than ``step`` is split into its members as raw JSON (one scan, which
  also validates the whole value), and each member is decoded the same way, small members a
  batch of about ``step`` bytes at a time;
- a string larger than ``step`` is decoded in pieces of about ``step`` bytes, each cut where no
  escape sequence, surrogate pair or UTF-8 sequence is split, and the pieces are joined;
- anything else, and anything nested deeper than :data:`MAX_LEVELS` large levels, is decoded
  whole.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Final

import msgspec

__all__ = ["MAX_LEVELS", "STEP", "parse_in_steps"]

STEP: Final = 1 << 20
"""About how many bytes of JSON one step decodes."""
MAX_LEVELS: Final = 8
"""Large containers nested deeper than this are decoded whole (each level re-scans its value)."""

_decode: Final = msgspec.json.Decoder().decode
_members: Final = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_items: Final = msgspec.json.Decoder(list[msgspec.Raw]).decode
_raw: Final = msgspec.json.Decoder(msgspec.Raw).decode
_WHITESPACE: Final = frozenset(b" \t\r\n")
_BACKSLASH, _QUOTE, _U = ord("\\"), ord('"'), ord("u")
_HEX: Final = frozenset(b"0123456789abcdefABCDEF")

Steps = Generator[None, None, Any]


def parse_in_steps(data: bytes | bytearray | memoryview, step: int = STEP) -> Steps:
    """The JSON value of ``data`` (UTF-8), as ``msgspec.json.decode`` gives it, in steps.

    Raises what msgspec raises for the whole text (``msgspec.DecodeError`` for text that is not
    JSON), at the first step.
    """
    if step < 16:
        raise ValueError(f"step must be at least 16 bytes, got {step}")
    buf = memoryview(data).cast("B")
    start, end = 0, len(buf)
    while start < end and buf[start] in _WHITESPACE:
        start += 1
    while end > start and buf[end - 1] in _WHITESPACE:
        end -= 1
    buf = buf[start:end]
    if len(buf) > step and buf[0] == _QUOTE:
        _raw(buf)  # a container's scan validates it; a string at the top is checked whole here
        yield
    return (yield from _value(buf, step, 0))


def _value(buf: memoryview, step: int, level: int) -> Steps:
    if len(buf) <= step or level >= MAX_LEVELS:
        return _decode(buf)
    first = buf[0]
    if first == ord("{"):
        members = _members(buf)
        yield
        out: dict[str, Any] = {}
        for key, raw in members.items():
            out[key] = yield from _value(memoryview(raw), step, level + 1)
        return out
    if first == ord("["):
        items = _items(buf)
        yield
        values: list[Any] = []
        batch = 0
        for raw in items:
            piece = memoryview(raw)
            if len(piece) > step:
                values.append((yield from _value(piece, step, level + 1)))
                continue
            values.append(_decode(piece))
            batch += len(piece)
            if batch >= step:
                batch = 0
                yield
        return values
    if first == _QUOTE:
        return (yield from _string(buf, step))
    return _decode(buf)  # a number this long: one call


def _string(buf: memoryview, step: int) -> Steps:
    """A valid JSON string token (quotes included) decoded piece by piece."""
    close = len(buf) - 1
    parts: list[str] = []
    start = 1
    while start < close:
        cut = close if close - start <= step else _safe_cut(buf, start + step, close)
        parts.append(_decode(b'"' + buf[start:cut].tobytes() + b'"'))
        start = cut
        yield
    return "".join(parts)


def _safe_cut(buf: memoryview, cut: int, close: int) -> int:
    """The first position at or after ``cut`` (before ``close``) that splits no escape sequence,
    surrogate-pair escape or UTF-8 sequence; ``close`` if there is none."""
    while cut < close and not _safe(buf, cut):
        cut += 1
    return cut


def _escaping(buf: memoryview, at: int) -> bool:
    """Whether the backslash at ``at`` starts an escape (an odd run of backslashes ends there)."""
    run = 0
    while at - run >= 1 and buf[at - run] == _BACKSLASH:
        run += 1
    return run % 2 == 1


def _safe(buf: memoryview, p: int) -> bool:
    if 0x80 <= buf[p] <= 0xBF:  # a UTF-8 continuation byte: inside a character
        return False
    if buf[p - 1] == _BACKSLASH and _escaping(buf, p - 1):  # right after an escaping backslash
        return False
    for s in range(max(1, p - 5), p - 1):  # inside a \uXXXX escape
        if buf[s] == _BACKSLASH and buf[s + 1] == _U and _escaping(buf, s):
            return False
    s = p - 6  # right after a \uD800-\uDBFF escape: a surrogate pair's first half
    return not (
        s >= 1
        and buf[s] == _BACKSLASH
        and buf[s + 1] == _U
        and buf[s + 2] in b"dD"
        and buf[s + 3] in b"89abAB"
        and all(c in _HEX for c in buf[s + 4 : s + 6])
        and _escaping(buf, s)
    )
