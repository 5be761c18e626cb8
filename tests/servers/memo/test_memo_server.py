"""The memo reference server, as a real subprocess, over stdio and Streamable HTTP.

These talk to the server through the plain SDK client (not McpResourceSource),
so they pin the server's own contract: capabilities, the resource and its
``Example:`` line, no ``ttlMs``, the tools and their annotations, the listen
handler's URI check, and updates published on the subscription bus.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.subscriptions import ResourceUpdated

from asyncai_servers.memo import build_server
from asyncai_servers.memo.__main__ import main as memo_main
from tests.support.local_token import local_client
from tests.support.memo import MEMO, WAIT, memo_http_server


def stdio_params(*extra_args: str) -> StdioServerParameters:
    return StdioServerParameters(command=MEMO[0], args=[*MEMO[1:], *extra_args])


async def set_note(client: Client, key: str, value: Any) -> None:
    result = await client.call_tool("memo_set", {"key": key, "value": value})
    assert not result.is_error, result


async def read_notes(client: Client, uri: str = "memo://notes") -> Any:
    contents = (await client.read_resource(uri)).contents
    assert len(contents) == 1
    content = contents[0]
    assert getattr(content, "mime_type", None) == "application/json"
    return json.loads(content.text)  # type: ignore[union-attr]


@pytest.mark.anyio
async def test_stdio_contract_and_listen_roundtrip() -> None:
    async with Client(stdio_params(), cache=None) as client:
        assert client.protocol_version == "2026-07-28"
        assert client.server_info is not None
        assert client.server_info.name == "memo"
        resources_cap = client.server_capabilities.resources
        assert resources_cap is not None
        assert resources_cap.subscribe is True

        listed = await client.list_resources()
        (notes,) = listed.resources
        assert notes.uri == "memo://notes"
        assert notes.mime_type == "application/json"
        assert notes.description is not None
        assert (
            notes.description.splitlines()[-1]
            == 'Example: await watch_start(name="notes", uri="memo://notes")'
        )
        (template,) = (await client.list_resource_templates()).resource_templates
        assert template.uri_template == "memo://notes/{key}"
        assert template.description is not None
        assert "Example: await watch_start(" in template.description

        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(tools) == {"memo_set", "memo_get", "memo_delete", "memo_stats"}
        # The schema lookup the SDK's HTTP transport uses instead of a tools/list per call agrees
        # with the listing.
        lookup = build_server().get_tool_input_schema
        assert lookup is not None
        assert {name: lookup(name) for name in tools} == {name: t.input_schema for name, t in tools.items()}
        assert lookup("no_such_tool") is None
        get_notes = tools["memo_get"].annotations
        set_notes = tools["memo_set"].annotations
        delete_notes = tools["memo_delete"].annotations
        assert get_notes is not None
        assert get_notes.read_only_hint is True
        assert set_notes is not None
        assert set_notes.read_only_hint is False
        assert set_notes.destructive_hint is False
        assert delete_notes is not None
        assert delete_notes.destructive_hint is True

        first = await client.read_resource("memo://notes")
        assert first.ttl_ms in (None, 0), "a watched resource must not be cacheable"
        assert json.loads(first.contents[0].text) == {}  # type: ignore[union-attr]

        async with client.listen(resource_subscriptions=["memo://notes"]) as sub:
            assert sub.honored.resource_subscriptions == ["memo://notes"]
            # Values are any JSON, not just strings.
            await set_note(client, "plan", {"steps": [1, 2], "done": False})
            with anyio.fail_after(WAIT):
                event = await sub.__anext__()
            assert event == ResourceUpdated(uri="memo://notes")
            assert await read_notes(client) == {"plan": {"steps": [1, 2], "done": False}}

            # Two writes before one read: the pending updates are a set, the read is the net state.
            await set_note(client, "a", 1)
            await set_note(client, "a", 2)
            with anyio.fail_after(WAIT):
                event = await sub.__anext__()
            assert event == ResourceUpdated(uri="memo://notes")
            assert await read_notes(client) == {"plan": {"steps": [1, 2], "done": False}, "a": 2}

            deleted = await client.call_tool("memo_delete", {"key": "plan"})
            assert deleted.structured_content == {"key": "plan", "deleted": True}
            with anyio.fail_after(WAIT):
                await sub.__anext__()
            assert await read_notes(client) == {"a": 2}


@pytest.mark.anyio
async def test_per_key_template_resource_gets_its_own_updates() -> None:
    # In-process (same Server object, no subprocess): the wire is covered by the stdio/HTTP tests.
    async with Client(build_server(), cache=None) as client:
        assert await read_notes(client, "memo://notes/todo") is None
        async with client.listen(resource_subscriptions=["memo://notes/todo"]) as sub:
            await set_note(client, "other", "x")  # a different key: no update for memo://notes/todo
            await set_note(client, "todo", ["milk"])
            with anyio.fail_after(WAIT):
                event = await sub.__anext__()
            assert event == ResourceUpdated(uri="memo://notes/todo")
            assert await read_notes(client, "memo://notes/todo") == ["milk"]
        got = await client.call_tool("memo_get", {"key": "todo"})
        assert json.loads(got.content[0].text) == ["milk"]  # type: ignore[union-attr]
        assert got.structured_content == {"key": "todo", "value": ["milk"], "found": True}


@pytest.mark.anyio
async def test_bad_input_gets_clear_errors() -> None:
    async with Client(build_server(), cache=None) as client:
        with pytest.raises(MCPError, match=r"unknown resource 'memo://nope'.*memo://notes"):
            await client.read_resource("memo://nope")
        # The SDK's listen handler would ack any URI; the memo server refuses what it does not serve.
        with pytest.raises(MCPError, match=r"cannot subscribe to \['memo://nope'\]"):
            async with client.listen(resource_subscriptions=["memo://nope"]):
                pass

        async def tool_error(name: str, arguments: dict[str, Any]) -> str:
            result = await client.call_tool(name, arguments)
            assert result.is_error
            return result.content[0].text  # type: ignore[union-attr]

        assert "`value` is required" in await tool_error("memo_set", {"key": "k"})
        assert "`key` must be a non-empty string" in await tool_error("memo_set", {"key": "", "value": 1})
        assert "unknown argument(s) ['extra']" in await tool_error("memo_get", {"key": "k", "extra": 1})
        # Nothing was written by the rejected calls.
        assert await read_notes(client) == {}


@pytest.mark.anyio
async def test_http_second_client_write_reaches_first_clients_listen() -> None:
    async with memo_http_server() as (url, _proc):
        assert url.startswith("http://127.0.0.1:")
        assert url.endswith("/mcp")
        async with local_client(url, cache=None) as watcher, local_client(url, cache=None) as writer:
            assert watcher.protocol_version == "2026-07-28"
            async with watcher.listen(resource_subscriptions=["memo://notes"]) as sub:
                await set_note(writer, "from", "writer")
                with anyio.fail_after(WAIT):
                    event = await sub.__anext__()
                assert event == ResourceUpdated(uri="memo://notes")
                assert await read_notes(watcher) == {"from": "writer"}

                await set_note(writer, "n", 1)
                await set_note(writer, "n", 2)
                with anyio.fail_after(WAIT):
                    await sub.__anext__()
                assert await read_notes(watcher) == {"from": "writer", "n": 2}


@pytest.mark.anyio
async def test_also_http_serves_one_memo_to_a_stdio_watcher_and_an_http_writer(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    params = stdio_params("--also-http", "127.0.0.1:0", "--ready-file", str(ready))
    async with Client(params, cache=None) as watcher:
        # HTTP comes up before stdio answers, so the file is complete once we are connected.
        url = ready.read_text().split(" ", 1)[1].strip()
        assert url.startswith("http://127.0.0.1:")
        async with (
            local_client(url, cache=None) as writer,
            watcher.listen(resource_subscriptions=["memo://notes"]) as sub,
        ):
            await set_note(writer, "todo", "buy milk")
            with anyio.fail_after(WAIT):
                assert await sub.__anext__() == ResourceUpdated(uri="memo://notes")
            assert await read_notes(watcher) == {"todo": "buy milk"}
            await set_note(watcher, "owner", "me")
            assert await read_notes(writer) == {"owner": "me", "todo": "buy milk"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--ready-file", "x"], "--ready-file needs --also-http"),
        (["--http", "127.0.0.1:0", "--also-http", "127.0.0.1:0"], "not both"),
        (["--also-http", "nope"], "--also-http expects HOST:PORT"),
        (["--http", "nonsense"], "--http expects HOST:PORT"),
        (["--http", "127.0.0.1:99999"], "--http expects HOST:PORT"),
        (["--bearer-token", "x"], "--bearer-token was removed"),
    ],
)
def test_cli_rejects_bad_arguments(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        memo_main(argv)
    assert caught.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.anyio
async def test_http_server_exits_on_sigterm_with_a_listen_open() -> None:
    async with memo_http_server() as (url, proc), local_client(url, cache=None) as watcher:
        with contextlib.suppress(Exception):  # the stream ends with the server; how is not the point
            async with watcher.listen(resource_subscriptions=["memo://notes"]):
                proc.terminate()
                with anyio.fail_after(WAIT):
                    assert await proc.wait() == 0  # the open listen did not hold up the shutdown


@pytest.mark.anyio
async def test_also_http_ends_when_the_stdio_client_goes_away(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    os.mkfifo(ready)  # reading it waits for the server's READY line: a signal, not a probe
    argv = [*MEMO, "--also-http", "127.0.0.1:0", "--ready-file", str(ready)]
    proc = await anyio.open_process(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        with anyio.fail_after(WAIT):
            line = await anyio.to_thread.run_sync(lambda: ready.read_text(encoding="utf-8"))
        url = line.split(" ", 1)[1].strip()
        async with local_client(url, cache=None) as watcher:
            with contextlib.suppress(Exception):
                async with watcher.listen(resource_subscriptions=["memo://notes"]):
                    assert proc.stdin is not None
                    await proc.stdin.aclose()  # the stdio client is gone: the whole server ends
                    with anyio.fail_after(WAIT):
                        await proc.wait()
        assert proc.returncode == 0
    finally:
        if proc.returncode is None:
            proc.kill()
        with anyio.CancelScope(shield=True):
            await proc.aclose()


@pytest.mark.parametrize("flag", ["--http", "--also-http"])
def test_a_taken_port_is_one_line_and_exit_2(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert memo_main([flag, f"127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"asyncai-mcp-simple: cannot serve HTTP on 127.0.0.1:{port}: ")
    assert "Traceback" not in err
