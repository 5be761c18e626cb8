"""What every framework integration test shares: the real memo server watched over stdio, a
second MCP client that changes it, and a scripted model brain each framework's fake model asks.

The memo runs with ``--also-http``: one memo and one subscription bus behind both transports.
It brings HTTP up before it answers on stdio, so once the stdio connect returns, the ready file
holds the URL (no waiting for it). The writer connects over Streamable HTTP like a separate
user: its writes reach the agent only through the watch.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import attrs

from asyncai_watch import Limits, McpResourceSource, WatchManager
from asyncai_watch.integrations import TurnRunner
from tests.support.managers import IMMEDIATE

"""Each change its own notice (no debounce window to merge two into one)."""
WAIT = 60  # generous: the machine running the suite may be busy; nothing here sleeps


@attrs.define
class Memo:
    watches: WatchManager
    writer: McpResourceSource

    async def set(self, key: str, value: object) -> None:
        result = await self.writer.call_tool("memo_set", {"key": key, "value": value})
        assert not result.is_error, result.text

    async def notes(self) -> Any:
        return json.loads((await self.writer.read("memo://notes")).text)


@asynccontextmanager
async def memo(limits: Limits = IMMEDIATE) -> AsyncIterator[Memo]:
    with tempfile.TemporaryDirectory(prefix="asyncai-integ-") as tmp:
        ready = Path(tmp) / "memo-http"
        command = [
            sys.executable,
            "-m",
            "asyncai_servers.memo",
            "--also-http",
            "127.0.0.1:0",
            "--ready-file",
            str(ready),
        ]
        async with (
            McpResourceSource.stdio(command, name="memo") as source,
            WatchManager([source], limits=limits) as watches,
        ):
            url = ready.read_text(encoding="utf-8").split(" ", 1)[1].strip()
            async with McpResourceSource.http(url, name="outside") as writer:
                yield Memo(watches, writer)


class Published:
    """A ``publish`` callback that keeps what it was given."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    async def __call__(self, text: str) -> None:
        self.texts.append(text)


def ask_call(tool: str, /, **args: Any) -> str:
    """The user message that makes the brain call ``tool`` with ``args``."""
    return f"call {tool} {json.dumps(args)}"


@attrs.frozen
class Call:
    """The model asks for a tool call."""

    name: str
    args: dict[str, Any]


_EVENT = re.compile(r"<watch-event [^>]*>\n(.*?)\n</watch-event>", re.DOTALL)


class Brain:
    """The scripted decisions behind each framework's fake model (the framework part differs).

    - a user message ``call NAME {json args}`` -> that tool call;
    - any other user message -> ``ok``;
    - a turn of watch events -> ``NO_REPLY`` when every event mentions ``noise``, else
      ``seen: <event line>; <event line>``; while :attr:`hold` is set, the turn waits for it
      (so notices can arrive during the run) after setting :attr:`holding`;
    - a tool's answer -> ``tool said: <its text>``.

    :attr:`prompts` records every user text the model got, in order.
    """

    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.tool_results: list[str] = []
        self.hold: anyio.Event | None = None
        self.holding = anyio.Event()

    async def on_user(self, text: str) -> Call | str:
        self.prompts.append(text)
        if text.startswith("call "):
            name, _, args = text.removeprefix("call ").partition(" ")
            return Call(name, json.loads(args or "{}"))
        events = _EVENT.findall(text)
        if not events:
            return "ok"
        if self.hold is not None:
            self.holding.set()
            await self.hold.wait()
        if all("noise" in event for event in events):
            return "NO_REPLY"
        return "seen: " + "; ".join(events)

    def on_tool_result(self, text: str) -> str:
        self.tool_results.append(text)
        return f"tool said: {text}"


async def two_notices_during_one_run(runner: TurnRunner, m: Memo, brain: Brain, published: Published) -> None:
    """The coalescing scenario every framework runs: the model starts a watch; a change starts
    run 2, held open in the model; two more changes arrive meanwhile and give one follow-up run
    whose turn carries both notices."""
    with anyio.fail_after(WAIT):
        await runner.ask(ask_call("watch_start", name="notes", uri="memo://notes"))
        brain.hold = anyio.Event()
        await m.set("a", 1)
        await brain.holding.wait()  # run 2 is in the model, held open
        await m.set("b", 2)
        await runner.wait(lambda s: s.notices == 2)
        await m.set("c", 3)
        await runner.wait(lambda s: s.notices == 3)
        assert runner.stats.queued == 2
        brain.hold.set()
        stats = await runner.wait_idle()
    assert (stats.runs_started, stats.runs_completed) == (3, 3)
    assert [len(r.notices) for r in runner.runs] == [0, 1, 2]
    assert published.texts[1:] == ["seen: ADDED a", "seen: ADDED b; ADDED c"]


async def own_write_reaches_the_watch(runner: TurnRunner, m: Memo, published: Published) -> None:
    """The one-connection scenario every framework runs: the model starts a watch, then writes
    with the memo's own ``memo_set`` offered over the watch's stdio connection; the write is a
    change the watch sees, so a notice and a third run follow (a second connection to a stdio
    server would be a second, private memo, and nothing would follow)."""
    with anyio.fail_after(WAIT):
        await runner.ask(ask_call("watch_start", name="notes", uri="memo://notes"))
        wrote = await runner.ask(ask_call("memo_set", key="todo", value="milk"))
        assert wrote.error is None, wrote
        assert wrote.reply is not None
        assert wrote.reply.startswith("tool said: ")
        assert "rror" not in wrote.reply, wrote.reply
        await runner.wait(lambda s: s.runs_completed == 3)
    assert await m.notes() == {"todo": "milk"}
    assert published.texts[-1] == "seen: ADDED todo"
