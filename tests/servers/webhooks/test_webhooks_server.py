"""asyncai-mcp-webhooks end to end: real-shaped, really signed deliveries over HTTP on loopback to
the server process, heard through ``WatchManager`` and stock SDK clients of both protocol eras.

Nothing waits on time: each step awaits a notice, a notification or an HTTP answer, bounded by
``anyio.fail_after``.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from asyncai_watch import McpResourceSource, WatchManager
from asyncai_watch.core.eventlog import Sequencer
from tests.support.managers import IMMEDIATE
from tests.support.webhooks_helpers import (
    RUNS,
    WAIT,
    body_of,
    github,
    hmac_headers,
    http_server,
    log_until,
    mcp_client,
    post,
    read_log,
    server_argv,
    sources,
    standard,
    stripe,
    stripe_event,
    text_of,
    workflow_run,
)

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def stdio_manager(tmp: Path, *more: str) -> AsyncIterator[tuple[WatchManager, str]]:
    """The server over stdio behind a ``WatchManager``; ``(manager, receiver base URL)``."""
    async with (
        McpResourceSource.stdio(server_argv(tmp, *more), name="hooks") as source,
        WatchManager([source], limits=IMMEDIATE) as m,
    ):
        with anyio.fail_after(WAIT):
            listed = json.loads((await source.read("webhooks://sources")).text)
        yield m, listed["sources"]["github"]["endpoint"].removesuffix("github")


async def notice_lines(m: WatchManager, done: Callable[[dict[str, list[str]]], bool]) -> dict[str, list[str]]:
    lines: dict[str, list[str]] = {}
    with anyio.fail_after(WAIT):
        while not done(lines):
            notice = await m.notices.receive()
            lines.setdefault(notice.meta["name"], []).extend(notice.text.splitlines())
    return lines


async def test_a_failed_workflow_run_on_my_branch_is_noticed_and_nothing_else_is(tmp_path: Path) -> None:
    async with stdio_manager(tmp_path) as (m, hooks):
        await m.watch_start("ci", f"{RUNS}?branch=main&conclusion=failure")
        await m.watch_start("run", "webhook-state://github/workflow_run/30433642")
        other = await post(
            hooks + "github", b := body_of(workflow_run(1, branch="feature")), github(b, "workflow_run")
        )
        passed = await post(
            hooks + "github", b := body_of(workflow_run(2, conclusion="success")), github(b, "workflow_run")
        )
        started = body_of(workflow_run(30433642, action="in_progress"))
        assert (await post(hooks + "github", started, github(started, "workflow_run"))).status_code == 200
        failed = body_of(workflow_run(30433642))
        answer = await post(hooks + "github", failed, github(failed, "workflow_run"))
        assert (other.status_code, passed.status_code, answer.status_code) == (200, 200, 200)
        assert answer.json()["stored"] is True
        lines = await notice_lines(
            m,
            lambda got: bool(got.get("ci")) and any("→failure" in line for line in got.get("run", [])),
        )
    # One line: the success on main, the failure on another branch and the run in progress are not this watch's.
    assert lines["ci"] == ["workflow_run.completed 30433642"]
    assert "conclusion: (unset)→failure" in "\n".join(lines["run"])


async def test_wrong_missing_and_stale_signatures_are_refused_and_stored_nowhere(tmp_path: Path) -> None:
    async with http_server(tmp_path) as (url, hooks, headers, _proc), mcp_client(url, headers) as client:
        run = body_of(workflow_run(7))
        refusals = [
            ("github", run, github(run, "workflow_run", secret="not the secret")),
            (
                "github",
                run,
                {k: v for k, v in github(run, "workflow_run").items() if k != "X-Hub-Signature-256"},
            ),
            ("github", run + b" ", github(run, "workflow_run")),  # the body changed after signing
            ("stripe", ev := stripe_event("evt_stale"), stripe(ev, at=int(time.time()) - 3600)),
            ("stripe", ev, stripe(ev, secret="whsec_wrong")),
            (
                "svix",
                b := b'{"type":"user.created","data":{"id":"u1"}}',
                standard(b, "msg_stale", at=int(time.time()) - 3600),
            ),
            ("svix", b, standard(b, "msg_wrong", secret="whsec_" + "A" * 32)),
            ("deploys", b'{"ok":true}', hmac_headers(b'{"ok":false}', "d1", "deploy")),
        ]
        for source, body, sent in refusals:
            answer = await post(hooks + source, body, sent)
            assert answer.status_code == 401, (source, answer.text)
            assert source in answer.json()["error"]
        # A signed delivery under another Host (DNS rebinding, or a proxy not named by --allow-host).
        elsewhere = await post(
            hooks + "github", run, {**github(run, "workflow_run"), "Host": "hooks.example.com"}
        )
        assert elsewhere.status_code == 421
        assert "--allow-host" in elsewhere.text
        stale = await post(hooks + "stripe", ev, stripe(ev, at=int(time.time()) - 3600))
        assert "tolerance of 300 s" in stale.json()["error"]
        listed = await sources(client)
        assert listed["refused"] == len(refusals) + 1
        assert all(s["deliveries"] == 0 for s in listed["sources"].values()), listed
        assert (await read_log(client, "webhook-events://github"))["events"] == []
        # The same deliveries, signed right, are stored: the refusals above were the signatures'.
        for source, body, sent in [
            ("github", run, github(run, "workflow_run")),
            ("stripe", ev, stripe(ev)),
            ("svix", b, standard(b, "msg_1")),
            ("deploys", b'{"ok":true}', hmac_headers(b'{"ok":true}', "d1", "deploy")),
        ]:
            answer = await post(hooks + source, body, sent)
            assert answer.status_code == 200, (source, answer.text)
            assert answer.json()["stored"] is True
        listed = await sources(client)
    assert {name: s["deliveries"] for name, s in listed["sources"].items()} == {
        "deploys": 1,
        "github": 1,
        "stripe": 1,
        "svix": 1,
    }
    assert listed["sources"]["stripe"]["events"] == {"invoice.payment_failed": 1}
    assert listed["sources"]["svix"]["events"] == {"user.created": 1}


async def test_a_retried_delivery_is_one_event(tmp_path: Path) -> None:
    async with http_server(tmp_path) as (url, hooks, headers, _proc), mcp_client(url, headers) as client:
        run = body_of(workflow_run(8))
        sent = github(run, "workflow_run", delivery="72d3162e-cc78-11e3-81ab-4c9367dc0958")
        ev = stripe_event("evt_1NG8Du2eZvKYlo2CUI79vXWy")
        async with anyio.create_task_group() as tg:  # GitHub's redelivery racing the original
            for _ in range(3):
                tg.start_soon(post, hooks + "github", run, sent)
        for _ in range(3):  # Stripe re-signs each retry with a new timestamp: the event id decides
            assert (await post(hooks + "stripe", ev, stripe(ev, at=int(time.time()) - 1))).status_code == 200
        again = await post(hooks + "github", run, sent)
        assert again.status_code == 200
        assert again.json() == {
            "stored": False,
            "duplicate": True,
            "delivery_id": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
        }
        runs = await read_log(client, RUNS)
        invoices = await read_log(client, "webhook-events://stripe/invoice.payment_failed")
        listed = await sources(client)
    assert [e["seq"] for e in runs["events"]] == [1]
    assert [e["delivery_id"] for e in invoices["events"]] == ["evt_1NG8Du2eZvKYlo2CUI79vXWy"]
    assert listed["duplicates"] == 5
    assert listed["accepted"] == 2


async def test_a_body_over_the_cap_is_refused_naming_the_cap(tmp_path: Path) -> None:
    async with (
        http_server(tmp_path, "--max-body", "4096") as (url, hooks, headers, _proc),
        mcp_client(url, headers) as client,
    ):
        big = body_of({**workflow_run(9), "padding": "x" * 5000})
        declared = await post(hooks + "github", big, github(big, "workflow_run"))

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: refused as it passes the cap
            for i in range(0, len(big), 1000):
                yield big[i : i + 1000]

        import httpx2

        async with httpx2.AsyncClient(trust_env=False, timeout=WAIT) as http:
            streamed = await http.post(
                hooks + "github", content=chunks(), headers=github(big, "workflow_run")
            )
        small = body_of(workflow_run(10))
        fits = await post(hooks + "github", small, github(small, "workflow_run"))
        listed = await sources(client)
    assert declared.status_code == 413
    assert streamed.status_code == 413
    assert "over the cap of 4,096 bytes (--max-body)" in declared.json()["error"]
    assert "over the cap of 4,096 bytes (--max-body)" in streamed.json()["error"]
    assert fits.status_code == 200
    assert listed["sources"]["github"]["deliveries"] == 1


async def test_a_killed_and_restarted_server_loses_no_delivery_and_makes_no_gap(tmp_path: Path) -> None:
    sequencer = Sequencer()
    async with http_server(tmp_path) as (url, hooks, headers, proc), mcp_client(url, headers) as client:
        for run_id in (1, 2, 3):
            b = body_of(workflow_run(run_id))
            assert (await post(hooks + "github", b, github(b, "workflow_run"))).status_code == 200
        filtered = f"{RUNS}?conclusion=failure&repository=octo-org%2Focto-repo"
        first = await read_log(client, RUNS)
        first_filtered = await read_log(client, filtered)
        assert [e.seq for e in sequencer.feed(first).events] == [1, 2, 3]
        proc.send_signal(signal.SIGKILL)  # no shutdown: only what was committed before each 2xx is left
    # A new process on the same file: the logs go on from where they were.
    async with http_server(tmp_path) as (url, hooks, headers, proc), mcp_client(url, headers) as client:
        for run_id in (4, 5):
            b = body_of(workflow_run(run_id))
            assert (await post(hooks + "github", b, github(b, "workflow_run"))).status_code == 200
        after = await read_log(client, RUNS, (first["log_id"], 3))
        after_filtered = await read_log(client, filtered, (first_filtered["log_id"], 3))
    assert after["log_id"] == first["log_id"]
    assert after_filtered["log_id"] == first_filtered["log_id"]
    delivered = sequencer.feed(after).events
    assert [e.type for e in delivered] == ["workflow_run.completed"] * 2  # no GAP
    assert [e.seq for e in delivered] == [4, 5]
    assert [e["key"] for e in after_filtered["events"]] == ["4", "5"]


@pytest.mark.filterwarnings(
    "ignore::mcp.shared.exceptions.MCPDeprecationWarning"
)  # 2025's subscribe, on purpose
async def test_both_eras_clients_hear_a_delivery(tmp_path: Path) -> None:
    from tests.support.http_servers import Served
    from tests.support.legacy_client import legacy_client

    uri = f"{RUNS}?branch=main"
    async with (
        http_server(tmp_path) as (url, hooks, headers, _proc),
        legacy_client(Served("webhooks", url, headers)) as (old, updates),
        mcp_client(url, headers) as new,
        new.listen(resource_subscriptions=[uri]) as sub,
    ):
        with anyio.fail_after(WAIT):
            await old.subscribe_resource(uri)
        b = body_of(workflow_run(11))
        assert (await post(hooks + "github", b, github(b, "workflow_run"))).status_code == 200
        assert await updates.next() == uri
        old_body = json.loads(text_of(await old.read_resource(uri)))
        new_body = await log_until(new, sub, uri, lambda body: bool(body["events"]))
    assert [e["key"] for e in old_body["events"]] == ["11"] == [e["key"] for e in new_body["events"]]
    assert new_body["events"][0]["object"]["branch"] == "main"


async def test_a_bad_uri_is_refused_naming_what_is_served(tmp_path: Path) -> None:
    from mcp import MCPError

    async with http_server(tmp_path) as (url, _hooks, headers, _proc), mcp_client(url, headers) as client:
        with anyio.fail_after(WAIT), pytest.raises(MCPError) as bad_field:
            await client.read_resource(f"{RUNS}?colour=red")
        with anyio.fail_after(WAIT), pytest.raises(MCPError) as bad_source:
            await client.read_resource("webhook-events://gitlab/push")
    assert "filter fields: action, branch, conclusion" in bad_field.value.error.message
    assert "no source 'gitlab'" in bad_source.value.error.message
    assert "github" in bad_source.value.error.message
