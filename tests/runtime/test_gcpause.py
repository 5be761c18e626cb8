"""The shell pauses the cyclic GC around a large read's parse and diff, and only there.

The pure core never touches the collector (a library's pure functions must not change
process-wide state); the runner and the large-body worker do, through one helper.
"""

from __future__ import annotations

import gc
import json
from typing import Any

import pytest

from asyncai_watch.core import state_index
from asyncai_watch.core.extract import Body
from asyncai_watch.core.limits import Limits
from asyncai_watch.mcp.source import ReadResult
from asyncai_watch.runtime.gcpause import GC_PAUSE_ABOVE, gc_paused
from asyncai_watch.runtime.offload import Offload
from asyncai_watch.runtime.topic import Topic, parse


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_paused_over_a_large_read_and_left_as_it_was(enabled: bool) -> None:
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        with gc_paused(GC_PAUSE_ABOVE + 1):
            assert not gc.isenabled()
        assert gc.isenabled() is enabled
        with pytest.raises(RuntimeError, match="boom"), gc_paused(GC_PAUSE_ABOVE + 1):
            raise RuntimeError("boom")
        assert gc.isenabled() is enabled
        with gc_paused(GC_PAUSE_ABOVE):
            assert gc.isenabled() is enabled  # a small read: untouched
    finally:
        (gc.enable if was else gc.disable)()


def test_the_pure_parse_and_diff_never_touch_the_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    items = [{"id": f"i{i}", "n": i} for i in range(5000)]
    text = json.dumps(items)
    old, new = (
        Body.of(text, "application/json"),
        Body.of(text.replace('"n": 7}', '"n": -1}'), "application/json"),
    )
    seen: list[bool] = []
    real = state_index._parse

    def spy(raw: Any) -> Any:
        seen.append(gc.isenabled())
        return real(raw)

    monkeypatch.setattr(state_index, "_parse", spy)
    assert [e.key for e in state_index.diff_reads(old.state, new.state)] == ["i7"]
    assert seen == [True, True]  # the changed item's two sides, parsed with the collector on


@pytest.mark.anyio
async def test_a_topic_diffs_a_large_read_with_the_collector_paused(monkeypatch: pytest.MonkeyPatch) -> None:
    items = [{"id": f"i{i}", "n": i} for i in range(5000)]
    text = json.dumps(items)
    seen: list[bool] = []
    real = state_index._parse

    def spy(raw: Any) -> Any:
        seen.append(gc.isenabled())
        return real(raw)

    monkeypatch.setattr(state_index, "_parse", spy)
    topic = await Topic.begin(
        "memo://big",
        parse(ReadResult(uri="memo://big", text=text, mime_type="application/json")),
        Limits(),
        Offload(),
    )
    changed = parse(
        ReadResult(uri="memo://big", text=text.replace('"n": 7}', '"n": -1}'), mime_type="application/json")
    )
    pending = await topic.read(changed)
    assert [e.key for e in pending.events] == ["i7"]
    assert seen
    assert not any(seen)
    assert gc.isenabled()
