"""WatchManager over the in-memory FakeSource, with a FakeClock (no real waits)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from asyncai_watch.core.limits import Limits
from asyncai_watch.core.notice import SOURCE_WATCH
from asyncai_watch.errors import (
    FilterError,
    InvalidWatchNameError,
    LimitError,
    NotWatchableError,
    RoutingError,
    SubscriptionLostError,
    WatchError,
)
from asyncai_watch.info import ResourceInfo, WatchInfo, resource_example
from asyncai_watch.mcp.source import ListedResource, ToolInfo
from asyncai_watch.runtime.manager import WatchManager
from asyncai_watch.testing import FakeClock, FakeSource
from tests.support.managers import EXAMPLE, NOTES, manager, memo_fake, next_notice

pytestmark = pytest.mark.trio  # backend-neutral: the anyio tests also run under trio


@pytest.mark.anyio
async def test_start_push_notice() -> None:
    fake = memo_fake()
    async with manager(fake) as m:
        started = await m.watch_start("notes", NOTES)
        assert (started.name, started.uri, started.shape, started.status) == (
            "notes",
            NOTES,
            "state",
            "running",
        )
        assert started.server == "memo"
        # Subscribe first, then the baseline read: no change can fall between them.
        assert [c for c in fake.calls if c[1] == NOTES] == [
            ("subscriptions/listen", NOTES),
            ("resources/read", NOTES),
        ]
        assert fake.update(NOTES, {"owner": "ann"}) == 1
        notice = await next_notice(m)
        assert notice.source == SOURCE_WATCH
        assert notice.text == "ADDED owner"
        assert dict(notice.meta) == {"name": "notes", "uri": NOTES}
        fake.update(NOTES, {"owner": "bob"})
        notice = await next_notice(m)
        assert notice.text.startswith("MODIFIED owner")
        assert m.watch_list() == [
            WatchInfo(
                name="notes",
                uri=NOTES,
                status="running",
                shape="state",
                server="memo",
                protocol="2026-07-28",
                events=2,
                notices=2,
            )
        ]
    # Leaving the manager cancels the watch: its subscription is closed.
    assert fake.listeners() == 0


@pytest.mark.anyio
async def test_state_read_coalesces_writes_into_one_net_diff() -> None:
    fake = memo_fake()
    async with manager(fake) as m:
        await m.watch_start("notes", NOTES)
        gate = fake.gate_reads(NOTES)
        fake.update(NOTES, {"a": 1})
        await gate.wait_blocked()  # the manager's re-read is parked at the gate
        fake.update(NOTES, {"a": 1, "b": 2})
        fake.update(NOTES, {"b": 3})
        gate.open()
        notice = await next_notice(m)
        # Changes that land before one read become one diff: the net change from {} to {"b": 3}.
        assert notice.text == "ADDED b"
        # The two pushes during the held read coalesced into one more read, which sees no change.
        await fake.wait_requests("resources/read", 3)
        fake.update(NOTES, {"b": 4})
        assert (await next_notice(m)).text.startswith("MODIFIED b")


@pytest.mark.anyio
async def test_event_log_by_seq_with_gap() -> None:
    fake = memo_fake()
    uri = "memo://events"
    fake.resources.append(
        ListedResource(uri=uri, name="events", mime_type="application/vnd.asyncai.events+json")
    )
    obj = {"metadata": {"name": "x", "namespace": "default"}}
    fake.set_events(uri, [{"seq": 1, "type": "ADDED", "object": obj}])
    async with manager(fake) as m:
        assert (await m.watch_start("ev", uri)).shape == "event-log"
        fake.set_events(
            uri, [{"seq": 1, "type": "ADDED", "object": obj}, {"seq": 2, "type": "DELETED", "object": obj}]
        )
        fake.push(uri)
        assert (await next_notice(m)).text == "DELETED default/x"
        # seq 3 fell out of the ring before we read: a GAP, then seq 4.
        fake.set_events(uri, [{"seq": 4, "type": "ADDED", "object": obj}])
        fake.push(uri)
        text = (await next_notice(m)).text
        lines = text.splitlines()
        assert lines[0].startswith("GAP")
        assert lines[1] == "ADDED default/x"


@pytest.mark.anyio
async def test_body_error_becomes_an_error_line_and_the_watch_goes_on() -> None:
    fake = memo_fake()
    uri = "memo://events"
    fake.resources.append(
        ListedResource(uri=uri, name="events", mime_type="application/vnd.asyncai.events+json")
    )
    fake.set_events(uri, [])
    async with manager(fake) as m:
        await m.watch_start("ev", uri)
        fake.update(uri, "not json at all", mime_type="application/vnd.asyncai.events+json")
        assert (await next_notice(m)).text.startswith("ERROR")
        fake.set_events(uri, [{"seq": 1, "type": "ERROR", "message": "kubectl died"}])
        fake.push(uri)
        assert "kubectl died" in (await next_notice(m)).text
        assert fake.listeners(uri) == 1


@pytest.mark.anyio
async def test_read_failure_during_watch_is_an_error_line() -> None:
    fake = memo_fake()
    async with manager(fake) as m:
        await m.watch_start("notes", NOTES)
        fake.read_errors[NOTES] = RuntimeError("disk on fire")
        fake.push(NOTES)
        assert "disk on fire" in (await next_notice(m)).text
        del fake.read_errors[NOTES]
        fake.update(NOTES, {"k": 1})
        assert (await next_notice(m)).text == "ADDED k"


@pytest.mark.anyio
async def test_watch_stop_cancels_the_subscription() -> None:
    fake = memo_fake()
    async with manager(fake) as m:
        await m.watch_start("notes", NOTES)
        assert fake.listeners(NOTES) == 1
        assert await m.watch_stop("notes") is True
        assert fake.listeners(NOTES) == 0
        assert fake.update(NOTES, {"a": 1}) == 0  # nobody listens any more
        assert m.watch_list() == []
        assert await m.watch_stop("notes") is False
        # The name is free again.
        await m.watch_start("notes", NOTES)
        assert fake.listeners(NOTES) == 1


@pytest.mark.anyio
async def test_five_watch_limit() -> None:
    fake = memo_fake()
    async with manager(fake) as m:
        for i in range(5):
            await m.watch_start(f"w{i}", NOTES)
        with pytest.raises(LimitError, match=r"max_watches=5") as info:
            await m.watch_start("w5", NOTES)
        assert "w0" in str(info.value)
        # Five watches on one URI share one subscription.
        assert fake.listeners(NOTES) == 1
        assert len(m.watch_list()) == 5
        await m.watch_stop("w0")
        await m.watch_start("w5", NOTES)


@pytest.mark.anyio
async def test_bad_arguments_fail_clearly_and_subscribe_nothing() -> None:
    fake = memo_fake()

    def fmt(event: Any) -> str:
        return "x"

    async with manager(fake) as m:
        with pytest.raises(FilterError, match=r"source text.*function 'fmt'"):
            await m.watch_start("notes", NOTES, on_event=fmt)  # type: ignore[arg-type]
        with pytest.raises(FilterError, match="empty"):
            await m.watch_start("notes", NOTES, on_event="  ")
        for bad in ["", "has space", "x" * 65, "1abc"]:
            with pytest.raises(InvalidWatchNameError, match="invalid watch name"):
                await m.watch_start(bad, NOTES)
        with pytest.raises(InvalidWatchNameError, match="must be a string"):
            await m.watch_start(3, NOTES)  # type: ignore[arg-type]
        await m.watch_start("notes", NOTES)
        with pytest.raises(WatchError, match="already exists"):
            await m.watch_start("notes", "memo://readme")
        assert fake.requests["subscriptions/listen"] == 1
        assert fake.listeners() == 1


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_notice_buffer_must_be_a_positive_int(bad: Any) -> None:
    # 0 used to hang a restore: its notice is sent before `async with` returns, with no reader yet.
    with pytest.raises(ValueError, match=r"notice_buffer must be an int >= 1, got "):
        WatchManager([memo_fake()], notice_buffer=bad)


@pytest.mark.anyio
async def test_failed_baseline_read_fails_the_call_and_leaves_no_subscription() -> None:
    fake = memo_fake()
    fake.read_errors[NOTES] = LookupError("no such namespace 'prod'; did you mean: default")
    async with manager(fake) as m:
        with pytest.raises(WatchError, match="did you mean: default"):
            await m.watch_start("notes", NOTES)
        assert fake.requests["subscriptions/listen"] == 1
        assert fake.listeners() == 0
        assert m.watch_list() == []
        del fake.read_errors[NOTES]
        await m.watch_start("notes", NOTES)


@pytest.mark.anyio
async def test_a_legacy_server_is_watched_one_subscription_per_uri_and_unsubscribed_at_the_end() -> None:
    legacy = memo_fake("old", protocol_version="2025-11-25")
    async with manager(legacy) as m:
        started = await m.watch_start("notes", NOTES)
        assert started.protocol == "2025-11-25"
        await m.watch_start("readme", "memo://readme")
        await m.watch_start("notes-again", NOTES)
        assert legacy.requests["resources/subscribe"] == 2  # one per URI, never one per watch
        assert legacy.requests["subscriptions/listen"] == 0
        legacy.update(NOTES, {"owner": "ann"})
        assert {(await next_notice(m)).text for _ in range(2)} == {"ADDED owner"}
        assert await m.watch_stop("notes")
        assert legacy.listeners(NOTES) == 1  # another watch is still on it
        assert await m.watch_stop("notes-again")
        assert legacy.listeners(NOTES) == 0  # the last one: unsubscribed
        assert legacy.listeners("memo://readme") == 1


@pytest.mark.anyio
async def test_a_server_that_advertises_no_subscribe_in_either_era_is_refused_in_one_line() -> None:
    for version in ("2025-11-25", "2026-07-28"):
        old = memo_fake("old", protocol_version=version, subscribable=False)
        async with manager(old) as m:
            with pytest.raises(NotWatchableError) as refused:
                await m.watch_start("notes", NOTES)
            assert str(refused.value) == (
                f"watch_start: server 'old' is not watchable: it speaks MCP {version} and does not "
                "advertise resources.subscribe (it serves neither subscriptions/listen nor "
                "resources/subscribe). Its tools and read_resource still work; docs/server-contract.md "
                "says what makes a server watchable."
            )
            assert old.requests["subscriptions/listen"] + old.requests["resources/subscribe"] == 0
            assert await m.read_resource(NOTES) == {}  # reads still work on such a connection


@pytest.mark.anyio
async def test_routing_exact_template_and_failure() -> None:
    memo = memo_fake()
    other = FakeSource("other", subscribable=False, resources=[ListedResource(uri="other://x", name="x")])
    other.set("other://x", "other text", mime_type="text/plain")
    memo.set("memo://notes/todo", {"key": "todo", "value": "milk"})
    async with manager(other, memo) as m:
        assert await m.read_resource("other://x") == "other text"
        assert await m.read_resource("memo://notes/todo") == {"key": "todo", "value": "milk"}
        await m.watch_start("todo", "memo://notes/todo")
        assert memo.listeners("memo://notes/todo") == 1
    lonely = FakeSource("lonely", subscribable=False, resources=[ListedResource(uri="a://b", name="b")])
    async with manager(lonely) as m:
        with pytest.raises(RoutingError, match="a://b"):
            await m.watch_start("nope", "zzz://unknown")


@pytest.mark.anyio
async def test_list_resources_and_read_resource() -> None:
    fake = memo_fake()
    async with manager(fake) as m:
        listed = await m.list_resources()
        by_uri = {r.uri: r for r in listed}
        assert by_uri[NOTES] == ResourceInfo(
            uri=NOTES,
            template=False,
            name="notes",
            description=f"The memo as a JSON object.\nExample: {EXAMPLE}",
            mime_type="application/json",
            server="memo",
            watchable=True,
            protocol="2026-07-28",
        )
        assert by_uri[NOTES].example == EXAMPLE
        assert by_uri["memo://notes/{key}"].template is True
        assert by_uri["memo://notes/{key}"].example == 'await watch_start(name="n", uri="memo://notes/todo")'
        assert by_uri["memo://readme"].example is None
        fake.set(NOTES, {"a": [1, 2]})
        assert await m.read_resource(NOTES) == {"a": [1, 2]}
        assert await m.read_resource("memo://readme") == "hello"


def test_resource_example() -> None:
    assert resource_example("x\nExample: await f()  ") == "await f()"
    assert resource_example("no example") is None
    assert resource_example("") is None


@pytest.mark.anyio
async def test_resubscribe_after_end_delivers_changes_made_during_the_outage() -> None:
    clock = FakeClock()
    fake = memo_fake()
    async with manager(fake, clock=clock) as m:
        await m.watch_start("notes", NOTES)
        fake.end(NOTES)
        await clock.wait_for_deadline(1.0)  # backoff 1 s before the first attempt
        assert fake.listeners(NOTES) == 0
        fake.set(NOTES, {"during": "outage"})  # no listener: nobody is told
        clock.advance(1.0)
        assert (await next_notice(m)).text == "ADDED during"
        assert fake.listeners(NOTES) == 1
        assert fake.requests["subscriptions/listen"] == 2
        fake.update(NOTES, {"during": "outage", "after": 1})
        assert (await next_notice(m)).text == "ADDED after"
        # Lost (abrupt) works the same way.
        fake.lose(NOTES)
        await clock.wait_for_deadline(2.0)
        fake.set(NOTES, {"during": "outage", "after": 1, "more": 1})
        clock.advance(1.0)
        assert (await next_notice(m)).text == "ADDED more"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("ending", "failure"),
    [
        # The server ends the listen and refuses every re-listen.
        ("end", lambda i: ConnectionError(f"refused {i}")),
        # The listen is lost and every re-listen is lost before its ack (e.g. "not acknowledged
        # within 30 s"): these count as failures too, or the watch would retry every 1 s forever.
        ("lose", lambda i: SubscriptionLostError(f"lost before the ack {i}")),
    ],
)
async def test_resubscribe_gives_up_after_five_failures(
    ending: str, failure: Callable[[int], BaseException]
) -> None:
    clock = FakeClock()
    fake = memo_fake()
    async with manager(fake, clock=clock) as m:
        await m.watch_start("notes", NOTES)
        fake.listen_failures = [failure(i) for i in range(5)]
        getattr(fake, ending)(NOTES)
        delays = []
        for _ in range(5):
            await clock.wait_for_sleepers(1)
            (deadline,) = clock.deadlines()
            delays.append(deadline - clock.now())
            clock.advance(deadline - clock.now())
        notice = await next_notice(m)
        assert delays == [1.0, 2.0, 4.0, 8.0, 16.0]
        assert notice.meta["failed"] == "true"
        assert "5 resubscribe attempts failed" in notice.text
        assert str(failure(4)) in notice.text
        assert fake.requests["subscriptions/listen"] == 6
        (item,) = m.watch_list()
        assert item.status == "failed"
        # Nothing runs any more for it: no task sleeps on the clock.
        assert clock.sleepers == 0
        # A failed watch can be started again under its name.
        await m.watch_start("notes", NOTES)
        assert m.watch_list()[0].status == "running"


@pytest.mark.anyio
async def test_resubscribe_delays_are_jittered_by_default_with_an_injected_random_source() -> None:
    # Clients of a restarted server must not all come back at the same moments: by default each
    # delay loses up to 20 % at random; the random source is injectable like the clock.
    clock = FakeClock()
    fake = memo_fake()
    draws = iter([0.5, 0.0, 0.99])
    limits = Limits(debounce_quiet=0, debounce_max_wait=0)
    async with manager(fake, clock=clock, limits=limits, random=lambda: next(draws)) as m:
        await m.watch_start("notes", NOTES)
        fake.listen_failures = [ConnectionError("refused"), ConnectionError("refused")]
        fake.end(NOTES)
        delays = []
        for _ in range(3):
            await clock.wait_for_sleepers(1)
            (deadline,) = clock.deadlines()
            delays.append(deadline - clock.now())
            clock.advance(deadline - clock.now())
        await fake.wait_listeners(NOTES, 1)
        assert delays == pytest.approx([0.9, 2.0, 4.0 * (1 - 0.2 * 0.99)])


@pytest.mark.anyio
async def test_failure_counter_resets_after_a_healthy_subscription() -> None:
    clock = FakeClock()
    fake = memo_fake()
    async with manager(fake, clock=clock) as m:
        await m.watch_start("notes", NOTES)
        fake.listen_failures = [ConnectionError("refused")]
        fake.end(NOTES)
        await clock.wait_for_deadline(1.0)
        clock.advance(1.0)  # attempt 1 fails
        await clock.wait_for_deadline(3.0)  # attempt 2 after 2 s
        clock.advance(2.0)
        await fake.wait_listeners(NOTES, 1)
        fake.update(NOTES, {"x": 1})  # the new subscription is proven healthy
        assert (await next_notice(m)).text == "ADDED x"
        fake.end(NOTES)
        await clock.wait_for_sleepers(1)
        assert clock.deadlines() == [clock.now() + 1.0]  # back to the first delay
        # A subscription that ends before any update (and within 16 s) counts as a failure.
        clock.advance(1.0)
        await fake.wait_listeners(NOTES, 1)
        fake.end(NOTES)
        await clock.wait_for_sleepers(1)
        assert clock.deadlines() == [clock.now() + 2.0]
        # One that stays up for resubscribe_max (16 s), even without updates, is healthy too.
        clock.advance(2.0)
        await fake.wait_listeners(NOTES, 1)
        clock.advance(16.0)
        fake.end(NOTES)
        await clock.wait_for_sleepers(1)
        assert clock.deadlines() == [clock.now() + 1.0]


@pytest.mark.anyio
async def test_nothing_runs_while_healthy() -> None:
    clock = FakeClock()
    fake = memo_fake()
    async with manager(fake, clock=clock, limits=Limits()) as m:
        await m.watch_start("notes", NOTES)
        before = sum(fake.requests.values())
        await anyio.wait_all_tasks_blocked()
        assert clock.sleepers == 0  # no timer is armed while nothing changed
        assert sum(fake.requests.values()) == before


@pytest.mark.anyio
async def test_trailing_debounce_and_max_wait() -> None:
    clock = FakeClock()
    fake = memo_fake()
    limits = Limits(debounce_quiet=3.0, debounce_max_wait=15.0)
    async with manager(fake, clock=clock, limits=limits) as m:
        await m.watch_start("notes", NOTES)
        fake.update(NOTES, {"a": 1})
        await clock.wait_for_deadline(3.0)
        clock.advance(2.0)
        fake.update(NOTES, {"a": 1, "b": 1})
        await clock.wait_for_deadline(5.0)  # each line moves the flush 3 s later
        clock.advance(2.9)
        await anyio.wait_all_tasks_blocked()
        assert m.notices.statistics().current_buffer_used == 0
        clock.advance(0.1)
        assert (await next_notice(m)).text == "ADDED a\nADDED b"
        # A steady stream: the flush is capped at 15 s after the burst's first line.
        start = clock.now()
        state: dict[str, int] = {"a": 1, "b": 1}
        for i in range(8):
            state[f"k{i}"] = i
            fake.update(NOTES, dict(state))
            await clock.wait_for_deadline(min(clock.now() + 3.0, start + 15.0))
            await anyio.wait_all_tasks_blocked()  # the last line does not move the capped deadline
            clock.advance(2.0)
        # 8 lines at start+0..14; the cap fires at start+15 with all of them.
        assert clock.now() == start + 16.0  # trailing alone would have waited until start + 17
        notice = await next_notice(m)
        assert notice.text.splitlines() == [f"ADDED k{i}" for i in range(8)]


@pytest.mark.anyio
async def test_per_object_dedupe_through_the_manager() -> None:
    fake = memo_fake()
    uri = "memo://events"
    fake.resources.append(
        ListedResource(uri=uri, name="events", mime_type="application/vnd.asyncai.events+json")
    )
    obj = {"metadata": {"name": "x", "namespace": "d"}}
    events: list[dict[str, Any]] = []
    fake.set_events(uri, events)
    async with manager(fake) as m:
        await m.watch_start("ev", uri)
        for seq, typ in [(1, "MODIFIED"), (2, "MODIFIED")]:
            events.append({"seq": seq, "type": typ, "object": obj})
        fake.set_events(uri, events)
        fake.push(uri)
        # Two equal lines for one object in one update: the second is dropped.
        assert (await next_notice(m)).text == "MODIFIED d/x"
        events.append({"seq": 3, "type": "MODIFIED", "object": obj})
        fake.set_events(uri, events)
        fake.push(uri)  # again the same line for d/x: dropped, no notice
        events.append({"seq": 4, "type": "ADDED", "object": {"metadata": {"name": "y", "namespace": "d"}}})
        fake.set_events(uri, events)
        fake.push(uri)
        assert (await next_notice(m)).text == "ADDED d/y"
        assert m.watch_list()[0].events == 4


@pytest.mark.anyio
async def test_noop_modified_is_dropped_before_the_line() -> None:
    fake = memo_fake()
    uri = "memo://events"
    fake.resources.append(
        ListedResource(uri=uri, name="events", mime_type="application/vnd.asyncai.events+json")
    )
    obj = {"metadata": {"name": "x", "namespace": "d", "resourceVersion": "1"}, "spec": {"a": 1}}
    bumped = {"metadata": {"name": "x", "namespace": "d", "resourceVersion": "2"}, "spec": {"a": 1}}
    fake.set_events(uri, [])
    async with manager(fake) as m:
        await m.watch_start("ev", uri)
        fake.set_events(
            uri,
            [
                {"seq": 1, "type": "MODIFIED", "object": bumped, "old": obj},
                {"seq": 2, "type": "DELETED", "object": bumped},
            ],
        )
        fake.push(uri)
        assert (await next_notice(m)).text == "DELETED d/x"
        assert m.watch_list()[0].events == 1


@pytest.mark.anyio
async def test_manager_close_cancels_every_watch() -> None:
    fake = memo_fake()
    async with manager(fake) as m:
        for i, uri in enumerate([NOTES, "memo://readme", NOTES]):
            await m.watch_start(f"w{i}", uri)
        assert fake.subscribed() == {NOTES, "memo://readme"}
    assert fake.listeners() == 0
    with pytest.raises(anyio.EndOfStream):
        m.notices.receive_nowait()
    with pytest.raises(RuntimeError, match="not running"):
        await m.watch_start("late", NOTES)


# -- filters (the real RestrictedPython engine, in its worker process) -------------------------


@pytest.mark.anyio
async def test_filter_drop_and_transform_with_a_persistent_scope() -> None:
    fake = memo_fake()
    on_event = """
