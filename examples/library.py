"""asyncai-watch as a library: watch a memo, change it, print the notice.

    python examples/library.py

It starts the reference memo server over stdio, watches memo://notes, makes two quick changes
itself (as another user would), and prints the one notice they become: changes that land within
the debounce quiet time are batched into one notice, one line per change.
"""

import anyio

from asyncai_watch import Limits, McpResourceSource, WatchManager


async def main() -> None:
    async with (
        McpResourceSource.stdio("asyncai-mcp-simple") as memo,
        WatchManager([memo], limits=Limits(debounce_quiet=1.0)) as watches,
    ):
        info = await watches.watch_start("notes", "memo://notes")
        print(f"watching {info.uri} ({info.shape})")
        await memo.call_tool("memo_set", {"key": "todo", "value": "buy milk"})
        await memo.call_tool("memo_set", {"key": "owner", "value": "ann"})
        with anyio.fail_after(30):
            notice = await watches.notices.receive()
        print(notice.text)


anyio.run(main)
