"""The complaint a 2025-era Python SDK server logs about our ``server/discover`` probe, dropped
from its stderr (pure: lines in, lines out).

Connecting probes with ``server/discover`` (MCP 2026-07-28) and falls back to ``initialize``.
A server on the Python SDK 1.x answers the probe correctly (an error), but first logs a warning
with the whole pydantic dump of why it is no request it knows: 94 lines from the SDK 1.30, on the stderr our
stdio servers share with us. That dump is noise the user can do nothing about, so
:class:`ProbeNoise` drops it; any other dump, and every other line, passes through unchanged.

A dump starts with ``Failed to validate request:``; its later lines are indented, or name a
field path with a dot (``CallToolRequest.params.name``). Its first line is held until a line says which request
it is about (``input_value='server/discover'``), so nothing but a dump's head waits, and only for
the next line or two.
"""

from __future__ import annotations

import re
from typing import Final, Literal

__all__ = ["ProbeNoise"]

_HEAD: Final = b"Failed to validate request:"
_FIELD: Final = re.compile(rb"^\w+(?:\.\w+|\[[^\]]*\])+\s*$")  # a field path: Model.field[0]
_PROBE: Final = b"input_value='server/discover'"
_ANY_INPUT: Final = b"input_value="


def _continues(line: bytes) -> bool:
    """Whether ``line`` is a later line of a pydantic dump."""
    return line[:1] in (b" ", b"\t") or _FIELD.match(line) is not None


class ProbeNoise:
    """Feed a server's stderr line by line (each ending in ``\\n``, or the last without);
    forward what comes out."""

    def __init__(self) -> None:
        self._state: Literal["pass", "held", "dropping"] = "pass"
        self._held: list[bytes] = []
        self.dropped = 0
        """Lines dropped so far."""

    def feed(self, line: bytes) -> list[bytes]:
        if self._state == "dropping":
            if _continues(line):
                self.dropped += 1
                return []
            self._state = "pass"
        elif self._state == "held":
            if not _continues(line):
                return self._release() + self.feed(line)
            if _PROBE in line:
                self.dropped += len(self._held) + 1
                self._held = []
                self._state = "dropping"
                return []
            self._held.append(line)
            return self._release() if _ANY_INPUT in line else []
        if line.startswith(_HEAD):
            self._held = [line]
            self._state = "held"
            return []
        return [line]

    def end(self) -> list[bytes]:
        """The stream ended: whatever is still held."""
        return self._release()

    def _release(self) -> list[bytes]:
        held, self._held = self._held, []
        self._state = "pass"
        return held
