"""The parent <-> worker protocol: one compact JSON array per line (ASCII JSON).

Parent -> worker:
  ["init", source, filename, names]       compile, fresh scope; -> ["ok"] | ["err", message, type]
  ["run", events, timeout]                 -> ["s"] (the batch is read and starting), then one
                                              ["o", line, error, error_type] per event
  ["ret", call_id, ok, value_or_message]   the answer to a worker's ["call", ...]
  ["ret", call_id, false, message, "timeout"]  the event's time ran out during the call
  ["probe"]                                -> ["probe", {...}] (environment/limits, for tests)
Worker -> parent, besides the replies:
  ["call", call_id, name, kwargs]          a catalog call from the running filter
  ["fatal", message]                       the worker cannot go on (then it exits)
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii as _quote
from typing import Any, Final

import attrs

MAX_LINE_BYTES: Final = 16 * 1024 * 1024
"""Largest protocol line the parent accepts from a worker; beyond it the worker is killed."""

MAX_CALL_DEPTH: Final = 100
"""How deeply a catalog call's arguments, and its answer, may nest (lists and dicts). JSON
work recurses once per level, so data nested near Python's recursion limit would fail on the
side with the deeper stack; this bound holds on both sides, whatever their stacks."""

DECODE_ERRORS: Final = (ValueError, RecursionError)
"""What :func:`decode` raises for a line that is not JSON, or is nested too deeply to read."""

ENCODE_ERRORS: Final = (ValueError, TypeError, RecursionError)
"""What :func:`encode` raises for a value nested too deeply (or cyclic) to write."""

# ASCII on the wire, so any str (even a lone surrogate) survives the round trip.
_wire_dumps = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), default=lambda o: _plain(o)).encode
_line_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=lambda o: _plain(o)).encode


def _plain(obj: Any) -> Any:
    if attrs.has(type(obj)):
        return attrs.asdict(obj, recurse=True)
    if isinstance(obj, set | frozenset | tuple):
        return list(obj)
    if isinstance(obj, bytes):
        return obj.decode("utf-8", "replace")
    return str(obj)


STARTED: Final = b'["s"]\n'
"""Sent (and flushed) by the worker as it starts a batch: a worker that dies before it sends
this ran none of the batch, so the batch is run again on a new worker instead of reported."""


def encode(message: Any) -> bytes:
    """One protocol line. Non-JSON values become plain data or their ``str``."""
    return (_wire_dumps(message) + "\n").encode("ascii")


def outcome(line: str | None, error: str | None, error_type: str | None) -> bytes:
    """An ``["o", ...]`` line; the common kept/dropped cases skip the generic encoder."""
    if error is None:
        if line is None:
            return b'["o",null,null,null]\n'
        return b'["o",' + _quote(line).encode("ascii") + b",null,null]\n"
    return encode(["o", line, error, error_type])


def compact_json(value: Any) -> str:
    """A filter value as its notice line (compact JSON, non-JSON values as ``str``)."""
    return str(_line_dumps(value))


def decode(line: bytes | bytearray) -> Any:
    return json.loads(line)


def nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` has lists, tuples or dicts nested more than ``limit`` levels deep.

    Iterative (any depth is safe to check) and stops at the first level too deep.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth == limit:
            if children:
                return True
            continue
        stack.extend((child, depth + 1) for child in children if isinstance(child, list | tuple | dict))
    return False
