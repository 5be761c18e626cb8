"""The runner every integration shares (TurnRunner), with a plain turn function and an in-memory
notice stream; and the one-line error for a missing extra."""

from __future__ import annotations

import importlib
import logging
import sys

import anyio
import pytest

from asyncai_watch import Notice
from asyncai_watch.integrations import TurnRunner

pytestmark = pytest.mark.anyio

WAIT = 10


def notice(name: str, text: str) -> Notice:
    return Notice(source="watch", text=text, meta={"name": name, "uri": f"memo://notes/{name}"})


class Turns:
    """A turn function that answers from a table, can fail, and can be held open."""

    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.hold: anyio.Event | None = None
        self.holding = anyio.Event()

    async def __call__(self, prompt: str) -> str | None:
        self.prompts.append(prompt)
        if self.hold is not None:
            self.holding.set()
            await self.hold.wait()
        if "boom" in prompt:
            raise ValueError("the model is down")
        if "quiet" in prompt:
            return "NO_REPLY\n"
        if "empty" in prompt:
            return None
        return f"reply {len(self.prompts)}"


async def test_messages_and_notices_that_arrive_during_a_run_share_one_follow_up() -> None:
    turns, published = Turns(), list[str]()
    send, receive = anyio.create_memory_object_stream[Notice](10)

    async def publish(text: str) -> None:
        published.append(text)

    async with send, TurnRunner(turns, receive, publish=publish) as runner:
        turns.hold = anyio.Event()
        with anyio.fail_after(WAIT):
            runner.send("hello")
            await turns.holding.wait()
            await send.send(notice("a", "ADDED a"))
            runner.send("and this")
            await send.send(notice("b", "ADDED b"))
            await runner.wait(lambda s: s.queued == 3)
            turns.hold.set()
            stats = await runner.wait_idle()
    assert (stats.runs_started, stats.notices, stats.messages, stats.published) == (2, 2, 2, 2)
    follow_up = runner.runs[1]
    assert follow_up.messages == ("and this",)
    assert [n.text for n in follow_up.notices] == ["ADDED a", "ADDED b"]
    # What people said comes first, then one <watch-event> per notice.
    assert follow_up.prompt.startswith('and this\n\n<watch-event name="a" uri="memo://notes/a">\nADDED a\n')
    assert follow_up.prompt.count("<watch-event") == 2
    assert published == ["reply 1", "reply 2"]


async def test_no_reply_and_empty_replies_are_not_published() -> None:
    published: list[str] = []

    async def publish(text: str) -> None:
        published.append(text)

    async with TurnRunner(Turns(), publish=publish) as runner:
        with anyio.fail_after(WAIT):
            quiet = await runner.ask("quiet please")
            empty = await runner.ask("empty")
            loud = await runner.ask("loud")
    assert (quiet.published, empty.published, loud.published) == (False, False, True)
    assert (quiet.reply, empty.reply) == ("NO_REPLY\n", None)
    assert published == ["reply 3"]
    assert runner.stats.suppressed == 2


async def test_a_failed_run_or_publish_is_recorded_and_the_next_notice_still_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="asyncai_watch.integrations")
    published: list[str] = []

    async def publish(text: str) -> None:
        if "2" in text:
            raise ConnectionError("channel gone")
        published.append(text)

    async with TurnRunner(Turns(), publish=publish) as runner:
        with anyio.fail_after(WAIT):
            failed = await runner.ask("boom")
            unpublished = await runner.ask("second")
            ok = await runner.ask("third")
    assert failed.error == "ValueError: the model is down"
    assert failed.reply is None
    assert unpublished.error == "publish: ConnectionError: channel gone"
    assert not unpublished.published
    assert ok.published
    assert published == ["reply 3"]
    assert (runner.stats.failed, runner.stats.published) == (2, 1)
    logged = [(r.levelname, r.getMessage(), getattr(r, "error", None)) for r in caplog.records]
    assert ("ERROR", "integration.run_failed", "ValueError: the model is down") in logged
    assert ("ERROR", "integration.publish_failed", "ConnectionError: channel gone") in logged
    assert [r.run for r in caplog.records if r.getMessage() == "integration.run"] == [1, 2, 3]  # type: ignore[attr-defined]


async def test_leaving_the_block_cancels_a_run_and_ends_a_waiting_ask() -> None:
    turns = Turns()
    turns.hold = anyio.Event()  # never set: the run stays in the model until cancelled
    errors: list[BaseException] = []

    async def publish(text: str) -> None:
        raise AssertionError("nothing is published")

    async def ask(runner: TurnRunner) -> None:
        try:
            await runner.ask("waits forever")
        except RuntimeError as exc:
            errors.append(exc)

    async def wait(runner: TurnRunner) -> None:
        try:
            await runner.wait(lambda s: s.published == 1)
        except RuntimeError as exc:
            errors.append(exc)

    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg, TurnRunner(turns, publish=publish) as runner:
            tg.start_soon(ask, runner)
            tg.start_soon(wait, runner)
            await turns.holding.wait()
    assert sorted(str(e) for e in errors) == [
        "TurnRunner closed before a run took the message",
        "TurnRunner closed before the awaited condition held",
    ]
    with pytest.raises(RuntimeError, match="not running"):
        runner.send("late")


async def test_the_body_exception_comes_back_unwrapped() -> None:
    async def publish(text: str) -> None:
        pass

    with pytest.raises(KeyError):
        async with TurnRunner(Turns(), publish=publish):
            raise KeyError("mine")


async def test_a_closed_notice_stream_leaves_messages_working() -> None:
    send, receive = anyio.create_memory_object_stream[Notice](1)
    send.close()

    async def publish(text: str) -> None:
        pass

    async with TurnRunner(Turns(), receive, publish=publish) as runner:
        with anyio.fail_after(WAIT):
            assert (await runner.ask("still here")).reply == "reply 1"
    receive.close()


@pytest.mark.parametrize(
    ("module", "framework", "line"),
    [
        (
            "asyncai_watch.integrations.pydantic_ai",
            "pydantic_ai",
            "asyncai_watch.integrations.pydantic_ai needs the 'pydantic_ai' package: "
            "pip install 'asyncai-watch[pydantic-ai]'",
        ),
        (
            "asyncai_watch.integrations.openai_agents",
            "agents",
            "asyncai_watch.integrations.openai_agents needs the 'agents' package: "
            "pip install 'asyncai-watch[openai-agents]'",
        ),
        (
            "asyncai_watch.integrations.langgraph",
            "langgraph",
            "asyncai_watch.integrations.langgraph needs the 'langgraph' package: "
            "pip install 'asyncai-watch[langgraph]'",
        ),
    ],
)
def test_a_missing_extra_is_one_clear_line(
    monkeypatch: pytest.MonkeyPatch, module: str, framework: str, line: str
) -> None:
    monkeypatch.delitem(sys.modules, module, raising=False)
    for name in [n for n in sys.modules if n == framework or n.startswith(framework + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, framework, None)  # what an uninstalled package looks like to import
    with pytest.raises(ImportError) as caught:
        importlib.import_module(module)
    assert str(caught.value) == line
