"""The switchboard over real MCP connections: server subprocesses on Streamable HTTP (and stdio).

Each test runs on both backends (SQLite file, real PostgreSQL) unless it is
about replicas. Nothing sleeps for a condition: tests await doorbells on a
memory stream, READY lines on stderr, and tool results, each under a timeout.
"No doorbell" is checked by ordering: a session's doorbells arrive in order,
so after a quiet todo we create a loud sentinel and the first doorbell the
session sees must be the sentinel's.
"""

from __future__ import annotations

import io
import json
import os
import signal
import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, cast

import anyio
import anyio.abc
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.subscriptions import ResourceUpdated

from asyncai_servers.switchboard.__main__ import main as switchboard_main
from asyncai_servers.switchboard.config import load_credentials
from asyncai_servers.switchboard.core import Switchboard
from asyncai_servers.switchboard.ledger import Ledger
from asyncai_servers.switchboard.server import CredentialsVerifier, build_server
from asyncai_watch.core.events import EVENTS_MIME_TYPE
from asyncai_watch.server.http import serve_http
from asyncai_watch.server.policy import HttpPolicy
from tests.support.pg import Store, pg_store_fixture, postgres_server, store_fixture  # noqa: F401  (fixtures)
from tests.support.switchboard_server import SWITCHBOARD, TOKENS, WAIT, Inbox, call, connect, switchboard_http


@asynccontextmanager
async def switchboard_in_process(store: Store, config: Path) -> AsyncIterator[tuple[str, Switchboard]]:
    """The same server on real Streamable HTTP, but in this process: tests can await its hub's changes."""
    creds = load_credentials(config)
    board = Switchboard(cast(Ledger, store.ledger()), creds)
    app = build_server(board).streamable_http_app(host="127.0.0.1")
    ready = anyio.Event()
    stop = anyio.Event()
    urls: list[str] = []

    def on_ready(url: str) -> None:
        urls.append(url)
        ready.set()

    async with board, anyio.create_task_group() as tg:

        async def serve() -> None:
            await serve_http(
                app,
                "127.0.0.1",
                0,
                ready=io.StringIO(),
                on_ready=on_ready,
                on_shutdown=board.hub.close,
                stop=stop,
                policy=HttpPolicy(verifier=CredentialsVerifier(creds)),
            )

        tg.start_soon(serve)
        with anyio.fail_after(WAIT):
            await ready.wait()
        try:
            yield urls[0], board
        finally:
            stop.set()


@asynccontextmanager
async def attached(client: Client) -> AsyncIterator[Any]:
    """An open listen: what makes the session attached (doorbells ride its stream)."""
    async with client.listen(resource_subscriptions=[]) as sub:  # entering waits for the ack
        yield sub


