"""The large-body worker: extraction (parse + diff / sequence) of big reads, off the agent's loop.

Run as ``python -m asyncai_watch.runtime._offload_worker``. It holds one pure
:class:`~asyncai_watch.core.extract.Extraction` per URI (by key) and answers, over stdin/stdout,
frames of an 8-byte length and a pickle:

- ``("baseline", key, uri, limits, text, mime)`` -> ``("ok", shape)`` or ``("error", message)``;
- ``("adopt", key, extraction)`` -> ``("ok", None)`` (an extraction moved here, state and all);
- ``("read", key, text, mime)`` -> ``("ok", pending)`` or ``("error", message)``;
- ``("forget", key)`` -> ``("ok", None)``.

The parent is this process's only peer (it started it), so pickle is safe here.
"""

from __future__ import annotations

import pickle
import struct
import sys
from typing import IO, Any

from asyncai_watch.core.extract import Body, Extraction
from asyncai_watch.errors import BaselineError, WatchError
from asyncai_watch.runtime.gcpause import gc_paused

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


def answer(extractions: dict[str, Extraction], request: tuple[Any, ...]) -> tuple[str, Any]:
    kind, key = request[0], request[1]
    if kind == "baseline":
        _, _, uri, limits, text, mime = request
        fresh = Extraction(uri, limits)
        with gc_paused(len(text)):
            shape = fresh.baseline(Body.of(text, mime))
        extractions[key] = fresh
        return "ok", shape
    if kind == "adopt":
        extractions[key] = request[2]
        return "ok", None
    if kind == "read":
        _, _, text, mime = request
        extraction = extractions.get(key)
        if extraction is None:
            return "error", f"the large-body worker has no baseline for {key!r}"
        with gc_paused(len(text)):
            return "ok", extraction.read(Body.of(text, mime))
    if kind == "forget":
        extractions.pop(key, None)
        return "ok", None
    return "error", f"unknown request {kind!r}"


def main() -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    extractions: dict[str, Extraction] = {}
    while True:
        try:
            request = read_frame(stdin)
        except EOFError:
            return
        try:
            reply = answer(extractions, request)
        except BaselineError as exc:
            reply = ("raise", exc)  # the start tells it apart by its type: it goes back whole
        except WatchError as exc:
            reply = ("error", str(exc))
        except Exception as exc:  # a body no part expected: the parent reports it as an ERROR line
            reply = ("error", f"{type(exc).__name__}: {exc}")
        write_frame(stdout, reply)


if __name__ == "__main__":
    main()
