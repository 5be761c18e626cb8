"""``watch --json``: one object per notice, each valid against the schema shipped in the package."""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import jsonschema
import pytest

from asyncai_watch import McpResourceSource
from asyncai_watch.core.deliver import Delivery
from asyncai_watch.core.events import EVENTS_MIME_TYPE
from asyncai_watch.core.notice import Notice
from asyncai_watch.notice_json import NOTICE_SCHEMA, event_env, notice_record, notice_schema
from asyncai_watch.serve.channel import EVENTS_PER_NOTICE, entry_dict
from asyncai_watch.serve.ring import Entry
from tests.support.cli import WAIT, cli, wait_until_watching
from tests.support.fake_kubectl import FakeCluster
from tests.support.kcp_helpers import kcp_argv, kcp_env, write_kubeconfig
from tests.support.memo import memo_http_server
from tests.support.notice_events import LIMITS, watch

VALIDATOR = jsonschema.Draft202012Validator(notice_schema())


def valid(line: str | dict[str, Any]) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(line) if isinstance(line, str) else line
    VALIDATOR.validate(record)
    return record


def test_the_schema_is_a_valid_draft_2020_12_schema_shipped_in_the_package() -> None:
    jsonschema.Draft202012Validator.check_schema(notice_schema())
    assert notice_schema()["properties"]["schema"]["const"] == NOTICE_SCHEMA


def test_the_schema_refuses_an_object_without_events_or_with_an_unknown_event_type() -> None:
    notice = watch({"a": 1})
    notice.read({"a": 2}, 0.0)
    n = notice.delivery.due(1.0)
    assert n is not None
    record = notice_record(n)
    valid(record)
    with pytest.raises(jsonschema.ValidationError, match="'events' is a required property"):
        VALIDATOR.validate({k: v for k, v in record.items() if k != "events"})
    record["events"][0]["type"] = "RENAMED"
    with pytest.raises(jsonschema.ValidationError, match="RENAMED"):
        VALIDATOR.validate(record)


def _due(w: Any) -> Notice:
    n: Notice | None = w.delivery.due(100.0)
    assert n is not None
    return n


def test_gap_error_and_failure_notices_are_valid_and_typed() -> None:
    log = watch(
        {"log_id": "L", "events": [{"seq": 1, "type": "ADDED", "object": {"id": "a"}}]}, EVENTS_MIME_TYPE
    )
    log.read(
        {"log_id": "L", "events": [{"seq": 4, "type": "ADDED", "object": {"id": "b"}}]}, 0.0, EVENTS_MIME_TYPE
    )
    gap = valid(notice_record(_due(log), server="kcp"))
    assert [e["type"] for e in gap["events"]] == ["GAP", "ADDED"]
    assert gap["events"][0]["fields"]["missed"] == 2

    bad = watch({"a": 1})
    bad.read("{half", 0.0)
    error = valid(notice_record(_due(bad)))
    assert [e["type"] for e in error["events"]] == ["ERROR"]

    [failure] = Delivery("w", "memo://notes", LIMITS).failed("connection refused", 5)
    failed = valid(notice_record(failure))
    assert failed["failed"] is True
    assert [(e["type"], e["fields"]) for e in failed["events"]] == [("FAILED", {"attempts": 5})]


def test_serve_gives_each_pulled_notice_its_events_neutralized_and_capped() -> None:
    w = watch({})
    w.read({f"k{i:03}": "\u202eevil" for i in range(EVENTS_PER_NOTICE + 5)}, 0.0)
    notice = _due(w)
    assert len(notice.events) > EVENTS_PER_NOTICE
    pulled = entry_dict(Entry(id=1, notice=notice, time="2026-12-05T01:00:00Z"))
    assert len(pulled["events"]) == EVENTS_PER_NOTICE
    assert pulled["events_omitted"] == len(notice.events) - EVENTS_PER_NOTICE
    assert pulled["events"][0]["type"] == "NOTE"  # "105 changes in one update ..." comes first
    assert pulled["events"][1]["new"] == "\ufffdevil"  # the bidi override does not reach the model