try:
    seen += 1
except NameError:
    seen = 1
f"{seen}: {event['type'].lower()} {event['key']}={event['new']}" if event["key"] != "skip" else None
"""
    async with manager(fake) as m:
        await m.watch_start("notes", NOTES, on_event=on_event)
        fake.update(NOTES, {"a": 1, "skip": 0})
        assert (await next_notice(m)).text == "1: added a=1"
        fake.update(NOTES, {"a": 2, "skip": 0, "b": {"x": 1}})
        # `seen` persisted across events; a non-str value would be compact JSON.
        assert (await next_notice(m)).text == "3: modified a=2\n4: added b={'x': 1}"
        assert m.watch_list()[0].events == 4


@pytest.mark.anyio
async def test_filter_non_str_value_is_compact_json_and_print_counts() -> None:
    fake = memo_fake()
    async with manager(fake) as m:
        await m.watch_start("notes", NOTES, on_event='{"k": event["key"], "n": event["new"]}')
        fake.update(NOTES, {"a": 1})
        assert (await next_notice(m)).text == '{"k":"a","n":1}'
    async with manager(fake) as m:
        await m.watch_start("p", NOTES, on_event='print("saw", event["key"])')
        fake.update(NOTES, {"a": 1, "b": 2})
        assert (await next_notice(m)).text.strip() == "saw b"


@pytest.mark.anyio
async def test_filter_can_use_common_codecs_in_its_locked_down_worker() -> None:
    fake = memo_fake()
    async with manager(fake) as m:
        code = 'event["key"].encode("cp1252").decode("latin-1") + " " + "bücher.de".encode("idna").decode()'
        await m.watch_start("notes", NOTES, on_event=code)
        fake.update(NOTES, {"é": 1})
        assert (await next_notice(m)).text == "é xn--bcher-kva.de"


@pytest.mark.anyio
async def test_filter_validation_fails_watch_start_and_subscribes_nothing() -> None:
    fake = memo_fake()
    async with manager(fake) as m:
        with pytest.raises(FilterError, match="compile"):
            await m.watch_start("bad", NOTES, on_event="event[")
        with pytest.raises(FilterError, match="NameError"):
            await m.watch_start("bad", NOTES, on_event="fmt(event)")
        with pytest.raises(FilterError):
            await m.watch_start("bad", NOTES, on_event="<function fmt at 0x7f00>")
        assert fake.requests["subscriptions/listen"] == 0
        assert m.watch_list() == []
        # Missing keys on the sample event are fine.
        await m.watch_start("ok", NOTES, on_event='event["new"]["deep"]["x"]')
        assert fake.listeners(NOTES) == 1


@pytest.mark.anyio
async def test_filter_runtime_error_is_a_notice_line_and_the_watch_goes_on() -> None:
    fake = memo_fake()
    async with manager(fake) as m:
        await m.watch_start("notes", NOTES, on_event='1 / 0 if event["key"] == "boom" else event["key"]')
        fake.update(NOTES, {"boom": 1})
        text = (await next_notice(m)).text
        assert text.startswith("filter error:")
        assert "ZeroDivisionError" in text
        fake.update(NOTES, {"boom": 1, "fine": 1})
        assert (await next_notice(m)).text == "fine"


@pytest.mark.anyio
async def test_filter_is_denied_mutating_tools_and_watch_builtins() -> None:
    fake = memo_fake()
    on_event = """
