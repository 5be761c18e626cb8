"""Large bodies off the event loop: their parse and diff run in a worker process.

Parsing JSON holds the GIL for the whole call, so a worker thread would not help: a 50 MB body
would stall every other watch for seconds. A body longer than
:data:`~asyncai_watch.runtime.topic.LARGE_BODY` is therefore not parsed in the agent at all; the
URI's :class:`~asyncai_watch.core.extract.Extraction` (a plain value: it pickles, state and all)
moves to one worker process per manager, which answers each read with its
:class:`~asyncai_watch.core.extract.Pending` events (at most ``Limits.events_per_update`` of them,
so the answer is small). Delivery (filter, dedupe, debounce) stays in the agent. A worker that
dies takes its extractions with it: their next read re-baselines and says so in an ``ERROR`` line.
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
from asyncai_watch.core.extract import Body, Extraction, Pending
from asyncai_watch.core.limits import Limits
from asyncai_watch.errors import WatchError

__all__ = ["Offload"]

_HEADER = struct.Struct("!Q")


class Offload:
    """The large-body worker of one manager, started on first use; ``aclose`` ends it."""

    def __init__(self) -> None:
        self._process: anyio.abc.Process | None = None
        self._lock = anyio.Lock()
        self._keys: set[str] = set()  # extractions the current worker holds
        self._counter = itertools.count(1)

    async def baseline(self, uri: str, limits: Limits, body: Body) -> tuple[str, Shape]:
        """A new extraction of ``uri`` in the worker, with ``body`` as its baseline."""
        key = f"{uri}#{next(self._counter)}"
        shape: Shape = await self._call(("baseline", key, uri, limits, body.text, body.mime_type))
        self._keys.add(key)
        return key, shape

    async def adopt(self, extraction: Extraction) -> str:
        """Move ``extraction`` (its state and all) into the worker; returns its key there."""
        key = f"{extraction.uri}#{next(self._counter)}"
        await self._call(("adopt", key, extraction))
        self._keys.add(key)
        return key

    async def read(self, key: str, uri: str, limits: Limits, body: Body) -> tuple[Pending, str]:
        """The events of ``body`` for the extraction ``key``, and the key to use next (a new one
        when the worker had restarted: its state is gone, so ``body`` is a fresh baseline)."""
        if key not in self._keys:
            key, _ = await self.baseline(uri, limits, body)
            note = f"ERROR the large-body worker restarted; {uri} has a fresh baseline"
            return Pending(notes=(note,)), key
        pending: Pending = await self._call(("read", key, body.text, body.mime_type))
        return pending, key

    async def forget(self, key: str) -> None:
        if key in self._keys and self._process is not None:
            self._keys.discard(key)
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
        if kind == "raise":
            raise value  # a BaselineError, as the worker raised it
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
