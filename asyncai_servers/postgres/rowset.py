"""The rows of one watched table (or filtered view of it), keyed by primary key. Pure.

The server keeps one :class:`RowSet` per watched target and feeds it what it reads from the
database: a whole read (:meth:`RowSet.replace`, the first one and after anything that may have
hidden changes: a lost ``LISTEN`` connection, a key list too long for a ``NOTIFY``, DDL) or a
re-read of the keys a ``NOTIFY`` named (:meth:`RowSet.update`). Each returns the row changes the
read shows (``ADDED`` / ``MODIFIED`` / ``DELETED``), which become the event log's events; the
state body is :meth:`RowSet.body`. A re-read always returns the rows as they are now, so a row
changed twice before its re-read is one change: never a step back to an older value.

Rows stay the JSON text PostgreSQL made (``row_to_json``): compared as text (the server's own
session renders every value the same way each time) and sent as is, never parsed, so a
``numeric`` keeps its digits. A key is the primary key's value as text (``42``, ``abc``), or,
for a key of several columns, their compact JSON array (``[7,"eu"]``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import attrs
import msgspec

from asyncai_watch.server.eventlog import dumps

__all__ = ["Number", "OverCap", "RowChange", "RowSet", "json_text", "key_text", "query_body"]

ChangeType = Literal["ADDED", "MODIFIED", "DELETED"]


class Number(str):
    """A JSON number with a fraction or exponent, kept as the text PostgreSQL wrote (``1.50``,
    ``0.1000000000000000001``): a float would round it, and two keys could become one."""

    __slots__ = ()


_decode_key = msgspec.json.Decoder(list[Any], float_hook=Number).decode
_encoder = msgspec.json.Encoder(enc_hook=lambda n: msgspec.Raw(str(n).encode()))  # a Number, as is


def json_text(value: Any) -> str:
    """Compact JSON of decoded keys, each :class:`Number` written back as its own text."""
    return _encoder.encode(value).decode()


class OverCap(ValueError):
    """A read holds more rows than the cap; the set is left as it was."""

    def __init__(self, rows: int, max_rows: int) -> None:
        super().__init__(f"{rows} rows, over the cap of {max_rows}")
        self.rows = rows
        self.max_rows = max_rows


def key_text(key_json: str) -> str:
    """The key of a row from its primary key columns as a JSON array (``json_build_array(pk...)``)."""
    values = _decode_key(key_json)
    if len(values) == 1:
        value = values[0]
        return value if isinstance(value, str) else dumps(value)  # a Number is its text
    return json_text(values)


@attrs.frozen
class RowChange:
    type: ChangeType
    key: str
    row: str
    """The row now (``ADDED``, ``MODIFIED``) or the row that went (``DELETED``), as JSON text."""
    old: str | None = None
    """For ``MODIFIED``: the row before."""

    def event(self) -> dict[str, Any]:
        """The event-log event (``seq`` is the ring's): rows go out as the text PostgreSQL made."""
        event: dict[str, Any] = {"type": self.type, "key": self.key, "object": msgspec.Raw(self.row)}
        if self.old is not None:
            event["old"] = msgspec.Raw(self.old)
        return event


class RowSet:
    """Rows by key (see the module docstring), never more than ``max_rows``: a read that would
    hold more raises :class:`OverCap` and changes nothing, so the set stays the last state
    that fit (what the next read is compared with)."""

    def __init__(self, max_rows: int) -> None:
        self.max_rows = max_rows
        self.rows: dict[str, str] = {}
        self._body: str | None = None

    def replace(self, rows: Iterable[tuple[str, str]]) -> list[RowChange]:
        """A whole read, ``(key_json, row_json)`` pairs: the changes since the last state."""
        new = {key_text(k): row for k, row in rows}
        if len(new) > self.max_rows:
            raise OverCap(len(new), self.max_rows)
        old = self.rows
        changes: list[RowChange] = []
        for key, row in new.items():
            before = old.get(key)
            if before is None:
                changes.append(RowChange("ADDED", key, row))
            elif before != row:
                changes.append(RowChange("MODIFIED", key, row, before))
        changes += [RowChange("DELETED", key, row) for key, row in old.items() if key not in new]
        self.rows = new
        if changes:
            self._body = None
        return changes

    def update(self, found: Iterable[tuple[str, str | None]]) -> list[RowChange]:
        """A re-read of some keys, ``(key_json, row_json or None)``: None when the row is gone
        (deleted, or no longer matching the target's filter)."""
        answers = {key_text(k): row for k, row in found}  # a key asked twice is one answer
        rows = self.rows
        size = len(rows) + sum((row is not None) - (key in rows) for key, row in answers.items())
        if size > self.max_rows:
            raise OverCap(size, self.max_rows)
        changes: list[RowChange] = []
        for key, row in answers.items():
            before = rows.get(key)
            if row is None:
                if before is not None:
                    del rows[key]
                    changes.append(RowChange("DELETED", key, before))
            elif before is None:
                rows[key] = row
                changes.append(RowChange("ADDED", key, row))
            elif before != row:
                rows[key] = row
                changes.append(RowChange("MODIFIED", key, row, before))
        if changes:
            self._body = None
        return changes

    def body(self) -> str:
        """The state body: ``{"key": row, ...}``, built once per change."""
        if self._body is None:
            self._body = "{" + ",".join(f"{dumps(k)}:{row}" for k, row in self.rows.items()) + "}"
        return self._body


def query_body(rows: list[tuple[str | None, str]]) -> str:
    """A named query's state body: ``[row, ...]``, or ``{"key": row, ...}`` when it has a key.

    ``rows`` are ``(key_json or None, row_json)`` in the query's order; a key seen twice keeps
    its first row and the others get ``#2``, ``#3`` (as the library does for list items).
    """
    if not rows or rows[0][0] is None:
        return "[" + ",".join(row for _, row in rows) + "]"
    keyed: dict[str, str] = {}
    for key_json, row in rows:
        key = key_text(key_json or "[null]")
        name, n = key, 1
        while name in keyed:
            n += 1
            name = f"{key}#{n}"
        keyed[name] = row
    return "{" + ",".join(f"{dumps(k)}:{row}" for k, row in keyed.items()) + "}"
