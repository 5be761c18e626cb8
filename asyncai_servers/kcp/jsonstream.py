"""Incremental parser for concatenated JSON documents (sans-IO).

``kubectl get --raw '...?watch=true'`` copies the API server's watch events, one
compact JSON object after another (``kubectl get -w -o json`` prints them
indented over many lines); nothing frames them. Pipe reads split that output
anywhere, including inside a UTF-8 multibyte sequence or a string escape, so
this parser takes bytes, decodes them incrementally, tracks brace depth outside
strings to find each document's end, and only then hands the complete text to
:func:`json.loads`.
"""

from __future__ import annotations

import codecs
import json
import re
from typing import Any, Final

__all__ = ["JsonStreamError", "JsonStreamParser"]

# Inside a document only these characters change the scanner state.
_STRUCT: Final = re.compile(r'[{}\[\]"]')
_IN_STRING: Final = re.compile(r'["\\]')


class JsonStreamError(ValueError):
    """The stream is not a sequence of JSON objects/arrays."""


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
                # Between documents: skip whitespace, then expect { or [.
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
                        out.append(json.loads(text))
                    except json.JSONDecodeError as exc:
                        raise JsonStreamError(f"malformed JSON document in kubectl output: {exc}") from exc
        # Drop consumed text so the buffer holds at most one partial document.
        cut = self._start if self._start is not None else pos
        self._buf = buf[cut:]
        self._pos = pos - cut
        if self._start is not None:
            self._start = 0
        return out
