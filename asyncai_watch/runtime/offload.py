"""Large bodies off the event loop: their parse and diff run in a worker process.

Parsing JSON holds the GIL for the whole call, so a worker thread would not help: a 50 MB body
would stall every other watch for seconds. A body longer than
:data:`~asyncai_watch.runtime.subscriptions.LARGE_BODY` is therefore not parsed in the agent at all; the
watch's extraction state (its baseline or event-log sequencer) moves to one worker process per
manager, which answers each read with its :class:`~asyncai_watch.core.watch.Pending` events
(at most ``Limits.events_per_update`` of them, so the answer is small). Delivery (dedupe,
debounce) stays in the agent. A worker that dies takes its watches' baselines with it: their next
read re-baselines and says so in an ``ERROR`` line.
"""

from __future__ import annotations

import itertools
import pickle
import struct
import sys
from typing import Any

import anyio
import anyio.abc

from asyncai_watch.core.events import Shape
from asyncai_watch.core.watch import Body, Line, Pending, Watch
from asyncai_watch.errors import WatchError

__all__ = ["Offload"]

_HEADER = struct.Struct("!Q")


class Offload:
    """The large-body worker of one manager, started on first use; ``aclose`` ends it."""

    def __init__(self) -> None:
        self._process: anyio.abc.Process | None = None
        self._lock = anyio.Lock()
        self._keys: dict[int, str] = {}  # id(core) -> key known to the current worker
        self._counter = itertools.count(1)

    async def baseline(self, core: Watch, body: Body) -> Shape:
        """Move ``core``'s extraction to the worker with ``body`` as its baseline."""
        key = f"{core.name}#{next(self._counter)}"
        reply = await self._call(
            ("baseline", key, core.name, core.uri, core.limits, body.text, body.mime_type)
        )
        self._keys[id(core)] = key
        shape: Shape = reply
        core.moved(shape)
        return shape

    async def read(self, core: Watch, body: Body) -> Pending:
        """The events of ``body`` for ``core``, extracted in the worker (moved there first if need be)."""
        if not core.remote:
            # The first large read of a watch that was small: the worker takes over from the last text.
            assert core.last_text is not None
            await self.baseline(core, Body.raw(core.last_text, body.mime_type))
        key = self._keys.get(id(core))
        if key is None:  # the worker was restarted: what it knew is gone
            await self.baseline(core, body)
            return Pending(
                lines=(Line(f"ERROR the large-body worker restarted; {core.uri} has a fresh baseline"),)
            )
        pending: Pending = await self._call(("read", key, body.text, body.mime_type))
        return core.extracted(pending)

    async def forget(self, core: Watch) -> None:
        key = self._keys.pop(id(core), None)
        if key is not None and self._process is not None:
            await self._call(("forget", key))

    async def aclose(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            with anyio.CancelScope(shield=True):
                await _close(process)

    async def _call(self, request: tuple[Any, ...]) -> Any:
        async with self._lock:
            process = await self._running()
            assert process.stdin is not None
            assert process.stdout is not None
            data = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
            answered = False
            try:
                # Two sends: joining them would copy the (large) body once more, holding the loop.
                await process.stdin.send(_HEADER.pack(len(data)))
                await process.stdin.send(data)
                (size,) = _HEADER.unpack(await _receive(process.stdout, _HEADER.size))
                kind, value = pickle.loads(await _receive(process.stdout, size))
                answered = True
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                raise WatchError("the large-body worker died; the next read starts a new one") from exc
            finally:
                if not answered:
                    # Dead, or cancelled mid-frame (the stream is out of step): start afresh next time.
                    self._process = None
                    self._keys.clear()
                    with anyio.CancelScope(shield=True):
                        await _close(process)
        if kind != "ok":
            raise WatchError(value)
        return value

    async def _running(self) -> anyio.abc.Process:
        if self._process is None or self._process.returncode is not None:
            self._keys.clear()
            self._process = await anyio.open_process(
                [sys.executable, "-m", "asyncai_watch.runtime._offload_worker"], stderr=None
            )
        return self._process


async def _receive(stream: anyio.abc.ByteReceiveStream, size: int) -> bytes:
    chunks: list[bytes] = []
    got = 0
    while got < size:
        chunk = await stream.receive(min(size - got, 1 << 20))
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


async def _close(process: anyio.abc.Process) -> None:
    if process.stdin is not None:
        await process.stdin.aclose()  # EOF: the worker returns
    with anyio.move_on_after(5):
        await process.wait()
    if process.returncode is None:
        process.kill()
        await process.wait()
