"""The session transcript (``--session PATH``): one JSON object per line.

Record shapes (every record has ``type`` and ``ts``, seconds since the epoch):

- ``user``: ``channel``, ``text`` — an input line;
- ``monitor_event``: ``task_id`` (``watch-<name>``), ``description``
  (``watch <name> <uri>``), ``note`` (the notice's instruction line),
  ``source``, ``text`` (the notice as the model saw it) — a notice, never a
  ``user`` record;
- ``assistant``: ``run``, ``text``, ``tool_calls`` (``[{"id", "name", "arguments"}]``);
- ``tool_result``: ``run``, ``call_id``, ``name``, ``text``, ``ended_turn``;
- ``reply``: ``run``, ``channel``, ``text``, ``published`` (false for a
  suppressed ``NO_REPLY``);
- ``error``: ``run``, ``channel``, ``error``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Final

import attrs
import cattrs

from asyncai_agent.events import (
    AgentEvent,
    InputReceived,
    ModelMessage,
    NoticeReceived,
    ReplyPublished,
    ReplySuppressed,
    RunFailed,
    ToolResult,
)

__all__ = ["Transcript", "TranscriptError"]


class TranscriptError(Exception):
    """The transcript file cannot be opened or written."""


@attrs.frozen(kw_only=True)
class _User:
    type: str = "user"
    ts: float
    channel: str
    text: str


@attrs.frozen(kw_only=True)
class _MonitorEvent:
    type: str = "monitor_event"
    ts: float
    task_id: str
    description: str
    note: str
    source: str
    text: str


@attrs.frozen(kw_only=True)
class _ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@attrs.frozen(kw_only=True)
class _Assistant:
    type: str = "assistant"
    ts: float
    run: int
    text: str
    tool_calls: list[_ToolCall]


@attrs.frozen(kw_only=True)
class _ToolResult:
    type: str = "tool_result"
    ts: float
    run: int
    call_id: str
    name: str
    text: str
    ended_turn: bool


@attrs.frozen(kw_only=True)
class _Reply:
    type: str = "reply"
    ts: float
    run: int
    channel: str
    text: str
    published: bool


@attrs.frozen(kw_only=True)
class _Error:
    type: str = "error"
    ts: float
    run: int
    channel: str
    error: str


_Record = _User | _MonitorEvent | _Assistant | _ToolResult | _Reply | _Error

# The one converter for this disk shape: attrs classes in, JSON-ready dicts out.
_converter = cattrs.Converter()


def _to_record(event: AgentEvent, ts: float) -> _Record | None:
    if isinstance(event, InputReceived):
        return _User(ts=ts, channel=event.channel, text=event.text)
    if isinstance(event, NoticeReceived):
        r = event.rendered
        return _MonitorEvent(
            ts=ts,
            task_id=r.task_id,
            description=r.description,
            note=r.note,
            source=event.notice.source,
            text=r.text,
        )
    if isinstance(event, ModelMessage):
        calls = [
            _ToolCall(
                id=c.id,
                name=c.name,
                arguments=dict(c.arguments) if c.invalid_arguments is None else {"_raw": c.invalid_arguments},
            )
            for c in event.message.tool_calls
        ]
        return _Assistant(ts=ts, run=event.run_id, text=event.message.text, tool_calls=calls)
    if isinstance(event, ToolResult):
        return _ToolResult(
            ts=ts,
            run=event.run_id,
            call_id=event.call_id,
            name=event.name,
            text=event.text,
            ended_turn=event.ended_turn,
        )
    if isinstance(event, ReplyPublished):
        return _Reply(ts=ts, run=event.run_id, channel=event.channel, text=event.text, published=True)
    if isinstance(event, ReplySuppressed):
        return _Reply(ts=ts, run=event.run_id, channel=event.channel, text=event.text, published=False)
    if isinstance(event, RunFailed):
        return _Error(ts=ts, run=event.run_id, channel=event.channel, error=event.error)
    return None


_RECORDED: Final = (
    InputReceived,
    NoticeReceived,
    ModelMessage,
    ToolResult,
    ReplyPublished,
    ReplySuppressed,
    RunFailed,
)


class Transcript:
    """Appends records to ``path``; use as an orchestrator observer (``transcript.record``)."""

    def __init__(self, path: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self._clock = clock
        try:
            self._file: IO[str] | None = path.open("a", encoding="utf-8")
        except OSError as exc:
            raise TranscriptError(
                f"--session: cannot open {str(path)!r} for appending: {exc.strerror or exc}"
            ) from exc

    def record(self, event: AgentEvent) -> None:
        if self._file is None or not isinstance(event, _RECORDED):
            return
        rec = _to_record(event, self._clock())
        if rec is None:
            return
        line = json.dumps(_converter.unstructure(rec), ensure_ascii=False, default=repr)
        # One flushed line per record: a crash loses at most the record being written.
        self._file.write(line + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> Transcript:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
