"""The large-body worker: extraction (parse + diff / sequence) of big reads, off the agent's loop.

Run as ``python -m asyncai_watch.runtime._offload_worker``. It holds one pure
:class:`~asyncai_watch.core.watch.Watch` per watch (by key) and answers, over stdin/stdout,
frames of an 8-byte length and a pickle:

- ``("baseline", key, name, uri, limits, text, mime)`` -> ``("ok", shape)`` or ``("error", message)``;
- ``("read", key, text, mime)`` -> ``("ok", pending)`` or ``("error", message)``;
- ``("forget", key)`` -> ``("ok", None)``.

The parent is this process's only peer (it started it), so pickle is safe here.
"""

from __future__ import annotations

import pickle
import struct
import sys
from typing import IO, Any

from asyncai_watch.core.watch import Body, Watch
from asyncai_watch.errors import WatchError

_HEADER = struct.Struct("!Q")


def read_frame(stream: IO[bytes]) -> Any:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError
    (size,) = _HEADER.unpack(header)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError
    return pickle.loads(data)


def write_frame(stream: IO[bytes], value: Any) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def answer(watches: dict[str, Watch], request: tuple[Any, ...]) -> tuple[str, Any]:
    kind, key = request[0], request[1]
    if kind == "baseline":
        _, _, name, uri, limits, text, mime = request
        fresh = Watch(name, uri, limits)
        shape = fresh.baseline(Body.of(text, mime))
        watches[key] = fresh
        return "ok", shape
    if kind == "read":
        _, _, text, mime = request
        watch = watches.get(key)
        if watch is None:
            return "error", f"the large-body worker has no baseline for {key!r}"
        return "ok", watch.read(Body.of(text, mime))
    if kind == "forget":
        watches.pop(key, None)
        return "ok", None
    return "error", f"unknown request {kind!r}"


def main() -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    watches: dict[str, Watch] = {}
    while True:
        try:
            request = read_frame(stdin)
        except EOFError:
            return
        try:
            reply = answer(watches, request)
        except WatchError as exc:
            reply = ("error", str(exc))
        except Exception as exc:  # a body no part expected: the parent reports it as an ERROR line
            reply = ("error", f"{type(exc).__name__}: {exc}")
        write_frame(stdout, reply)


if __name__ == "__main__":
    main()
