"""The NDJSON log contract: one JSON object per line, watch.notice always, the rest verbose."""

from __future__ import annotations

import contextlib
import io
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest

from asyncai_agent.cli import main as agent_main
from asyncai_watch import log
from asyncai_watch.cli import main as cli_main
from asyncai_watch.core.limits import Limits
from asyncai_watch.runtime.manager import WatchManager
from asyncai_watch.testing import FakeClock
from tests.support.managers import IMMEDIATE, NOTES, memo_fake


@pytest.fixture
def ndjson() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    yield stream
    for h in list(log.logger.handlers):
        log.logger.removeHandler(h)
    log.logger.setLevel(logging.NOTSET)
    log.logger.propagate = True


def records(stream: io.StringIO) -> list[dict[str, Any]]:
    out = []
    for line in stream.getvalue().splitlines():
        rec = json.loads(line)  # every line is one JSON object
        assert isinstance(rec, dict)
        out.append(rec)
    return out


async def scenario(verbose: bool) -> None:
    """start, a kept event, a dropped event, a notice, resubscribe, give up, stop."""
    clock = FakeClock()
    fake = memo_fake()
    limits = Limits(debounce_quiet=0, debounce_max_wait=0, resubscribe_attempts=1, resubscribe_jitter=0)
    async with WatchManager([fake], limits=limits, clock=clock, verbose=verbose) as m:
        await m.watch_start("notes", NOTES)
        fake.update(NOTES, {"a": 1})
        with anyio.fail_after(5):
            await m.notices.receive()
        await m.watch_stop("notes")
        await m.watch_start("gone", NOTES)
        fake.listen_failures = [ConnectionError("refused")]
        fake.end(NOTES)
        await clock.wait_for_sleepers(1)
        clock.advance(1.0)
        with anyio.fail_after(5):
            failed = await m.notices.receive()
        assert failed.meta["failed"] == "true"


@pytest.mark.anyio
async def test_only_watch_notice_without_verbose(ndjson: io.StringIO) -> None:
    log.configure_ndjson(ndjson, verbose=False)
    await scenario(verbose=False)
    recs = records(ndjson)
    assert {r["event"] for r in recs} == {"watch.notice"}
    first = recs[0]
    assert first["watch"] == "notes"
    assert first["uri"] == NOTES
    assert first["text"] == "ADDED a"
    assert first["lines"] == 1
    assert first["level"] == "INFO"
    assert first["logger"] == "asyncai_watch"
    assert "ts" in first


@pytest.mark.anyio
@pytest.mark.parametrize("where", ["logging", "manager"])
async def test_verbose_logs_every_event(ndjson: io.StringIO, where: str) -> None:
    # Verbose can come from the logging config or from WatchManager(verbose=True).
    log.configure_ndjson(ndjson, verbose=where == "logging")
    await scenario(verbose=where == "manager")
    recs = records(ndjson)
    events = [r["event"] for r in recs]
    for name in (
        "watch.started",
        "watch.subscribed",
        "watch.event",
        "watch.notice",
        "watch.stopped",
        "watch.resubscribing",
        "watch.failed",
    ):
        assert name in events, name
    started = next(r for r in recs if r["event"] == "watch.started")
    assert started | {"ts": None} == started | {
        "watch": "notes",
        "uri": NOTES,
        "shape": "state",
        "server": "memo",
        "filtered": False,
        "restored": False,
        "ts": None,
    }
    ev = next(r for r in recs if r["event"] == "watch.event")
    assert (ev["type"], ev["key"], ev["kept"], ev["outcome"], ev["line"]) == (
        "ADDED",
        "a",
        True,
        "kept",
        "ADDED a",
    )
    resub = next(r for r in recs if r["event"] == "watch.resubscribing")
    assert (resub["watch"], resub["attempt"], resub["delay"]) == ("gone", 1, 1.0)
    failed = next(r for r in recs if r["event"] == "watch.failed")
    assert failed["attempts"] == 1
    assert "refused" in failed["reason"]
    stopped = [r for r in recs if r["event"] == "watch.stopped"]
    assert [(r["watch"], r["reason"]) for r in stopped] == [("notes", "watch_stop")]


