"""``asyncai-watch serve`` as a real process, driven by the stock ``mcp`` client.

The client declares the ``claude/channel`` client extension (a ``NotificationBinding``: the
SDK drops a notification method it does not know otherwise), so each pushed notice lands in
:class:`Channel`. Upstream: the files server, started by serve as its child over stdio on a
tmp dir, and memo served over Streamable HTTP, so a second client can change it. Every wait
is on a push or a process's READY line, bounded by ``anyio.fail_after``.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY

from asyncai_watch.server.http import running_http_server
from tests.support import SUPPORT
from tests.support.local_token import local_client
from tests.support.serve import (
    FILES,
    MEMO,
    SERVE,
    WAIT,
    Channel,
    ChannelParams,
    call,
    file_uri,
    files_arg,
    serve,
    tool_error,
    write,
)

pytestmark = pytest.mark.anyio

LEGACY = [sys.executable, str(SUPPORT / "legacy_server.py")]


async def protocol_error(client: Client, tool: str, **args: Any) -> MCPError:
    """The JSON-RPC error ``tools/call`` of ``tool`` gets (an unknown tool is not an ``isError`` result)."""
    with anyio.fail_after(WAIT), pytest.raises(MCPError) as caught:
        await client.call_tool(tool, args)
    return caught.value


TOOL_NAMES = "list_resources, read_resource, watch_start, watch_stop, watch_list, watch_notices"


@asynccontextmanager
async def memo_http() -> AsyncIterator[str]:
    async with running_http_server([*MEMO, "--http", "127.0.0.1:0"]) as (url, _proc):
        yield url


def notice_id(push: ChannelParams) -> int:
    return int((push.meta or {})["notice_id"])


async def test_modern_stdio_pushes_filtered_notices_from_files_and_memo(tmp_path: Path) -> None:
    cfg = tmp_path / "cfg.json"
    cfg.write_text('{"port": 1, "noise": 1}')
    uri = file_uri(cfg)
    channel = Channel()
    async with memo_http() as memo_url:
        params = serve("--server", files_arg(tmp_path), "--server", f"memo={memo_url}", "--debounce", "0")
        async with Client(params, extensions=[channel]) as client, local_client(memo_url) as writer:
            assert client.protocol_version == "2026-07-28"
            assert client.server_capabilities.experimental == {"claude/channel": {}}
            assert client.instructions is not None
            assert "<channel" in client.instructions
            assert "watch_notices(after_id" in client.instructions
            assert "files, memo" in client.instructions

            listed = await call(client, "list_resources")
            servers = {r["server"] for r in listed}
            assert servers == {"files", "memo"}
            assert all(r["subscribable"] for r in listed)
            assert await call(client, "read_resource", uri=uri) == {"port": 1, "noise": 1}

            started = await call(client, "watch_start", name="cfg", uri=uri)
            assert started == {"name": "cfg", "uri": uri, "shape": "state"}
            await call(client, "watch_start", name="notes", uri="memo://notes")
            # Drops every change but the port's, and rewrites that one.
            only_port = 'f"port is now {event[\'new\']}" if event["key"] == "port" else None'
            await call(client, "watch_start", name="ports", uri=uri, on_event=only_port)

            write(cfg, '{"port": 1, "noise": 2}')
            noise = await channel.next_for("cfg")
            assert noise.content == "MODIFIED noise (1→2)"
            assert noise.meta == {
                "watch": "cfg",
                "uri": uri,
                "notice_id": noise.meta["notice_id"],
                "kind": "watch",
            }

            write(cfg, '{"port": 2, "noise": 2}')
            # The first notice of "ports" is the port's: the filter dropped the noise change.
            port = await channel.next_for("ports")
            assert port.content == "port is now 2"
            assert port.meta is not None
            assert (port.meta["watch"], port.meta["uri"], port.meta["kind"]) == ("ports", uri, "watch")

            await writer.call_tool("memo_set", {"key": "owner", "value": "ada"})
            memo = await channel.next_for("notes")
            assert memo.content == "ADDED owner"
            assert memo.meta is not None
            assert memo.meta["uri"] == "memo://notes"

            # With a listen open, pushes ride that stream (stamped with its id), once each.
            async with client.listen(tools_list_changed=True) as sub:
                await writer.call_tool("memo_set", {"key": "owner", "value": "bob"})
                on_listen = await channel.next_for("notes")
                assert on_listen.content == "MODIFIED owner (ada→bob)"
                assert (on_listen.model_extra or {}).get("_meta") == {
                    SUBSCRIPTION_ID_META_KEY: sub.subscription_id
                }
                await writer.call_tool("memo_set", {"key": "n", "value": 1})
                after = await channel.next_for("notes")
                assert after.content == "ADDED n"
                # Once each: a copy on the connection would have come before this one.
                assert notice_id(after) > notice_id(on_listen)

            # serve has no MCP resources: a listen naming one is refused, saying what to do instead.
            with anyio.fail_after(WAIT), pytest.raises(MCPError) as refused:
                async with client.listen(resource_subscriptions=["memo://notes"]):
                    pass
            assert refused.value.error.code == -32602
            assert "serves no resources: watch a URI with the watch_start tool" in refused.value.error.message

            # The pull side has every notice that was pushed, with the same ids and text.
            pulled = await call(client, "watch_notices", after_id=0)
            assert pulled["gap"] is None
            by_id = {n["id"]: n for n in pulled["notices"]}
            for push in (noise, port, memo, on_listen, after):
                got = by_id[notice_id(push)]
                assert (got["watch"], got["text"], got["kind"]) == (push.meta["watch"], push.content, "watch")  # type: ignore[index]
            assert pulled["next_after"] == pulled["last_id"] == max(by_id)


async def test_legacy_stdio_gets_pushes_and_a_restart_restores_the_watches(tmp_path: Path) -> None:
    """The ``initialize`` handshake (Claude Code's): pushes arrive connection-scoped. Then a
    2026-07-28 client on a restarted serve gets the restore notice pushed first."""
    root = tmp_path / "srv"
    root.mkdir()
    doc = root / "doc.json"
    doc.write_text('{"a": 1}')
    uri = file_uri(doc)
    state = tmp_path / "watches.json"
    args = ("--server", files_arg(root), "--watch-state", str(state), "--debounce", "0")

    channel = Channel()
    async with Client(serve(*args), mode="legacy", extensions=[channel]) as client:
        assert client.protocol_version == "2025-11-25"
        assert client.server_capabilities.experimental == {"claude/channel": {}}
        assert client.instructions is not None
        assert "<channel" in client.instructions
        await call(client, "watch_start", name="doc", uri=uri)
        write(doc, '{"a": 2}')
        push = await channel.next()
        assert push.content == "MODIFIED a (1→2)"
        assert push.meta == {"watch": "doc", "uri": uri, "notice_id": "1", "kind": "watch"}
        pulled = await call(client, "watch_notices", after_id=0)
        assert [(n["id"], n["text"]) for n in pulled["notices"]] == [(1, "MODIFIED a (1→2)")]
        [event] = pulled["notices"][0]["events"]  # typed, for a program (docs/core.md)
        assert (event["type"], event["key"], event["old"], event["new"]) == ("MODIFIED", "a", 1, 2)
        # Claude Code's handshake gets the same protocol error for an unknown tool as a 2026 client.
        error = await protocol_error(client, "watch_everything")
        assert (error.code, error.message) == (
            -32602,
            f"asyncai-watch: unknown tool 'watch_everything'; its tools are {TOOL_NAMES}",
        )
    assert json.loads(state.read_text())  # the spec was saved

    channel = Channel()
    async with Client(serve(*args), extensions=[channel]) as client:
        assert client.protocol_version == "2026-07-28"
        restore = await channel.next()
        assert restore.meta is not None
        assert restore.meta["kind"] == "restore"
        assert restore.meta["restored"] == "1"
        assert "watch" not in restore.meta
        assert restore.content.startswith("Restored 1 of 1 watches")
        assert [w["name"] for w in await call(client, "watch_list")] == ["doc"]
        write(doc, '{"a": 3}')
        push = await channel.next()
        assert push.content == "MODIFIED a (2→3)"
        assert push.meta is not None
        assert push.meta["notice_id"] == "2"


async def test_http_listen_and_legacy_sessions_get_pushes_and_a_pull_client_gets_the_gap() -> None:
    """Streamable HTTP: a 2026-07-28 client gets pushes on its listen, a legacy session on its
    standalone stream; a stock client with no channel extension and no listen pulls the same
    notices, and an overflowed ring (``--ring 2``) reports how many it lost."""
    push_a, push_c = Channel(), Channel()
    async with memo_http() as memo_url:
        argv = [
            *SERVE,
            "--server",
            f"memo={memo_url}",
            "--debounce",
            "0",
            "--ring",
            "2",
            "--http",
            "127.0.0.1:0",
        ]
        async with (
            running_http_server(argv) as (url, proc),
            local_client(url, extensions=[push_a]) as a,
            local_client(url, mode="legacy", extensions=[push_c]) as c,
            local_client(url) as puller,
            local_client(memo_url) as writer,
        ):
            assert (a.protocol_version, c.protocol_version) == ("2026-07-28", "2025-11-25")
            assert (
                a.server_capabilities.experimental
                == c.server_capabilities.experimental
                == {"claude/channel": {}}
            )
            async with a.listen(tools_list_changed=True) as sub:
                await call(puller, "watch_start", name="notes", uri="memo://notes")
                pushed = []
                for i in range(4):
                    await writer.call_tool("memo_set", {"key": f"k{i}", "value": i})
                    got_a, got_c = await push_a.next(), await push_c.next()
                    assert (got_a.content, got_a.meta) == (got_c.content, got_c.meta)
                    assert got_a.content == f"ADDED k{i}"
                    assert notice_id(got_a) == i + 1
                    pushed.append(got_a)
                    if i == 1:  # the ring is full, nothing lost yet
                        early = await call(puller, "watch_notices", after_id=0)
                        assert early["gap"] is None
                        assert [(n["id"], n["text"]) for n in early["notices"]] == [
                            (1, "ADDED k0"),
                            (2, "ADDED k1"),
                        ]

                caught_up = await call(puller, "watch_notices", after_id=2)
                assert caught_up["gap"] is None
                assert [(n["id"], n["text"], n["watch"]) for n in caught_up["notices"]] == [
                    (notice_id(p), p.content, "notes") for p in pushed[2:]
                ]
                late = await call(puller, "watch_notices", after_id=0)
                assert late["gap"]["lost"] == 2
                assert (late["gap"]["first_id"], late["gap"]["last_id"]) == (1, 2)
                assert [n["id"] for n in late["notices"]] == [3, 4]
                assert late["next_after"] == 4

                # SIGTERM ends the open listen gracefully instead of holding shutdown up.
                proc.terminate()
                with anyio.fail_after(WAIT):
                    async for _ in sub:
                        pass
                    code = await proc.wait()
                assert code == 0, code


async def test_bad_input_is_a_tool_error_that_says_what_is_accepted(tmp_path: Path) -> None:
    for i in range(6):
        (tmp_path / f"f{i}.json").write_text('{"v": 0}')
    params = serve(
        "--server", files_arg(tmp_path), "--server", "old=" + shlex.join([*LEGACY, "--no-subscribe"])
    )
    async with Client(params) as client:
        listed = {r["uri"]: r for r in await call(client, "list_resources")}
        assert listed["legacy://state"]["subscribable"] is False
        # A server that cannot carry watches still serves reads.
        assert await call(client, "read_resource", uri="legacy://state") == {"greeting": "hello"}
        error = await tool_error(client, "watch_start", name="old", uri="legacy://state")
        assert "speaks MCP 2025-11-25 and does not advertise resources.subscribe" in error

        # A URI no server lists goes to the first watchable server (the design's routing), whose
        # rejection names what it does serve.
        error = await tool_error(client, "watch_start", name="x", uri="nosuch://thing")
        assert "nosuch://thing" in error
        assert "file://{+path}" in error
        error = await tool_error(client, "read_resource", uri="nosuch://thing")
        assert "file://{+path}" in error

        uri0 = file_uri(tmp_path / "f0.json")
        error = await tool_error(client, "watch_start", name="bad", uri=uri0, on_event="event[")
        assert "SyntaxError" in error
        error = await tool_error(client, "watch_start", name="bad", uri=uri0, on_event="undefined_name + 1")
        assert "NameError" in error
        assert "undefined_name" in error
        error = await tool_error(client, "watch_start", name="bad", uri=uri0, on_event=7)
        assert error == "watch_start: on_event must be string or null, got 7"
        error = await tool_error(client, "watch_start", name="bad name!", uri=uri0)
        assert "invalid watch name 'bad name!'" in error
        error = await tool_error(client, "watch_start", name="x", uri=uri0, server="files")
        assert error == "watch_start: unknown argument(s) server; it accepts name, uri, on_event"
        error = await tool_error(client, "watch_start", name="x")
        assert error == "watch_start: missing required argument(s) uri; it accepts name, uri, on_event"
        error = await tool_error(client, "watch_notices", after_id=-1)
        assert error == "watch_notices: after_id must be an integer >= 0, got -1"
        # An unknown tool did not run and fail: it is JSON-RPC -32602 (invalid params), as every
        # reference server answers, naming the server and the tools there are.
        unknown = await protocol_error(client, "watch_everything", name="x")
        assert (unknown.code, unknown.message) == (
            -32602,
            f"asyncai-watch: unknown tool 'watch_everything'; its tools are {TOOL_NAMES}",
        )
        # serve serves no MCP resources itself (read_resource is a tool): no resource-not-found error.
        assert client.server_capabilities.resources is None

        for i in range(5):
            await call(client, "watch_start", name=f"w{i}", uri=file_uri(tmp_path / f"f{i}.json"))
        error = await tool_error(client, "watch_start", name="w5", uri=file_uri(tmp_path / "f5.json"))
        assert "at most 5 watches" in error
        assert "watch_stop(name=...)" in error
        # Nothing was subscribed for any failed call.
        assert [w["name"] for w in await call(client, "watch_list")] == [f"w{i}" for i in range(5)]
        assert await call(client, "watch_stop", name="w0") == {"name": "w0", "stopped": True}
        assert await call(client, "watch_stop", name="w0") == {"name": "w0", "stopped": False}


async def test_startup_errors_are_one_line_and_exit_2(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"mcpServers": {"files": {"command": "asyncai-mcp-files", "args": ["/srv",]}}}')
    good = tmp_path / "good.json"
    good.write_text(
        json.dumps({"mcpServers": {"files": {"command": FILES[0], "args": [*FILES[1:], str(tmp_path)]}}})
    )
    cases = {
        "malformed config": (["--config", str(broken)], f"{broken}: not valid JSON"),
        "unknown server name": (["--config", str(good), "--only", "memo"], "unknown server name(s) 'memo'"),
        "corrupt state file": (
            ["--config", str(good), "--watch-state", str(broken)],
            f"{broken}",
        ),
        "two servers named alike": (
            ["--server", shlex.join([*FILES, "/a"]), "--server", shlex.join([*FILES, "/b"])],
            "two upstream servers are both named 'asyncai_servers.files'; names must be unique",
        ),
    }
    results: dict[str, subprocess.CompletedProcess[bytes]] = {}

    async def run(label: str, argv: list[str]) -> None:
        results[label] = await anyio.run_process([*SERVE, *argv], check=False, stdin=subprocess.DEVNULL)

    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            for label, (argv, _) in cases.items():
                tg.start_soon(run, label, argv)
    for label, (_, message) in cases.items():
        done = results[label]
        err = done.stderr.decode()
        assert done.returncode == 2, (label, err)
        assert "Traceback" not in err, label
        assert err.startswith("asyncai-watch serve: error: "), (label, err)
        assert message in err, (label, err)
        assert err.count("\n") == 1, (label, err)
        assert done.stdout == b"", label  # stdout is the MCP wire: nothing else goes there
