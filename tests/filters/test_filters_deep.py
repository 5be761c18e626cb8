"""Deep or oversized data between a filter and the parent fails that one call or event cleanly:
nothing raises out of a filter session's ``run()``, and the worker goes on (its scope kept)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from asyncai_watch.core.limits import Limits
from asyncai_watch.filters import FilterOutcome, RestrictedFilterSession, RestrictedPythonEngine
from tests.support.filters import Catalog

pytestmark = pytest.mark.anyio

T = TypeVar("T")

SOURCE = """\
try:
    count += 1
except NameError:
    count = 1
k = event["k"]
if k == "nest":
    v = 1
    for _ in range(event["depth"]):
        v = [v]
    read_resource(uri=v)
elif k == "big":
    memo_get(key="x" * event["size"])
elif k == "answer":
    deep_tool(depth=event["depth"])
f"count {count}"
"""


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


async def deep_answer(depth: int) -> Any:
    return nested(depth)


async def from_deep_in_the_stack(call: Callable[[], Awaitable[T]], frames: int = 300) -> T:
    """Await ``call()`` from ``frames`` calls down, as a watch task deep in the manager's stack
    does: the parent's own JSON work then has less room before Python's recursion limit."""
    if frames == 0:
        return await call()
    return await from_deep_in_the_stack(call, frames - 1)


@pytest.fixture
async def session() -> Any:
    catalog = Catalog({"read_resource", "memo_get", "deep_tool"}, hooks={"deep_tool": deep_answer})
    engine = RestrictedPythonEngine(limits=Limits(filter_timeout=10), memory_limit=200 * 2**20)
    async with await engine.open(SOURCE, catalog=catalog) as opened:
        opened.catalog_calls = catalog.calls  # type: ignore[attr-defined]
        yield opened


async def run(session: RestrictedFilterSession, events: list[dict[str, Any]]) -> list[FilterOutcome]:
    return await from_deep_in_the_stack(lambda: session.run(events))


@pytest.mark.parametrize("depth", [970, 5000])
async def test_deeply_nested_call_arguments_fail_that_call_only(
    session: RestrictedFilterSession, depth: int
) -> None:
    outcomes = await run(session, [{"k": "nest", "depth": depth}, {"k": "plain"}])
    assert outcomes[0].error_type == "CatalogError"
    assert outcomes[0].error is not None
    assert "read_resource(): arguments are nested more than 100 levels deep" in outcomes[0].error
    assert outcomes[1] == FilterOutcome(line="count 2")  # same worker, same scope
    assert session.restarts == 0
    assert session.catalog_calls == []  # type: ignore[attr-defined]


async def test_oversized_call_arguments_fail_that_call_only(session: RestrictedFilterSession) -> None:
    outcomes = await run(session, [{"k": "big", "size": 3 * 2**20}, {"k": "plain"}])
    assert outcomes[0].error_type == "CatalogError"
    assert "memo_get(): arguments are 3,145,739 bytes; at most 1,048,576" in str(outcomes[0].error)
    assert outcomes[1] == FilterOutcome(line="count 2")
    assert session.restarts == 0


@pytest.mark.parametrize("depth", [970, 3000])
async def test_a_deeply_nested_answer_fails_that_call_only(
    session: RestrictedFilterSession, depth: int
) -> None:
    outcomes = await run(session, [{"k": "answer", "depth": depth}, {"k": "plain"}])
    assert outcomes[0].error_type == "CatalogError"
    assert "deep_tool(): its answer is nested more than 100 levels deep" in str(outcomes[0].error)
    assert outcomes[1] == FilterOutcome(line="count 2")
    assert session.restarts == 0


async def test_a_modestly_nested_answer_still_arrives(session: RestrictedFilterSession) -> None:
    outcomes = await run(session, [{"k": "answer", "depth": 90}])
    assert outcomes == [FilterOutcome(line="count 1")]  # the call returned
    assert session.catalog_calls == [("deep_tool", {"depth": 90})]  # type: ignore[attr-defined]


async def test_a_deeply_nested_event_fails_that_event_only(session: RestrictedFilterSession) -> None:
    outcomes = await run(
        session, [{"k": "plain"}, {"k": "plain", "value": nested(5000)}, {"k": "plain", "value": nested(50)}]
    )
    assert outcomes[0] == FilterOutcome(line="count 1")
    assert outcomes[1].error_type == "event"
    assert "the event is nested too deeply to hand to the filter" in str(outcomes[1].error)
    assert outcomes[2] == FilterOutcome(line="count 2")
    assert session.restarts == 0