@pytest.mark.anyio
async def test_dropped_events_and_restore_are_logged(ndjson: io.StringIO, tmp_path: Any) -> None:
    log.configure_ndjson(ndjson, verbose=True)
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"version": 1, "watches": [{"name": "n", "uri": NOTES, "on_event": None}]}))
    fake = memo_fake()
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock(), watch_state=path) as m:
        with anyio.fail_after(5):
            await m.notices.receive()
        obj = {"metadata": {"name": "x", "namespace": "d", "resourceVersion": "1"}}
        uri = "memo://events"
        fake.set_events(uri, [])
        await m.watch_start("ev", uri)
        fake.set_events(
            uri,
            [
                {"seq": 1, "type": "MODIFIED", "object": obj, "old": obj},
                {"seq": 2, "type": "DELETED", "object": obj},
            ],
        )
        fake.push(uri)
        with anyio.fail_after(5):
            await m.notices.receive()
    recs = records(ndjson)
    restored = next(r for r in recs if r["event"] == "watch.restored")
    assert restored["restored"] == ["n"]
    assert restored["retrying"] == []
    assert restored["restore_failed"] == []
    outcomes = [(r["type"], r["outcome"], r["kept"]) for r in recs if r["event"] == "watch.event"]
    assert outcomes == [("MODIFIED", "noop", False), ("DELETED", "kept", True)]


def test_configure_twice_replaces_the_handler(ndjson: io.StringIO) -> None:
    other = io.StringIO()
    log.configure_ndjson(other)
    log.configure_ndjson(ndjson)
    log.emit("watch.notice", watch="w", uri="u", text="t", lines=1)
    assert other.getvalue() == ""
    assert records(ndjson)[0]["event"] == "watch.notice"


@pytest.mark.anyio
async def test_a_line_dedupe_drops_is_logged_as_deduped_not_kept(ndjson: io.StringIO) -> None:
    log.configure_ndjson(ndjson, verbose=True)
    fake = memo_fake()
    uri = "memo://events"
    obj = {"metadata": {"name": "x", "namespace": "d"}}
    fake.set_events(uri, [])
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock()) as m:
        await m.watch_start("ev", uri)
        # Two equal lines for one object in one update: dedupe sends the first only.
        fake.set_events(uri, [{"seq": s, "type": "MODIFIED", "object": obj} for s in (1, 2)])
        fake.push(uri)
        with anyio.fail_after(5):
            notice = await m.notices.receive()
        assert notice.text == "MODIFIED d/x"
    logged = [(r["seq"], r["outcome"], r["kept"]) for r in records(ndjson) if r["event"] == "watch.event"]
    assert logged == [(1, "kept", True), (2, "deduped", False)]


def test_events_enabled_says_whether_events_would_log(ndjson: io.StringIO) -> None:
    log.configure_ndjson(ndjson, verbose=False)
    assert not log.events_enabled()  # watch.event is DEBUG: nobody listens
    assert log.events_enabled(verbose=True)  # a verbose emitter logs it at INFO
    log.configure_ndjson(ndjson, verbose=True)
    assert log.events_enabled()


@pytest.mark.parametrize(
    "run",
    [
        pytest.param(lambda: cli_main(["serve", "--server", "x", "--ring", "0"]), id="asyncai-watch serve"),
        pytest.param(lambda: agent_main(["--max-rounds", "0"]), id="asyncai-agent"),
    ],
)
def test_a_command_run_in_process_leaves_no_handler_on_its_stderr(
    run: Callable[[], int], capsys: pytest.CaptureFixture[str]
) -> None:
    """A command's main() logs NDJSON to its stderr while it runs; a caller that goes on (a test,
    a program) must not find that handler writing to the stream after it is closed."""
    before = list(log.logger.handlers)
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        assert run() == 2
    stderr.close()
    assert log.logger.handlers == before
    log.emit("watch.notice", watch="w", uri="u", text="t", lines=1)
    assert "Logging error" not in capsys.readouterr().err
