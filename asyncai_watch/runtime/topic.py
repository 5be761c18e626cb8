"""One URI's shared extraction, here or in the large-body worker.

Every watch on one URI of one connection takes the same events from one
:class:`~asyncai_watch.core.extract.Extraction` (the feed begins them all at the same read). A
:class:`Topic` holds it, runs it on the event loop for ordinary reads (with the GC paused over a
large one), and moves it to the large-body worker (:mod:`asyncai_watch.runtime.offload`) the
first time a read is too large to parse here: from then on it lives there.
"""

from __future__ import annotations

from typing import Final

from asyncai_watch.core.eventlog import Position
from asyncai_watch.core.events import Shape, shape_for_mime_type
from asyncai_watch.core.extract import Body, Extraction, Pending
from asyncai_watch.core.limits import Limits
from asyncai_watch.core.resume import Checkpoint
from asyncai_watch.mcp.source import ReadResult
from asyncai_watch.runtime.gcpause import gc_paused
from asyncai_watch.runtime.offload import Offload

__all__ = ["LARGE_BODY", "LARGE_EVENT_LOG", "Topic", "parse"]

LARGE_BODY: Final = 256 * 1024
"""State bodies longer than this (characters) are parsed and diffed in the large-body worker."""

LARGE_EVENT_LOG: Final = 8 * 1024 * 1024
"""Event-log bodies up to this size are parsed here: their position is needed for the next read
(a positioned read of a fast log is a few thousand events); longer ones go to the worker."""


def parse(result: ReadResult) -> Body:
    """A read as its extraction takes it: parsed here, or left raw when it is too large to parse
    on the event loop (the worker parses it)."""
    event_log = shape_for_mime_type(result.mime_type) == "event-log"
    if len(result.text) > (LARGE_EVENT_LOG if event_log else LARGE_BODY):
        return Body.raw(result.text, result.mime_type)
    with gc_paused(len(result.text)):
        return Body.of(result.text, result.mime_type)


class Topic:
    """The extraction of one URI (see the module docstring)."""

    __slots__ = ("_key", "_local", "_offload", "_text", "limits", "mime_type", "shape", "uri")

    def __init__(
        self,
        uri: str,
        limits: Limits,
        shape: Shape,
        local: Extraction | None,
        key: str | None,
        offload: Offload,
    ) -> None:
        self.uri = uri
        self.limits = limits
        self.shape = shape
        self._local = local
        self._key = key
        self._offload = offload
        self._text: str | None = None  # a state's last good read, for its resume checkpoint
        self.mime_type: str | None = None

    @classmethod
    async def begin(cls, uri: str, body: Body, limits: Limits, offload: Offload) -> Topic:
        """A topic whose baseline is ``body`` (raises :class:`~asyncai_watch.WatchError` when it
        cannot be one)."""
        if body.parsed:
            local = Extraction(uri, limits)
            with gc_paused(len(body.text)):
                shape = local.baseline(body)
            topic = cls(uri, limits, shape, local, None, offload)
        else:
            key, shape = await offload.baseline(uri, limits, body)
            topic = cls(uri, limits, shape, None, key, offload)
        topic.mime_type = body.mime_type
        if shape == "state":
            topic._text = body.text
        return topic

    @property
    def position(self) -> Position | None:
        """The event log's position for the next read (``None``: read it whole)."""
        return self._local.position if self._local is not None else None

    def checkpoint(self) -> Checkpoint | None:
        """Where a watch on this URI stands now, to resume from after a restart: the event log's
        position, or the state's last good body (``None``: an event log in the worker, or one
        without a ``log_id``)."""
        if self.shape == "event-log":
            position = self.position
            return Checkpoint(self.uri, position) if position is not None else None
        if self._text is None:
            return None
        return Checkpoint.of_state(self.uri, self._text, self.mime_type)

    async def read(self, body: Body) -> Pending:
        """The events of a later read, extracted here or in the worker."""
        pending = await self._read(body)
        if self.shape == "state" and not any(note.startswith("ERROR") for note in pending.notes):
            self._text = body.text  # a read that is not JSON keeps the last good one, as the extraction does
        return pending

    async def _read(self, body: Body) -> Pending:
        local = self._local
        if local is not None and body.parsed:
            with gc_paused(len(body.text)):
                return local.read(body)
        if local is not None:
            # The first large read: the worker takes the extraction over, state and all.
            self._key = await self._offload.adopt(local)
            self._local = None
        assert self._key is not None
        pending, self._key = await self._offload.read(self._key, self.uri, self.limits, body)
        return pending

    async def forget(self) -> None:
        """Drop the state kept in the worker, if any."""
        if self._key is not None:
            await self._offload.forget(self._key)