def test_the_first_event_as_environment() -> None:
    w = watch({"port": 8080})
    w.read({"port": 8081}, 0.0)
    env = event_env(notice_record(_due(w)))
    assert env == {
        "ASYNCAI_WATCH_EVENT_COUNT": "1",
        "ASYNCAI_WATCH_EVENT_TYPE": "MODIFIED",
        "ASYNCAI_WATCH_EVENT_KEY": "port",
        "ASYNCAI_WATCH_EVENT_SEQ": "",
        "ASYNCAI_WATCH_EVENT_TIME": "",
        "ASYNCAI_WATCH_EVENT_MESSAGE": "",
        "ASYNCAI_WATCH_EVENT_LINE": "MODIFIED port (8080→8081)",
        "ASYNCAI_WATCH_EVENT_OLD": "8080",
        "ASYNCAI_WATCH_EVENT_NEW": "8081",
        "ASYNCAI_WATCH_EVENT_PATHS": "",
    }


@pytest.mark.anyio
async def test_state_notices_on_the_command_line_are_valid_and_typed() -> None:
    async with (
        memo_http_server() as (url, _),
        cli("watch", "memo://notes", "--server", f"memo={url}", "--debounce", "0", "--json") as (proc, out),
    ):
        await wait_until_watching(proc)
        async with McpResourceSource.http(url) as writer:
            await writer.call_tool("memo_set", {"key": "todo", "value": "milk"})
            first = valid(await out.next())
            await writer.call_tool("memo_set", {"key": "todo", "value": "eggs"})
            second = valid(await out.next())
        assert [(e["type"], e["key"], e["new"]) for e in first["events"]] == [("ADDED", "todo", "milk")]
        [event] = second["events"]
        assert (event["type"], event["old"], event["new"], event["line"]) == (
            "MODIFIED",
            "milk",
            "eggs",
            "MODIFIED todo (milk→eggs)",
        )
        assert (event["watch"], event["uri"]) == ("watch", "memo://notes")
        proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(WAIT):
            assert await proc.wait() == 0


@pytest.mark.anyio
async def test_event_log_notices_on_the_command_line_are_valid_and_carry_their_seq(tmp_path: Path) -> None:
    cluster = FakeCluster(tmp_path / "cluster")
    kc = write_kubeconfig(tmp_path / "kc.json", "https://kcp.test:6443")
    env = {**os.environ, **kcp_env(cluster, tmp_path)}
    server = shlex.join([sys.executable, *kcp_argv(kc, "--backoff", "0:0")])
    uri = "kcp-events://watch/root:app/configmaps?namespace=*"
    async with cli("watch", uri, "--server", f"kcp={server}", "--debounce", "0", "--json", env=env) as (
        proc,
        out,
    ):
        await wait_until_watching(proc)
        cluster.create("final-check", {"a": "1"})
        record = valid(await out.next())
        [event] = record["events"]
        assert (event["type"], event["line"], record["lines"]) == (
            "ADDED",
            "ADDED default/final-check",
            [event["line"]],
        )
        assert event["new"]["metadata"]["name"] == "final-check"
        assert isinstance(event["seq"], int)
        proc.send_signal(signal.SIGTERM)
        with anyio.fail_after(WAIT):
            assert await proc.wait() == 0


async def _log_line(proc: anyio.abc.Process, buf: list[bytes], wanted: str) -> None:
    """Await the ``--verbose`` log's ``watch.event`` record whose line is ``wanted`` (stderr)."""
    assert proc.stderr is not None
    with anyio.fail_after(WAIT):
        while True:
            while b"\n" not in buf[0]:
                buf[0] += await proc.stderr.receive()
            line, _, buf[0] = buf[0].partition(b"\n")
            if line.startswith(b"{"):
                record = json.loads(line)
                if record.get("event") == "watch.event" and record.get("line") == wanted:
                    return


