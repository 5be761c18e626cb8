"""A watcher's life as the manager and its runner tell it: each step a method, no field set from outside."""

from __future__ import annotations

import anyio
import pytest

from asyncai_watch import Limits, NotWatchableError, WatchError
from asyncai_watch.core.extract import Pending
from asyncai_watch.core.spec import WatchSpec
from asyncai_watch.errors import BaselineError, ServerError
from asyncai_watch.runtime.watcher import Watcher
from asyncai_watch.runtime.watches import Watches

pytestmark = pytest.mark.trio  # backend-neutral: the anyio tests also run under trio

NOTES = "memo://notes"


def watcher() -> Watcher:
    return Watcher(WatchSpec.checked("notes", NOTES, None), Limits(debounce_quiet=1, debounce_max_wait=5))


def test_a_watch_that_gives_up_is_failed_with_its_reason_and_returns_pending_then_the_failure() -> None:
    w = watcher()
    w.routed("memo", "2026-07-28", by_trial=False)
    w.joining()
    w.begin("state", lambda _: None)
    w.started(restored=False)
    w.read_failed("boom", now=0.0)  # a line pending for the next notice
    notices = w.give_up(5, "the server went away")
    assert [n.meta.get("failed") for n in notices] == [None, "true"]
    assert "ERROR reading memo://notes: boom" in notices[0].text
    assert "5 resubscribe attempts failed (last: the server went away)" in notices[1].text
    info = w.info()
    assert (info.status, info.error, info.server, info.protocol) == (
        "failed",
        "the server went away",
        "memo",
        "2026-07-28",
    )
    assert not w.live


@pytest.mark.anyio
@pytest.mark.parametrize(
    "cause",
    [
        NotWatchableError.for_server("memo", "2025-11-25"),
        BaselineError("memo://notes is served as application/json but its body is not JSON"),
    ],
)
async def test_a_start_failure_that_says_what_to_do_is_raised_as_it_is(cause: WatchError) -> None:
    w = watcher()
    w.joining()
    w.fail_start("whatever the feed said", cause)
    assert not w.joined_unsettled
    with anyio.fail_after(30):
        assert await w.begun() is cause
        await w.start_settled()  # watch_stop waits no longer


@pytest.mark.anyio
async def test_any_other_start_failure_is_a_watch_error_naming_watch_start_with_its_cause() -> None:
    cause = ServerError("memo", "resources/read", -32002, "no such note")
    w = watcher()
    w.joining()
    assert w.joined_unsettled
    w.fail_start("reading memo://notes from server 'memo' failed: ServerError: ...", cause)
    with anyio.fail_after(30):
        error = await w.begun()
    assert type(error) is WatchError
    assert str(error) == "watch_start: reading memo://notes from server 'memo' failed: ServerError: ..."
    assert error.__cause__ is cause


@pytest.mark.anyio
async def test_a_watch_that_began_settles_with_no_error_and_is_running_once_started() -> None:
    w = watcher()
    w.joining()
    w.begin("state", lambda _: None)
    with anyio.fail_after(30):
        assert await w.begun() is None
    assert w.info().status == "running"  # starting is listed as running
    w.started(restored=True)
    assert (w.status, w.info().shape) == ("running", "state")
    w.take(Pending(notes=("hello",)), now=0.0)
    assert w.delivery.deadline == 1.0


def test_the_table_keeps_a_failed_restore_saved_with_its_reason_and_a_failed_restart_gives_the_slot_back() -> (
    None
):
    watches = Watches(Limits(max_watches=2), verbose=False)
    spec = WatchSpec.checked("notes", NOTES, None)
    watches.keep_failed(spec, "ServerConnectionError: down")
    assert [(s.spec.name, s.error) for s in watches.saved()] == [("notes", "ServerConnectionError: down")]
    again, previous = watches.reserve("notes", NOTES, None)
    assert previous is not None
    assert previous.status == "restore_failed"
    assert watches.saved() == []  # a start in flight is not saved yet
    watches.release(again, previous)
    assert watches.get("notes") is previous
    assert watches.saved(without="notes") == []
