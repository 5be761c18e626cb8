"""JSON text in and out: one parser and one compact encoder for the whole library.

Pure. :func:`parse_json` uses msgspec's decoder: it parses several times faster than the
standard library and, unlike orjson, keeps integers beyond 64 bits exact (a resource with
big numeric ids must not see two different ids as equal). What msgspec refuses but
JSON-in-the-wild contains (``NaN``, ``Infinity``, numbers beyond a double) falls back to the
standard library, so every body the stdlib accepted is still accepted. A body nested deeper
than :data:`MAX_DEPTH` is refused with :class:`JsonError`, never a ``RecursionError``.

Pure: it never touches the garbage collector (the shell pauses it around a large read,
:mod:`asyncai_watch.runtime.gcpause`).

:func:`compact_json` is the one compact text form of a value (identity keys of items
without an id, display of objects in notice lines, filter results): no spaces, UTF-8
unescaped, keys in the value's own order or sorted.
"""

from __future__ import annotations

import json
from typing import Any, Final

import msgspec

__all__ = ["MAX_DEPTH", "JsonError", "compact_json", "parse_json"]

MAX_DEPTH: Final = 512
"""The deepest nesting :func:`parse_json` accepts (lists and objects)."""

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder(enc_hook=str).encode
_encode_sorted = msgspec.json.Encoder(enc_hook=str, order="sorted").encode


class JsonError(ValueError):
    """A text that is not JSON, or is nested too deep; the message says which and where."""


def _too_deep(text: str) -> bool:
    """Whether ``text`` nests lists/objects deeper than :data:`MAX_DEPTH` (strings skipped)."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:  # cheap: only many brackets can be too deep
        return False
    depth = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return True
        elif ch in "]}":
            depth -= 1
    return False


def parse_json(text: str | bytes | bytearray) -> Any:
    """The JSON value of ``text``; raises :class:`JsonError` saying what is wrong."""
    try:
        return _decode(text)
    except (msgspec.DecodeError, RecursionError) as fast_error:
        if _too_deep(text if isinstance(text, str) else bytes(text).decode("utf-8", "replace")):
            raise JsonError(f"JSON nested deeper than {MAX_DEPTH} levels") from None
        try:
            # NaN / Infinity / 1e400, which the stdlib accepts and msgspec does not.
            return json.loads(text)
        except (ValueError, RecursionError):
            raise JsonError(str(fast_error)) from None


def compact_json(value: Any, *, sort_keys: bool = False) -> str:
    """``value`` as compact JSON text (non-JSON values via ``str``); keys sorted on request."""
    try:
        return (_encode_sorted if sort_keys else _encode)(value).decode()
    except (TypeError, ValueError, OverflowError):
        # Keys that are not all strings (a parsed body never has them; a filter's value may):
        # JSON object keys are strings, so stringify them and encode again.
        return (_encode_sorted if sort_keys else _encode)(_str_keys(value)).decode()


def _str_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _str_keys(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_str_keys(v) for v in value]
    return value
