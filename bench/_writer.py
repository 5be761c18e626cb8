"""A writer in its own process, on its own connection: what every real user of a watch has.

    python bench/_writer.py URL

Reads commands on stdin, one per line, and answers each with one line on stdout:

- ``set KEY JSON`` -> calls ``memo_set``; answers the ``time.monotonic()`` taken just before
  the call (CLOCK_MONOTONIC is one clock for every process on the machine) and, after a space,
  the one taken when its answer came;
- ``stats`` -> answers memo's ``resources/read`` count (the ``memo_stats`` tool).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import AsyncIterator

import anyio

from asyncai_watch import McpResourceSource


async def main(url: str) -> None:
    async with McpResourceSource.http(url, name="writer") as memo:
        print("ready", flush=True)
        async for raw in _lines():
            command, _, rest = raw.partition(" ")
            if command == "set":
                key, _, value = rest.partition(" ")
                t0 = time.monotonic()
                await memo.call_tool("memo_set", {"key": key, "value": json.loads(value)})
                print(repr(t0), repr(time.monotonic()), flush=True)
            elif command == "stats":
                result = await memo.call_tool("memo_stats", {})
                print(result.structured["reads"], flush=True)


async def _lines() -> AsyncIterator[str]:
    stdin = anyio.wrap_file(sys.stdin)
    async for line in stdin:
        yield line.rstrip("\n")


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
