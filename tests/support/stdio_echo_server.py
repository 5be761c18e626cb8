"""The server kit's stdio transport (``asyncai_watch.server.stdio``) with no server behind it: each message read is sent back.

Before echoing a message it makes the stray output a careless handler or its child process
would: a flushed ``print``, an ``os.write`` on fd 1, a child's ``echo``, and a ``print`` left
in ``sys.stdout``'s buffer (for the last message, until serving has ended). None of it may
reach the wire (fd 1 points at stderr while serving). Once the transport has ended it prints one line saying whether fd 1 is blocking:
that line must be on the wire (fd 1 restored, with its blocking flag put back).

Run: ``python tests/support/stdio_echo_server.py``.
"""

from __future__ import annotations

import os

import anyio

from asyncai_watch.server.stdio import stdio_server


async def main() -> None:
    async with stdio_server() as (read, write), write:
        async for message in read:
            print("stray flushed print", flush=True)
            os.write(1, b"stray os.write\n")
            await anyio.run_process(["sh", "-c", "echo stray child"], stdout=None, stderr=None)
            print("stray print")  # still in the buffer when the last message's serving ends
            if isinstance(message, Exception):
                raise message
            await write.send(message)
    print(f"after serving, blocking={os.get_blocking(1)}")


if __name__ == "__main__":
    anyio.run(main)
