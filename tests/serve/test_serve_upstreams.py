"""serve's upstream links on a FakeClock: background connects, backoff, bounded waits, losses.

Each link connects through a factory that the test scripts (fail, fail, succeed, ...); time
moves only when the test advances the clock, and every wait is on the link's own status
changes, so nothing here sleeps.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime

import anyio
import pytest

from asyncai_watch.core.backoff import Backoff
from asyncai_watch.core.resources import ListedResource
from asyncai_watch.errors import ServerConnectionError
from asyncai_watch.mcp.source import ResourceSource
from asyncai_watch.serve.config import Upstream
from asyncai_watch.serve.upstreams import RETRY, UpstreamLink, UpstreamStatus, UpstreamUnavailableError
from asyncai_watch.testing import FakeClock, FakeSource

pytestmark = pytest.mark.anyio

WAIT = 30.0


class Script:
    """A connect factory: each attempt takes the next outcome (an exception, or a source)."""

    def __init__(self, *outcomes: BaseException | FakeSource) -> None:
        self.outcomes = list(outcomes)
        self.attempts = 0
        self.gate: anyio.Event | None = None
        """When set, an attempt waits for it before it answers (an upstream that is slow to start)."""

    def __call__(self) -> AbstractAsyncContextManager[ResourceSource]:
        return self._attempt()

    @asynccontextmanager
    async def _attempt(self) -> AsyncIterator[ResourceSource]:
        self.attempts += 1
        if self.gate is not None:
            await self.gate.wait()
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        yield outcome


def fake(name: str = "files") -> FakeSource:
    source = FakeSource(name, resources=[ListedResource(uri="file:///srv/cfg.json", name="cfg")])
    source.contents["file:///srv/cfg.json"] = ('{"port": 1}', "application/json")
    return source


async def until(link: UpstreamLink, check: Callable[[UpstreamStatus], bool]) -> UpstreamStatus:
    with anyio.fail_after(WAIT):
        status = link.status
        while not check(status):
            status = await link.changed()
        return status


def link_for(script: Script, clock: FakeClock, *, wait: float = 5.0) -> UpstreamLink:
    return UpstreamLink("files", script, target="command 'files /srv'", clock=clock, wait=wait)


async def test_a_failing_upstream_is_retried_with_backoff_and_named_until_it_connects() -> None:
    clock = FakeClock()
    refused = ServerConnectionError("cannot start MCP server command 'files /srv': No such file or directory")
    script = Script(refused, refused, fake())
    link = link_for(script, clock)
    async with anyio.create_task_group() as tg:
        tg.start_soon(link.run)
        failed = await until(link, lambda s: s.status == "failed")
        assert (failed.attempt, failed.error, failed.retry_at) == (1, str(refused), 1.0)  # RETRY: 1 s first
        # A call while it is down answers at once, with the reason and the next attempt.
        with pytest.raises(UpstreamUnavailableError) as caught:
            await link.read("file:///srv/cfg.json")
        assert str(caught.value) == (
            "upstream 'files' is not connected (command 'files /srv'): cannot start MCP server command "
            "'files /srv': No such file or directory; next attempt in 1.0 s"
        )
        shown = failed.as_dict(clock.now(), datetime(2026, 1, 1, tzinfo=UTC))
        assert shown["state"] == "failed"
        assert shown["retry_at"] == "2026-01-01T00:00:01.000+00:00"
        assert shown["retry_in_s"] == 1.0

        await clock.wait_for_deadline(1.0)
        clock.advance(1.0)
        failed = await until(link, lambda s: s.status == "failed" and s.attempt == 2)
        assert failed.retry_at == clock.now() + 2.0  # doubled

        await clock.wait_for_deadline(clock.now() + 2.0)
        clock.advance(2.0)
        connected = await until(link, lambda s: s.status == "connected")
        assert connected.attempt == 3
        assert (link.protocol_version, link.watchable) == ("2026-07-28", True)
        assert (await link.read("file:///srv/cfg.json")).text == '{"port": 1}'
        tg.cancel_scope.cancel()
    assert script.attempts == 3


async def test_a_call_waits_for_an_attempt_under_way_but_no_longer_than_the_wait() -> None:
    clock = FakeClock()
    script = Script(fake(), fake())
    script.gate = anyio.Event()
    link = link_for(script, clock, wait=5.0)
    got: list[str] = []
    done = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(link.run)

        async def read() -> None:
            got.append((await link.read("file:///srv/cfg.json")).text)
            done.set()

        tg.start_soon(read)
        await clock.wait_for_deadline(5.0)  # the read is parked on its deadline, the attempt under way
        script.gate.set()  # the server answers: the waiting read goes on
        with anyio.fail_after(WAIT):
            await done.wait()
        tg.cancel_scope.cancel()
    assert got == ['{"port": 1}']


async def test_a_call_gives_up_on_an_attempt_that_outlasts_the_wait() -> None:
    clock = FakeClock()
    script = Script(fake())
    script.gate = anyio.Event()  # never set: the server never answers
    link = link_for(script, clock, wait=5.0)
    async with anyio.create_task_group() as tg:
        tg.start_soon(link.run)
        await anyio.lowlevel.checkpoint()

        async def advance_when_parked() -> None:
            await clock.wait_for_deadline(5.0)
            clock.advance(5.0)

        tg.start_soon(advance_when_parked)
        with anyio.fail_after(WAIT), pytest.raises(UpstreamUnavailableError) as caught:
            await link.list_resources()
        assert "upstream 'files' is still connecting (command 'files /srv'; attempt 1, 5.0 s so far)" in str(
            caught.value
        )
        # Past the wait, later calls do not wait again: a restore of many watches waits once.
        with pytest.raises(UpstreamUnavailableError):
            await link.list_resources()
        tg.cancel_scope.cancel()


async def test_a_lost_connection_is_remade_by_the_link_with_backoff() -> None:
    clock = FakeClock()
    first, second = fake(), fake()
    script = Script(first, ServerConnectionError("cannot connect: refused"), second)
    link = link_for(script, clock)
    async with anyio.create_task_group() as tg:
        tg.start_soon(link.run)
        await until(link, lambda s: s.status == "connected")
        first.read_errors["file:///srv/cfg.json"] = ServerConnectionError(
            "server 'files': read failed: the connection is closed"
        )
        with pytest.raises(ServerConnectionError):
            await link.read("file:///srv/cfg.json")
        lost = await until(link, lambda s: s.status == "failed")
        assert lost.error == "the connection was lost: server 'files': read failed: the connection is closed"
        assert lost.retry_at == clock.now() + RETRY.delay(0)
        await clock.wait_for_deadline(lost.retry_at)
        clock.advance(1.0)
        again = await until(link, lambda s: s.status == "failed" and s.attempt == 2)
        assert again.error == "cannot connect: refused"
        assert again.retry_at is not None
        await clock.wait_for_deadline(again.retry_at)
        clock.advance(2.0)
        await until(link, lambda s: s.status == "connected")
        assert (await link.read("file:///srv/cfg.json")).text == '{"port": 1}'
        tg.cancel_scope.cancel()


async def test_the_catalog_follower_waits_for_the_connection_without_a_bound() -> None:
    clock = FakeClock()
    script = Script(ServerConnectionError("refused"), fake())
    link = UpstreamLink(
        "files", script, target="x", clock=clock, wait=0.0, backoff=Backoff(initial=10.0, attempts=None)
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(link.run)
        await until(link, lambda s: s.status == "failed")

        entered = anyio.Event()

        async def follow() -> None:
            async with link.listen_list_changed():
                entered.set()

        tg.start_soon(follow)
        await clock.wait_for_deadline(10.0)
        clock.advance(10.0)
        with anyio.fail_after(WAIT):
            await entered.wait()
        tg.cancel_scope.cancel()


def test_names_are_fixed_before_connecting() -> None:
    assert Upstream(name="memo", url="http://127.0.0.1:8765/mcp").link_name == "memo"
    assert Upstream(name=None, url="http://127.0.0.1:8765/mcp").link_name == "127.0.0.1"
    assert Upstream(name=None, argv=("/usr/bin/python3", "-m", "asyncai_servers.memo")).link_name == (
        "asyncai_servers.memo"
    )
    assert Upstream(name=None, argv=("/venv/bin/asyncai-mcp-files", "/srv")).link_name == "asyncai-mcp-files"
