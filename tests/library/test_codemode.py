"""The code-mode built-ins and MCP tools as keyword-argument functions."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from asyncai_watch.codemode import builtins
from asyncai_watch.mcp.source import ToolInfo
from asyncai_watch.runtime.manager import WatchManager
from asyncai_watch.runtime.tools import ToolCallError, python_name, tool_functions
from asyncai_watch.testing import FakeClock, FakeSource
from tests.support.managers import IMMEDIATE, NOTES, memo_fake


@pytest.mark.anyio
async def test_builtins_drive_the_manager() -> None:
    fake = memo_fake()
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock()) as m:
        fns = builtins(m)
        assert sorted(fns) == ["list_resources", "read_resource", "watch_list", "watch_start", "watch_stop"]
        assert await fns["watch_start"](name="notes", uri=NOTES) == {
            "name": "notes",
            "uri": NOTES,
            "shape": "state",
        }
        assert [w["name"] for w in await fns["watch_list"]()] == ["notes"]
        fake.update(NOTES, {"a": 1})
        with anyio.fail_after(5):
            assert (await m.notices.receive()).text == "ADDED a"
        assert await fns["read_resource"](uri=NOTES) == {"a": 1}
        assert NOTES in [r["uri"] for r in await fns["list_resources"]()]
        assert await fns["watch_stop"](name="notes") is True
        assert await fns["watch_stop"](name="notes") is False


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("fn", "args", "kwargs", "match"),
    [
        ("watch_start", ("notes", NOTES), {}, r"keyword arguments only \(name=, uri=, on_event=\)"),
        ("watch_start", (), {"name": "n", "url": NOTES}, r"unknown argument\(s\) url"),
        ("watch_start", (), {"name": "n"}, r"missing uri="),
        ("watch_start", (), {"name": 5, "uri": NOTES}, r"name must be a string, got int"),
        ("read_resource", (NOTES,), {}, r'read_resource\(uri="memo://notes"\)'),
        ("watch_stop", (), {}, "missing name="),
        ("watch_list", (), {"all": True}, "accepts no arguments"),
        ("list_resources", (1,), {}, "keyword arguments only"),
    ],
)
async def test_bad_calls_say_how_to_call(
    fn: str, args: tuple[Any, ...], kwargs: dict[str, Any], match: str
) -> None:
    fake = memo_fake()
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock()) as m:
        with pytest.raises(TypeError, match=match):
            await builtins(m)[fn](*args, **kwargs)
        assert fake.requests["subscriptions/listen"] == 0


@pytest.mark.anyio
async def test_tool_functions_names_results_and_errors() -> None:
    def fail(_: Any) -> Any:
        raise ValueError("no such key 'zz'")

    a = FakeSource(
        "alpha",
        tools=[
            (
                ToolInfo(
                    name="get", read_only=True, input_schema={"properties": {"key": {}}, "required": ["key"]}
                ),
                lambda args: {"value": args["key"].upper()},
            ),
            (ToolInfo(name="say-hi"), lambda args: "plain text"),
            (ToolInfo(name="boom"), fail),
        ],
    )
    b = FakeSource("beta-2", tools=[(ToolInfo(name="get", read_only=True), lambda args: [1, 2])])
    fns = await tool_functions([a, b])
    assert sorted(fns) == ["alpha_get", "beta_2_get", "boom", "say_hi"]
    assert await fns["alpha_get"](key="x") == {"value": "X"}
    assert await fns["beta_2_get"]() == [1, 2]
    assert await fns["say_hi"]() == "plain text"
    assert a.tool_calls[-1] == ("say-hi", {})  # called by its MCP name
    with pytest.raises(ToolCallError, match="no such key 'zz'"):
        await fns["boom"]()
    with pytest.raises(TypeError, match=r"missing key="):
        await fns["alpha_get"]()
    with pytest.raises(TypeError, match="keyword arguments only"):
        await fns["alpha_get"]("x")
    assert "alpha_get(key=...)" in (fns["alpha_get"].__doc__ or "")
    read_only = await tool_functions([a, b], read_only=True)
    assert sorted(read_only) == ["alpha_get", "beta_2_get"]


def test_python_name() -> None:
    assert python_name("say-hi") == "say_hi"
    # Every result must be a name the sandbox accepts (ASCII letter first, no leading "_").
    assert python_name("2fa") == "t_2fa"
    assert python_name("_x") == "t__x"
    assert python_name("héllo") == "h_llo"
    assert python_name("print") == "print_"
    assert python_name("class") == "class_"
    assert python_name("a.b") == "a_b"