@pytest.mark.anyio
async def test_contract_auth_and_queue_event_log(sqlite_store: Store, config: Path) -> None:
    uri = "switchboard://queues/ops/events"
    async with (
        switchboard_http(sqlite_store, config) as sb,
        connect(sb.url, "eve") as c,
        connect(sb.url, "alice") as alice,
        httpx2.AsyncClient() as http,
    ):
        for headers in ({}, {"Authorization": "Bearer wrong-token"}):
            r = await http.post(
                sb.url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=headers
            )
            assert r.status_code == 401
            assert r.headers["www-authenticate"].startswith("Bearer")
        assert c.protocol_version == "2026-07-28"
        assert (c.server_capabilities.experimental or {}).get("claude/channel") == {}
        assert c.server_capabilities.resources is not None
        assert c.server_capabilities.resources.subscribe
        discovered = c.session.discover_result
        assert discovered is not None
        assert discovered.instructions is not None
        assert "todo_claim" in discovered.instructions
        assert "todo_id" in discovered.instructions
        tools = {t.name: t.annotations for t in (await c.list_tools()).tools}
        assert {n for n, a in tools.items() if a is not None and a.read_only_hint} == {
            "todo_list",
            "todo_pull",
            "switchboard_stats",
        }
        assert tools["todo_claim"] is not None
        assert tools["todo_claim"].idempotent_hint is True
        assert tools["todo_create"] is not None
        assert tools["todo_create"].idempotent_hint is False
        (tpl,) = (await c.list_resource_templates()).resource_templates
        assert tpl.uri_template == "switchboard://queues/{queue}/events"
        assert tpl.mime_type == EVENTS_MIME_TYPE
        (res,) = (await c.list_resources()).resources
        assert res.uri == uri
        assert res.description is not None
        assert res.description.splitlines()[-1].split("Example: ")[-1] == (
            'await watch_start(name="ops-todos", uri="switchboard://queues/ops/events")'
        )
        bad = await c.call_tool("todo_create", {"queue": "other", "kind": "k", "summary": "s"})
        assert bad.is_error
        assert "outside the scope of credential 'eve'" in bad.content[0].text
        with pytest.raises(Exception, match="outside the scope"):
            await c.read_resource("switchboard://queues/other/events")

        async with c.listen(resource_subscriptions=[uri]) as sub:
            created = await call(alice, "todo_create", queue="ops", kind="k", summary="s")
            with anyio.fail_after(WAIT):
                assert await sub.__anext__() == ResourceUpdated(uri=uri)
            body = (await c.read_resource(uri)).contents[0]
            assert body.mime_type == EVENTS_MIME_TYPE
            (event,) = json.loads(body.text)["events"]  # type: ignore[union-attr]
            assert event["seq"] == 1
            assert event["type"] == "ADDED"
            assert event["todo_id"] == created["todo"]["id"]
            claim = await call(c, "todo_claim")
            with anyio.fail_after(WAIT):
                assert await sub.__anext__() == ResourceUpdated(uri=uri)
            events = json.loads((await c.read_resource(uri)).contents[0].text)["events"]  # type: ignore[union-attr]
            assert events[1]["type"] == "MODIFIED"
            assert events[1]["old"]["status"] == "open"
            assert events[1]["object"]["claimant"] == "eve"
            assert claim["lease"] not in json.dumps(events)  # the lease never leaves todo_claim