@pytest.mark.anyio
async def test_a_torn_write_reads_as_one_modified_port_end_to_end(tmp_path: Path) -> None:
    """Issue 33: ``echo '{"port": 8081}' > config.json`` read half-written once in between
    (ADDED error / DELETED port / ADDED port / DELETED error) prints one MODIFIED port."""
    target = tmp_path / "config.json"
    target.write_text('{"port": 8080}')
    files = f"{shlex.quote(sys.executable)} -m asyncai_servers.files {shlex.quote(str(tmp_path))}"
    # A long quiet time: both reads fall in one window however slow the machine.
    async with cli(
        "watch", f"file://{target}", "--server", files, "--debounce", "20", "--json", "--verbose"
    ) as (proc, out):
        await wait_until_watching(proc)
        buf = [b""]
        target.write_text('{"port": 80')  # the half-written file, as a reader may see it
        await _log_line(proc, buf, "ADDED error")  # the server read it torn
        target.write_text('{"port": 8081}')
        await _log_line(proc, buf, "DELETED error")  # and then whole, in the same window
        proc.send_signal(signal.SIGTERM)  # prints what the window holds, now
        record = valid(await out.next())
        assert record["lines"] == ["MODIFIED port (8080→8081)"]
        [event] = record["events"]
        assert (event["type"], event["key"], event["old"], event["new"]) == ("MODIFIED", "port", 8080, 8081)
        with anyio.fail_after(WAIT):
            assert await proc.wait() == 0


@pytest.mark.anyio
async def test_exec_gets_the_first_event_as_environment_and_the_valid_notice_on_stdin(tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    script = (
        'printf "%s|%s|%s|%s|" "$ASYNCAI_WATCH_EVENT_TYPE" "$ASYNCAI_WATCH_EVENT_KEY" '
        f'"$ASYNCAI_WATCH_EVENT_OLD" "$ASYNCAI_WATCH_EVENT_NEW" >> {shlex.quote(str(seen))}; '
        f"cat >> {shlex.quote(str(seen))}; echo ran"
    )
    async with (
        memo_http_server() as (url, _),
        cli(
            "watch", "memo://notes", "--server", url, "--debounce", "0", "--exec", script, "--count", "2"
        ) as (
            proc,
            out,
        ),
    ):
        await wait_until_watching(proc)
        async with McpResourceSource.http(url) as writer:
            await writer.call_tool("memo_set", {"key": "todo", "value": "milk"})
            assert await out.next() == "ran"
            await writer.call_tool("memo_set", {"key": "todo", "value": "eggs"})
            assert await out.next() == "ran"
        with anyio.fail_after(WAIT):
            assert await proc.wait() == 0
    first, second = seen.read_text().splitlines()
    *env, body = second.split("|", 4)
    assert env == ["MODIFIED", "todo", '"milk"', '"eggs"']
    assert valid(body)["events"][0]["new"] == "eggs"
    assert first.split("|", 4)[:4] == ["ADDED", "todo", "null", '"milk"']


@pytest.mark.anyio
async def test_initial_on_the_command_line_is_valid_against_the_schema() -> None:
    async with memo_http_server() as (url, _):
        async with McpResourceSource.http(url) as writer:
            await writer.call_tool("memo_set", {"key": "todo", "value": "milk"})
        async with cli(
            "watch", "memo://notes", "--server", url, "--debounce", "0", "--initial", "--json", "--once"
        ) as (proc, out):
            first = valid(await out.next())
            assert (first["kind"], first["initial"]) == ("initial", {"todo": "milk"})
            async with McpResourceSource.http(url) as writer:
                await writer.call_tool("memo_set", {"key": "todo", "value": "eggs"})
            assert valid(await out.next())["events"][0]["type"] == "MODIFIED"
            with anyio.fail_after(WAIT):
                assert await proc.wait() == 0
