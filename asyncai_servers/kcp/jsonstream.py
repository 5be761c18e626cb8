"""Incremental parser for concatenated JSON documents (sans-IO).

``kubectl get --raw '...?watch=true'`` copies the API server's watch events, one
compact JSON object after another (``kubectl get -w -o json`` prints them
indented over many lines); nothing frames them. Pipe reads split that output
anywhere, including inside a UTF-8 multibyte sequence or a string escape, so
this parser takes bytes, decodes them incrementally, tracks brace depth outside
strings to find each document's end, and only then hands the complete text to
the JSON decoder.

The fast path: between documents, each whole line is first handed to msgspec as
it is. The API server's encoder writes one compact document per line, and a
container that parses completely from a document boundary to the end of its
line is exactly the document the scanner would have found (a JSON value's end
is fixed by its start). Only a line that is not one complete document (an
indented ``-o json`` document, two documents on one line) and the unfinished
tail of a read go through the character scanner, which costs about ten times
more per byte in Python. msgspec is about five times faster than :mod:`json`;
what it refuses (integers beyond 64 bits, NaN) is decoded by :mod:`json`.
"""

from __future__ import annotations

import codecs
import json
import re
from typing import Any, Final

import msgspec

__all__ = ["JsonStreamError", "JsonStreamParser"]

# Inside a document only these characters change the scanner state.
_STRUCT: Final = re.compile(r'[{}\[\]"]')
_IN_STRING: Final = re.compile(r'["\\]')


class JsonStreamError(ValueError):
    """The stream is not a sequence of JSON objects/arrays."""


def _loads(text: str) -> Any:
    try:
        return msgspec.json.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return json.loads(text)  # what msgspec refuses but JSON allows (NaN, 1e400); else the error


class JsonStreamParser:
    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="strict")
        self._buf = ""
        self._pos = 0  # scan position in _buf
        self._start: int | None = None  # where the current document began
        self._depth = 0
        self._in_string = False
        self._escape = False

    @property
    def pending(self) -> bool:
        """True when an unfinished document (or undecoded bytes) is buffered."""
        return (
            self._start is not None
            or bool(self._buf[self._pos :].strip())
            or self._decoder.getstate()[0] != b""
        )

    def feed(self, data: bytes) -> list[Any]:
        """Add ``data`` and return every document it completed, in order."""
        try:
            self._buf += self._decoder.decode(data)
        except UnicodeDecodeError as exc:
            raise JsonStreamError(f"kubectl output is not UTF-8: {exc}") from exc
        out: list[Any] = []
        buf = self._buf
        pos = self._pos
        n = len(buf)
        while pos < n:
            if self._start is None:
                # Between documents: whole lines that are one document each, then the scanner.
                pos = _whole_lines(buf, pos, out)
                while pos < n and buf[pos] in " \t\r\n":
                    pos += 1
                if pos >= n:
                    break
                if buf[pos] not in "{[":
                    snippet = buf[pos : pos + 40]
                    raise JsonStreamError(f"expected a JSON object or array, got {snippet!r}")
                self._start = pos
                self._depth = 1
                pos += 1
                continue
            if self._in_string:
                if self._escape:
                    self._escape = False
                    pos += 1
                    continue
                m = _IN_STRING.search(buf, pos)
                if m is None:
                    pos = n
                    break
                pos = m.end()
                if m.group() == "\\":
                    self._escape = True
                else:
                    self._in_string = False
                continue
            m = _STRUCT.search(buf, pos)
            if m is None:
                pos = n
                break
            pos = m.end()
            ch = m.group()
            if ch == '"':
                self._in_string = True
            elif ch in "{[":
                self._depth += 1
            else:
                self._depth -= 1
                if self._depth == 0:
                    text = buf[self._start : pos]
                    self._start = None
                    try:
                        out.append(_loads(text))
                    except (json.JSONDecodeError, RecursionError) as exc:
                        raise JsonStreamError(f"malformed JSON document in kubectl output: {exc}") from exc
        # Drop consumed text so the buffer holds at most one partial document.
        cut = self._start if self._start is not None else pos
        self._buf = buf[cut:]
        self._pos = pos - cut
        if self._start is not None:
            self._start = 0
        return out


def _whole_lines(buf: str, pos: int, out: list[Any]) -> int:
    """From a document boundary at ``pos``, decode each following line that is one whole JSON
    object or array into ``out``; return where the first other line (or the unfinished tail) starts."""
    loads = msgspec.json.decode
    find = buf.find
    while True:
        nl = find("\n", pos)
        if nl < 0:
            return pos
        try:
            doc = loads(buf[pos:nl])
        except (msgspec.DecodeError, RecursionError):
            if buf[pos:nl].isspace() or pos == nl:
                pos = nl + 1
                continue
            return pos
        if type(doc) is not dict and type(doc) is not list:
            return pos  # the scanner names the problem
        out.append(doc)
        pos = nl + 1