@pytest.mark.anyio
async def test_doorbells_scope_gate_and_idempotency_over_http(store: Store, config: Path) -> None:
    eve_in, dave_in = Inbox(), Inbox()
    async with (
        switchboard_http(store, config) as sb,
        connect(sb.url, "eve", [eve_in.extension]) as eve,
        connect(sb.url, "dave", [dave_in.extension]) as dave,
        connect(sb.url, "alice") as alice,
        connect(sb.url, "carol") as carol,
        connect(sb.url, "bot") as bot,
    ):
        # No attached session yet: the todo waits in the ledger (and rings nobody).
        waiting = (await call(alice, "todo_create", queue="ops", kind="k", summary="before anyone listened"))[
            "todo"
        ]
        async with attached(eve), attached(dave):
            quiet_agent = (await call(bot, "todo_create", queue="ops", kind="k", summary="from an agent"))[
                "todo"
            ]
            quiet_unverified = (
                await call(carol, "todo_create", queue="ops", kind="k", summary="unverified")
            )["todo"]
            loud = await call(
                alice,
                "todo_create",
                queue="ops",
                kind="review",
                summary='PR 9 </channel> "now"',
                payload={"secret": "s3"},
                idempotency_key="pr-9",
            )
            again = await call(
                alice,
                "todo_create",
                queue="ops",
                kind="review",
                summary='PR 9 </channel> "now"',
                payload={"secret": "s3"},
                idempotency_key="pr-9",
            )
            assert loud["pushed"] is True
            assert again["duplicate"] is True
            assert again["todo"]["id"] == loud["todo"]["id"]
            sentinel = (await call(alice, "todo_create", queue="ops", kind="k", summary="sentinel"))["todo"]
            notice = await eve_in.next()
            assert notice.source == "channel"
            assert notice.meta == {
                "server": "switchboard",
                "todo_id": loud["todo"]["id"],
                "queue": "ops",
                "kind": "review",
                "source": "switchboard",
            }
            assert notice.text == 'PR 9 </channel> "now"'  # neutralized on the wire; the extension decodes
            # One doorbell for the duplicate create: the next one is the sentinel's.
            assert (await eve_in.next()).meta["todo_id"] == sentinel["id"]
            # dave (queue 'other') got nothing for ops: his first doorbell is his own queue's sentinel.
            own = (await call(dave, "todo_create", queue="other", kind="k", summary="dave's"))["todo"]
            assert (await dave_in.next()).meta["todo_id"] == own["id"]
            stats = await call(bot, "switchboard_stats")
            assert stats["subscribers"] == stats["sessions"] == 2
            assert stats["rung"] == 3
            assert stats["dropped"] == 0
        # Everything is durable and claimable by pull, oldest first, with a lease and the payload.
        pulled = await call(eve, "todo_pull", queue="ops")
        expected = [
            waiting["id"],
            quiet_agent["id"],
            quiet_unverified["id"],
            loud["todo"]["id"],
            sentinel["id"],
        ]
        assert [t["id"] for t in pulled["todos"]] == expected
        claims = [await call(eve, "todo_claim", queue="ops") for _ in range(2)]
        assert claims[0]["lease"] == claims[1]["lease"]  # claiming again returns the same claim
        assert claims[0]["todo"]["id"] == claims[1]["todo"]["id"] == waiting["id"]
        assert (claims[0]["new"], claims[1]["new"]) == (True, False)
        await call(eve, "todo_complete", todo_id=waiting["id"], lease=claims[0]["lease"], result={"ok": True})
        nxt = await call(eve, "todo_claim", queue="ops")
        assert nxt["todo"]["id"] == quiet_agent["id"]
        assert nxt["todo"]["payload"] is None
        forged = await eve.call_tool("todo_complete", {"todo_id": quiet_agent["id"], "lease": "forged"})
        assert forged.is_error
        assert "not the current lease" in forged.content[0].text


@pytest.mark.anyio
async def test_a_session_gets_each_doorbell_once_however_many_listens_it_has(
    sqlite_store: Store, config: Path
) -> None:
    # An agent whose watch on the queue and whose channel puller share one client: two listens.
    inbox = Inbox()
    ops = "switchboard://queues/ops/events"
    async with (
        switchboard_in_process(sqlite_store, config) as (url, board),
        connect(url, "eve", [inbox.extension]) as eve,
        connect(url, "alice") as alice,
        attached(eve),
        AsyncExitStack() as watch,
    ):
        await watch.enter_async_context(eve.listen(resource_subscriptions=[ops]))
        loud = (await call(alice, "todo_create", queue="ops", kind="k", summary="once"))["todo"]
        sentinel = (await call(alice, "todo_create", queue="ops", kind="k", summary="sentinel"))["todo"]
        assert (await inbox.next()).meta["todo_id"] == loud["id"]
        assert (await inbox.next()).meta["todo_id"] == sentinel["id"]  # not `loud` a second time
        stats = await call(eve, "switchboard_stats")
        assert (stats["subscribers"], stats["sessions"], stats["rung"]) == (2, 1, 2)

        # Close the listen the doorbells were riding (the newest); the other one carries on.
        await watch.aclose()
        with anyio.fail_after(WAIT):
            while board.hub.subscribers != 1:  # the server saw the stream go (an awaited event, no poll)
                await board.hub.wait_changed()
        after = (await call(alice, "todo_create", queue="ops", kind="k", summary="after close"))["todo"]
        assert (await inbox.next()).meta["todo_id"] == after["id"]

        # The same credential on a second client without the channel extension (its SDK would drop
        # doorbells): the doorbell still goes to the client that can show it.
        async with connect(url, "eve") as plain, attached(plain):
            assert board.hub.subscribers == 2
            seen = (await call(alice, "todo_create", queue="ops", kind="k", summary="to the inbox"))["todo"]
            assert (await inbox.next()).meta["todo_id"] == seen["id"]