out = None
if event["key"] == "write":
    memo_set(key="x", value="y")
elif event["key"] == "watch":
    watch_start(name="w2", uri="memo://notes")
else:
    out = f"read-only: {memo_get(key=event['key'])['value']} {read_resource(uri='memo://readme')}"
out
"""
    async with manager(fake) as m:
        # Refused at start-up, even behind an `if`: it would fail on every event otherwise.
        with pytest.raises(FilterError) as refused:
            await m.watch_start("notes", NOTES, on_event=on_event)
        message = str(refused.value)
        assert "memo_set" in message
        assert "watch_start" in message
        assert "not read-only" in message
        assert "A filter may call: list_resources, memo_get, read_resource" in message
        assert "memo_set" not in [n for n, _ in fake.tool_calls]  # nothing mutating reached the server
        assert m.watch_list() == []
        read_only = (
            "f\"read-only: {memo_get(key=event['key'])['value']} {read_resource(uri='memo://readme')}\""
        )
        await m.watch_start("notes", NOTES, on_event=read_only)
        fake.update(NOTES, {"r": 1})
        assert (await next_notice(m)).text == "read-only: r hello"
        assert fake.tool_calls[-1] == ("memo_get", {"key": "r"})


@pytest.mark.anyio
async def test_closed_notice_stream_does_not_crash_the_manager() -> None:
    fake = memo_fake()
    async with manager(fake) as m:
        await m.watch_start("notes", NOTES)
        m.notices.close()  # the agent stopped reading
        fake.update(NOTES, {"a": 1})
        await fake.wait_requests("resources/read", 2)
        await anyio.wait_all_tasks_blocked()
        assert m.watch_list()[0].notices == 1
        assert fake.listeners(NOTES) == 1


@pytest.mark.anyio
async def test_odd_or_shadowing_tool_names_do_not_break_filtered_watches() -> None:
    # A tool whose name is no identifier, or that is named like a built-in, must not make every
    # filtered watch_start fail: it is renamed (t_3d_render) or left out of the filter's catalog.
    fake = memo_fake()
    fake.tools["3d-render"] = (ToolInfo(name="3d-render", read_only=True), lambda a: "rendered")
    fake.tools["read_resource"] = (ToolInfo(name="read_resource", read_only=True), lambda a: "shadow")
    async with manager(fake) as m:
        on_event = "f\"{t_3d_render()} {read_resource(uri='memo://readme')}\""
        await m.watch_start("notes", NOTES, on_event=on_event)
        fake.update(NOTES, {"a": 1})
        assert (await next_notice(m)).text == "rendered hello"