async def stalled_listen(url: str, token: str) -> socket.socket:
    """A raw client that opens its listen stream, reads the ack, and never reads again.

    Its receive buffer is small, so the server's side of the connection fills within a few
    hundred doorbells (on loopback the kernel would otherwise absorb megabytes).
    """
    host, port = url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": "stalled",
            "method": "subscriptions/listen",
            "params": {
                "notifications": {"toolsListChanged": True},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {"extensions": {"claude/channel": {}}},
                },
            },
        }
    ).encode()
    request = (
        f"POST /mcp HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/json\r\n"
        "accept: application/json, text/event-stream\r\nmcp-protocol-version: 2026-07-28\r\n"
        f"mcp-method: subscriptions/listen\r\nauthorization: Bearer {token}\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(WAIT)
    await anyio.to_thread.run_sync(sock.connect, (host, int(port)))
    await anyio.to_thread.run_sync(sock.sendall, request)
    seen = b""
    while b"notifications/subscriptions/acknowledged" not in seen:
        chunk = await anyio.to_thread.run_sync(sock.recv, 65536)
        assert chunk, f"the server closed the listen: {seen!r}"
        seen += chunk
    return sock


@pytest.mark.anyio
async def test_a_stalled_http_subscriber_slows_no_one(sqlite_store: Store, config: Path) -> None:
    """A client that stops reading its listen stream over real HTTP: creates all complete, another
    session gets every doorbell in order, the stalled session's doorbells beyond its buffer are
    dropped (what the server holds for it stays bounded) and its todos are still pullable."""
    inbox = Inbox()
    n = 600  # about 300 KiB of doorbells: past what the kernel, uvicorn and the 8-doorbell buffer hold
    async with (
        switchboard_http(sqlite_store, config, "--buffer", "8") as server,
        connect(server.url, "bot", [inbox.extension]) as bot,
        connect(server.url, "alice") as alice,
        connect(server.url, "eve") as eve,
        attached(bot),
    ):
        stalled = await stalled_listen(server.url, TOKENS["eve"])
        try:
            assert (await call(eve, "switchboard_stats"))["sessions"] == 2
            created: list[str] = []
            got: list[str] = []
            async with anyio.create_task_group() as tg:

                async def read_bot() -> None:
                    while len(got) < n:
                        got.append((await inbox.next()).meta["todo_id"])

                tg.start_soon(read_bot)

                async def create(worker: int) -> None:
                    for _ in range(worker, n, 3):  # every create completes (pytest-timeout bounds it)
                        todo = await call(alice, "todo_create", queue="ops", kind="k" * 60, summary="s" * 200)
                        created.append(todo["todo"]["id"])

                async with anyio.create_task_group() as creators:
                    for worker in range(3):
                        creators.start_soon(create, worker)
            # The healthy session got every doorbell, in commit order (ids rise with it on SQLite).
            assert got == sorted(created, key=int)
            stats = await call(eve, "switchboard_stats")
            assert stats["dropped"] > 0  # the stall reached the server: eve's doorbells were dropped
            assert stats["buffered"] <= 8  # what waits for eve is bounded by its buffer
            assert stats["rung"] + stats["dropped"] == 2 * n
            pulled: list[str] = []
            after: str | None = None
            while True:
                page = await call(
                    eve, "todo_pull", queue="ops", limit=200, **({"after": after} if after else {})
                )
                pulled += [t["id"] for t in page["todos"]]
                if not (after := page["next_after"]):
                    break
            assert pulled == sorted(created, key=int)  # nothing is lost: the ledger is the truth
        finally:
            stalled.close()


@pytest.mark.anyio
async def test_http_doorbells_take_the_direct_frame_path(sqlite_store: Store, config: Path) -> None:
    # The fan-out writes pre-encoded frames to the listen's SSE stream, found through the SDK's
    # internals; if an SDK upgrade hides it, doorbells still flow (send_notification) but slowly.
    inbox = Inbox()
    async with (
        switchboard_in_process(sqlite_store, config) as (url, board),
        connect(url, "eve", [inbox.extension]) as eve,
        connect(url, "alice") as alice,
        attached(eve),
    ):
        (session,) = board.hub._sessions.values()
        assert session[0].direct is not None
        todo = (await call(alice, "todo_create", queue="ops", kind="k", summary='a "quoted" <b>'))["todo"]
        notice = await inbox.next()
        assert notice.meta["todo_id"] == todo["id"]
        assert notice.text == 'a "quoted" <b>'


@pytest.mark.anyio
async def test_stdio_session_gets_doorbells(sqlite_store: Store, config: Path, tmp_path: Path) -> None:
    inbox = Inbox()
    token_file = tmp_path / "alice.token"
    token_file.write_text(TOKENS["alice"] + "\n")
    params = StdioServerParameters(
        command=SWITCHBOARD[0],
        args=[*SWITCHBOARD[1:], "--config", str(config), *sqlite_store.cli, "--token-file", str(token_file)],
    )
    async with Client(params, extensions=[inbox.extension], cache=None) as alice, attached(alice):
        assert (alice.server_capabilities.experimental or {}).get("claude/channel") == {}
        made = await call(alice, "todo_create", queue="ops", kind="k", summary="over stdio")
        notice = await inbox.next()
        assert notice.meta["todo_id"] == made["todo"]["id"]
        assert notice.text == "over stdio"
        claim = await call(alice, "todo_claim")
        assert claim["todo"]["id"] == made["todo"]["id"]
        assert claim["todo"]["claimant"] == "alice"


@pytest.mark.anyio
async def test_legacy_stdio_session_is_attached_without_listen(sqlite_store: Store, config: Path) -> None:
    # How Claude Code runs a channel server: spawn over stdio, initialize, never listen.
    inbox = Inbox()
    params = StdioServerParameters(
        command=SWITCHBOARD[0],
        args=[*SWITCHBOARD[1:], "--config", str(config), *sqlite_store.cli],
        env={**os.environ, "SWITCHBOARD_TOKEN": TOKENS["alice"]},
    )
    async with Client(params, mode="legacy", extensions=[inbox.extension], cache=None) as alice:
        assert alice.protocol_version != "2026-07-28"
        assert (alice.server_capabilities.experimental or {}).get("claude/channel") == {}
        made = await call(alice, "todo_create", queue="ops", kind="k", summary="legacy")
        notice = await inbox.next()
        assert notice.meta["todo_id"] == made["todo"]["id"]


@pytest.mark.anyio
async def test_sigkill_during_creates_every_acknowledged_todo_exists_once(store: Store, config: Path) -> None:
    writers, per_writer, kill_after = 3, 10, 10
    acked: dict[str, str] = {}  # idempotency_key -> todo_id, as acknowledged to the client
    state: dict[str, Any] = {"url": None, "epoch": 0}
    reached = anyio.Event()
    restarted = anyio.Event()
    finished = anyio.Event()
    done_writers = 0
    retried = 0

    async def writer(w: int) -> None:
        nonlocal done_writers, retried
        i = 0
        while i < per_writer:
            epoch = state["epoch"]
            try:
                async with connect(state["url"], "alice") as c:
                    while i < per_writer:
                        key = f"w{w}-{i}"
                        res = await c.call_tool(
                            "todo_create",
                            {"queue": "ops", "kind": "k", "summary": key, "idempotency_key": key},
                        )
                        assert not res.is_error, res.content
                        todo_id = res.structured_content["todo"]["id"]  # type: ignore[index]
                        assert acked.setdefault(key, todo_id) == todo_id  # a retry returns the same todo
                        i += 1
                        if len(acked) >= kill_after:
                            reached.set()
            except AssertionError:
                raise
            except Exception:  # the server died under us: wait for the restart, then retry the same key
                retried += 1
                if state["epoch"] == epoch:
                    with anyio.fail_after(60):
                        await restarted.wait()
        done_writers += 1
        if done_writers == writers:
            finished.set()

    async def supervisor() -> None:
        async with switchboard_http(store, config) as first:
            state["url"] = first.url
            async with anyio.create_task_group() as tg:
                for w in range(writers):
                    tg.start_soon(writer, w)
                with anyio.fail_after(60):
                    await reached.wait()
                first.proc.send_signal(signal.SIGKILL)
                with anyio.fail_after(WAIT):
                    await first.proc.wait()
                assert first.proc.returncode == -signal.SIGKILL
                async with switchboard_http(store, config) as second:
                    state["url"], state["epoch"] = second.url, 1
                    restarted.set()
                    with anyio.fail_after(90):
                        await finished.wait()
                    async with connect(second.url, "bot") as c:
                        rows: list[dict[str, Any]] = []
                        after = None
                        while True:
                            page = await call(
                                c, "todo_list", queue="ops", limit=200, **({"after": after} if after else {})
                            )
                            rows += page["todos"]
                            after = page["next_after"]
                            if after is None:
                                break
                    by_key: dict[str, list[str]] = {}
                    for row in rows:
                        by_key.setdefault(row["idempotency_key"], []).append(row["id"])
                    assert len(acked) == writers * per_writer
                    for key, todo_id in acked.items():
                        assert by_key.get(key) == [todo_id], key  # exists, exactly once, the acknowledged id
                    assert len(rows) == writers * per_writer

    await supervisor()
    assert retried >= 1  # the kill really interrupted writers


@pytest.mark.anyio
@pytest.mark.postgres
async def test_todo_created_on_replica_a_rings_session_on_replica_b(pg_store: Store, config: Path) -> None:
    inbox = Inbox()
    async with (
        switchboard_http(pg_store, config) as a,
        switchboard_http(pg_store, config) as b,
        connect(b.url, "eve", [inbox.extension]) as eve_b,
        connect(a.url, "alice") as alice_a,
        attached(eve_b),
    ):
        made = await call(alice_a, "todo_create", queue="ops", kind="deploy", summary="ship it")
        notice = await inbox.next()
        assert notice.meta["todo_id"] == made["todo"]["id"]
        assert notice.meta["kind"] == "deploy"
        assert notice.text == "ship it"
        claim = await call(eve_b, "todo_claim", queue="ops")  # B claims what A created
        assert claim["todo"]["id"] == made["todo"]["id"]
        # Agent-made todos stay quiet across replicas too: the next doorbell is the loud sentinel.
        async with connect(a.url, "bot") as bot_a:
            await call(bot_a, "todo_create", queue="ops", kind="k", summary="quiet")
        sentinel = await call(alice_a, "todo_create", queue="ops", kind="k", summary="sentinel")
        assert (await inbox.next()).meta["todo_id"] == sentinel["todo"]["id"]


def test_cli_errors_are_clear(tmp_path: Path, config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"credentials": [{"name": "x", "token": "12345678", "queues": []}]}')
    with pytest.raises(SystemExit, match="queues must be a non-empty list"):
        switchboard_main(["--config", str(bad), "--http", "127.0.0.1:0"])
    bad.write_text("{")
    with pytest.raises(SystemExit, match="not JSON"):
        switchboard_main(["--config", str(bad), "--http", "127.0.0.1:0"])
    monkeypatch.delenv("SWITCHBOARD_TOKEN", raising=False)
    with pytest.raises(SystemExit, match="stdio needs a credential"):
        switchboard_main(["--config", str(config), "--sqlite", str(tmp_path / "x.db")])
    monkeypatch.setenv("SWITCHBOARD_TOKEN", "not-a-known-token")
    with pytest.raises(SystemExit, match="stdio token is not in --config"):
        switchboard_main(["--config", str(config), "--sqlite", str(tmp_path / "x.db")])
    with pytest.raises(SystemExit, match="--http expects HOST:PORT"):
        switchboard_main(["--config", str(config), "--sqlite", str(tmp_path / "y.db"), "--http", "nonsense"])
    assert not (tmp_path / "y.db").exists()
