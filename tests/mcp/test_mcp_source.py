"""McpResourceSource against real servers: the memo server (stdio and HTTP) and a legacy-only server."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import mcp_types as types
import pytest
from mcp.client import advertise
from mcp.shared.message import SessionMessage

from asyncai_watch import jsonrpc_framing
from asyncai_watch.errors import (
    NotWatchableError,
    ServerConnectionError,
    ServerError,
    ServerTimeoutError,
    SubscriptionLostError,
    WatchError,
)
from asyncai_watch.jsonrpc_framing import LineReader
from asyncai_watch.mcp.client import McpResourceSource
from asyncai_watch.mcp.source import ReadResult, ResourceSource
from asyncai_watch.testing import FakeClock
from tests.support import SUPPORT
from tests.support.memo import MEMO, WAIT, memo_http_server

LEGACY = [sys.executable, str(SUPPORT / "legacy_server.py")]


async def memo_set(src: McpResourceSource, key: str, value: object) -> None:
    result = await src.call_tool("memo_set", {"key": key, "value": value})
    assert not result.is_error, result.text


async def read_json(src: McpResourceSource, uri: str = "memo://notes") -> object:
    result = await src.read(uri)
    assert result.mime_type == "application/json"
    return json.loads(result.text)


@pytest.mark.anyio
async def test_stdio_memo_listen_update_reread() -> None:
    extensions = [advertise("io.asyncai/probe", {"v": 1})]  # passed through to the SDK client
    async with McpResourceSource.stdio(MEMO, extensions=extensions) as src:
        assert isinstance(src, ResourceSource)
        assert src.name == "memo"  # from serverInfo
        assert src.protocol_version == "2026-07-28"
        assert src.watchable is True
        assert [r.uri for r in await src.list_resources()] == ["memo://notes"]
        (notes,) = await src.list_resources()
        assert notes.mime_type == "application/json"
        assert notes.description.endswith('Example: await watch_start(name="notes", uri="memo://notes")')
        assert [t.uri_template for t in await src.list_templates()] == ["memo://notes/{key}"]
        assert await src.read("memo://notes") == ReadResult(
            uri="memo://notes", text="{}", mime_type="application/json"
        )

        async with src.subscribe(["memo://notes"]) as updates:
            await memo_set(src, "k", {"nested": [1, None, "x"]})
            with anyio.fail_after(WAIT):
                await anext(updates)
            assert await read_json(src) == {"k": {"nested": [1, None, "x"]}}

            # Two writes before one read: one signal (the SDK's pending set), one net state.
            await memo_set(src, "a", 1)
            await memo_set(src, "a", 2)
            with anyio.fail_after(WAIT):
                await updates.__anext__()
            assert await read_json(src) == {"k": {"nested": [1, None, "x"]}, "a": 2}

        # A URI from the template: its own listen, its own updates.
        assert await read_json(src, "memo://notes/wanted") is None
        async with src.subscribe(["memo://notes/wanted"]) as updates:
            await memo_set(src, "unrelated", 1)
            await memo_set(src, "wanted", "yes")
            with anyio.fail_after(WAIT):
                await updates.__anext__()
            assert await read_json(src, "memo://notes/wanted") == "yes"


@pytest.mark.anyio
async def test_one_listen_holds_many_uris_and_names_the_one_that_changed() -> None:
    async with McpResourceSource.stdio(MEMO) as src:
        uris = [f"memo://notes/k{i}" for i in range(2000)]
        async with src.subscribe(uris) as updates:
            assert updates.honored == frozenset(uris)
            await memo_set(src, "k1234", "x")
            with anyio.fail_after(WAIT):
                assert await anext(updates) == "memo://notes/k1234"


@pytest.mark.anyio
async def test_http_bearer_token_goes_in_headers(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("tok-123\n")
    token_file.chmod(0o600)
    async with memo_http_server("--token-file", str(token_file)) as (url, _proc):
        async with McpResourceSource.http(url, headers={"Authorization": "Bearer tok-123"}) as src:
            assert [r.uri for r in await src.list_resources()] == ["memo://notes"]
        with anyio.fail_after(WAIT), pytest.raises(ServerConnectionError, match=r"HTTP 401") as caught:
            async with McpResourceSource.http(url, headers={"Authorization": "Bearer wrong"}):
                pass
        assert url in str(caught.value)


@pytest.mark.anyio
async def test_http_server_killed_loses_subscription_and_a_restart_is_picked_up() -> None:
    async with memo_http_server() as (url, proc), McpResourceSource.http(url) as src:
        async with src.subscribe(["memo://notes"]) as updates:
            await memo_set(src, "before", 1)
            with anyio.fail_after(WAIT):
                await updates.__anext__()
            proc.kill()
            with anyio.fail_after(WAIT), pytest.raises(SubscriptionLostError, match=r"'memo'.*memo://notes"):
                await updates.__anext__()
        with anyio.fail_after(WAIT), pytest.raises(ServerConnectionError, match=r"ConnectError"):
            await src.read("memo://notes")

        # The server comes back on the same address (a restart): the next calls reconnect.
        address = url.removeprefix("http://").removesuffix("/mcp")
        async with memo_http_server(address=address) as (url2, _proc2):
            assert url2 == url
            assert await read_json(src) == {}  # a fresh server: its memo is empty
            async with src.subscribe(["memo://notes"]) as updates:
                await memo_set(src, "after", 2)
                with anyio.fail_after(WAIT):
                    await updates.__anext__()
                assert await read_json(src) == {"after": 2}


@pytest.mark.anyio
async def test_stdio_server_death_surfaces_then_the_next_call_respawns_it(tmp_path: Path) -> None:
    pid_file, refuse = tmp_path / "memo.pid", tmp_path / "refuse"
    # `exec` keeps the PID, so the file names the server process itself; it is written before
    # the server can answer, so it exists once a connection is up. While `refuse` exists the
    # command exits at once, like a server that cannot start.
    script = f'[ -e "{refuse}" ] && exit 1; echo $$ > "{pid_file}"; exec "$@"'
    wrapper = ["sh", "-c", script, "sh", *MEMO]

    def kill_server() -> None:
        os.kill(int(pid_file.read_text()), signal.SIGKILL)

    async with McpResourceSource.stdio(wrapper, name="doomed") as src:
        async with src.subscribe(["memo://notes"]) as updates:
            await memo_set(src, "a", 1)
            with anyio.fail_after(WAIT):
                await updates.__anext__()
            kill_server()
            with (
                anyio.fail_after(WAIT),
                pytest.raises(SubscriptionLostError, match=r"'doomed'.*memo://notes"),
            ):
                await updates.__anext__()
        assert src.reconnects == 0

        # The loss marked the connection dead, so the next calls respawn the server first:
        # once, though two tasks call at the same time.
        reads: list[object] = []

        async def read_into() -> None:
            reads.append(await read_json(src))

        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(read_into)
                tg.start_soon(read_into)
        assert reads == [{}, {}]
        assert src.reconnects == 1
        async with src.subscribe(["memo://notes"]) as updates:
            await memo_set(src, "b", 2)
            with anyio.fail_after(WAIT):
                await updates.__anext__()
            assert await read_json(src) == {"b": 2}

        # A server that cannot come back: every call fails clearly, none hangs.
        refuse.touch()
        kill_server()
        with (
            anyio.fail_after(WAIT),
            pytest.raises(ServerConnectionError, match=r"'doomed'.*connection is closed"),
        ):
            await src.read("memo://notes")
        with (
            anyio.fail_after(WAIT),
            pytest.raises(ServerConnectionError, match=r"closed the connection before"),
        ):
            await src.read("memo://notes")
        with anyio.fail_after(WAIT), pytest.raises(ServerConnectionError, match=r"cannot connect"):
            async with src.subscribe(["memo://notes"]):
                pass
        refuse.unlink()
        with anyio.fail_after(WAIT):
            assert await read_json(src) == {}
        assert src.reconnects == 2


@pytest.mark.anyio
async def test_tools_and_server_errors() -> None:
    async with McpResourceSource.stdio(MEMO) as src:
        tools = {tool.name: tool for tool in await src.list_tools()}
        assert tools["memo_get"].read_only
        assert not tools["memo_get"].destructive
        assert not tools["memo_set"].read_only
        assert not tools["memo_set"].destructive
        assert not tools["memo_delete"].read_only
        assert tools["memo_delete"].destructive
        assert tools["memo_set"].input_schema["required"] == ["key", "value"]
        await memo_set(src, "x", [1, 2])
        got = await src.call_tool("memo_get", {"key": "x"})
        assert (got.text, got.structured, got.is_error) == (
            "[1, 2]",
            {"key": "x", "value": [1, 2], "found": True},
            False,
        )

        with pytest.raises(ServerError, match=r"unknown resource 'memo://nope'") as caught:
            await src.read("memo://nope")
        assert caught.value.code == -32602
        assert "memo://notes" in caught.value.server_message
        assert isinstance(caught.value, WatchError)
        with pytest.raises(ServerError, match=r"cannot subscribe to \['memo://nope'\]"):
            async with src.subscribe(["memo://nope"]):
                pass
        # A tool failure is an in-band result, not an exception.
        failed = await src.call_tool("memo_set", {"key": "k"})
        assert failed.is_error
        assert "`value` is required" in failed.text


@pytest.mark.anyio
async def test_a_legacy_server_serves_tools_and_is_watched_through_resources_subscribe() -> None:
    async with McpResourceSource.stdio(LEGACY) as src:
        assert src.name == "legacy"
        assert src.protocol_version == "2025-11-25"
        tools = {tool.name: tool for tool in await src.list_tools()}
        assert tools["legacy_get"].read_only is True
        assert (tools["legacy_set"].read_only, tools["legacy_set"].destructive) == (False, False)
        # No readOnlyHint at all: not read-only, and (MCP's default) destructive.
        assert (tools["legacy_methods"].read_only, tools["legacy_methods"].destructive) == (False, True)

        assert (await src.call_tool("legacy_get", {"key": "greeting"})).text == '"hello"'
        assert not (await src.call_tool("legacy_set", {"key": "n", "value": 5})).is_error
        assert json.loads((await src.read("legacy://state")).text) == {"greeting": "hello", "n": 5}
        # resources/list comes in two pages; both are followed.
        assert [r.uri for r in await src.list_resources()] == [
            "legacy://state",
            "legacy://blob/text",
            "legacy://blob/binary",
        ]
        assert [t.uri_template for t in await src.list_templates()] == ["legacy://items/{id}"]
        blob = await src.read("legacy://blob/text")
        assert (blob.text, blob.mime_type) == ("héllo as a blob", "text/plain")
        with pytest.raises(ServerError, match=r"binary blob \(application/octet-stream\)"):
            await src.read("legacy://blob/binary")

        # A 2025-era server that advertises resources.subscribe is watched through it.
        assert src.watchable
        assert src.subscription_mode == "subscribe"
        async with src.subscribe(["legacy://state"]) as updates:
            assert updates.honored == {"legacy://state"}
            await src.call_tool("legacy_set", {"key": "n", "value": 6})
            with anyio.fail_after(WAIT):
                assert await anext(updates) == "legacy://state"
        with pytest.raises(ValueError, match="takes one URI"):
            async with src.subscribe(["legacy://state", "legacy://items/n"]):
                pass
        methods = json.loads((await src.call_tool("legacy_methods", {})).text)
        assert methods[:2] == ["server/discover", "initialize"]  # probed modern, fell back
        assert [m for m in methods if m.startswith("resources/") and "subscribe" in m] == [
            "resources/subscribe",
            "resources/unsubscribe",
        ]
        assert "subscriptions/listen" not in methods


@pytest.mark.anyio
async def test_a_legacy_server_that_advertises_no_subscribe_is_not_watchable() -> None:
    async with McpResourceSource.stdio([*LEGACY, "--no-subscribe"]) as src:
        assert not src.watchable
        with pytest.raises(
            NotWatchableError, match=r"speaks MCP 2025-11-25 and does not advertise resources.subscribe"
        ):
            async with src.subscribe(["legacy://state"]):
                pass
        assert json.loads((await src.read("legacy://state")).text) == {"greeting": "hello"}


@pytest.mark.anyio
async def test_legacy_subscriptions_are_lost_with_the_server_and_made_again_after_a_respawn() -> None:
    async with McpResourceSource.stdio(LEGACY) as src:
        async with src.subscribe(["legacy://state"]) as updates:
            methods = json.loads((await src.call_tool("legacy_methods", {})).text)
            assert "resources/subscribe" in methods
            src._current().abort()  # the server goes away (its process is ended)
            with anyio.fail_after(WAIT), pytest.raises(SubscriptionLostError, match="connection"):
                await anext(updates)
        # The next subscribe respawns the server and subscribes on its new session.
        async with src.subscribe(["legacy://state"]) as updates:
            await src.call_tool("legacy_set", {"key": "after", "value": 1})
            with anyio.fail_after(WAIT):
                assert await anext(updates) == "legacy://state"
        assert src.reconnects == 1


@pytest.mark.anyio
async def test_connection_failures_are_clear_and_bounded(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-server")
    with (
        anyio.fail_after(WAIT),
        pytest.raises(ServerConnectionError, match=r"cannot start MCP server command") as e1,
    ):
        async with McpResourceSource.stdio(missing):
            pass
    assert missing in str(e1.value)

    exits = [sys.executable, "-c", "import sys; sys.exit(3)"]
    with (
        anyio.fail_after(WAIT),
        pytest.raises(ServerConnectionError, match=r"closed the connection before answering"),
    ):
        async with McpResourceSource.stdio(exits):
            pass

    # Reads its stdin to EOF and never answers: only the connect timeout ends the wait.
    silent = [sys.executable, "-c", "import sys; sys.stdin.read()"]
    with anyio.fail_after(WAIT), pytest.raises(ServerConnectionError, match=r"no answer .* within 0.5 s"):
        async with McpResourceSource.stdio(silent, connect_timeout=0.5):
            pass

    # A bound socket that does not listen: connecting to it is refused.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
        with anyio.fail_after(WAIT), pytest.raises(ServerConnectionError, match=r"ConnectError") as e2:
            async with McpResourceSource.http(url):
                pass
        assert url in str(e2.value)


def test_bad_arguments_are_rejected_up_front() -> None:
    with pytest.raises(ValueError, match=r"expected an http\(s\) URL"):
        McpResourceSource.http("localhost:8080")
    with pytest.raises(ValueError, match=r"must name a program"):
        McpResourceSource.stdio("")
    with pytest.raises(ValueError, match=r"name must be a non-empty string"):
        McpResourceSource.stdio(MEMO, name=" ")
    src = McpResourceSource.stdio("asyncai-mcp-simple --flag 'two words'")
    assert src.name == "asyncai-mcp-simple"  # before connecting: the command's basename
    assert "asyncai-mcp-simple --flag 'two words'" in src.description
    with pytest.raises(RuntimeError, match=r"not open"):
        _ = src.client
    assert McpResourceSource.http("http://user:pw@example.test:81/mcp").name == "example.test"
    assert "pw" not in McpResourceSource.http("http://user:pw@example.test:81/mcp").description


@pytest.mark.anyio
async def test_a_server_that_stops_answering_times_out_and_the_source_recovers() -> None:
    """A wedged server (SIGSTOP: connected, silent) must not hang a read or a listen for good."""
    clock = FakeClock()
    async with (
        memo_http_server() as (url, proc),
        McpResourceSource.http(url, request_timeout=20, clock=clock) as src,
    ):
        await memo_set(src, "k", 1)
        async with src.subscribe(["memo://notes"]) as updates:
            os.kill(proc.pid, signal.SIGSTOP)
            try:
                async with anyio.create_task_group() as tg:

                    async def read() -> None:
                        with pytest.raises(ServerTimeoutError) as caught:
                            await src.read("memo://notes")
                        assert "resources/read 'memo://notes' got no answer within 20 s" in str(caught.value)
                        assert url in str(caught.value)

                    tg.start_soon(read)
                    with anyio.fail_after(WAIT):
                        await clock.wait_for_sleepers(1)  # the read's deadline
                    clock.advance(20)
                # The connection was dropped, so its listen ends instead of waiting on a silent server.
                with anyio.fail_after(WAIT), pytest.raises(SubscriptionLostError):
                    await updates.__anext__()
            finally:
                os.kill(proc.pid, signal.SIGCONT)
        # The server answers again: the next call reconnects.
        with anyio.fail_after(WAIT):
            assert await read_json(src) == {"k": 1}
        assert src.reconnects == 1


def test_request_timeout_must_be_positive_or_none() -> None:
    with pytest.raises(
        ValueError, match=r"request_timeout must be > 0 seconds \(or None for no bound\), got 0"
    ):
        McpResourceSource.http("http://127.0.0.1:1/mcp", request_timeout=0)
    McpResourceSource.http("http://127.0.0.1:1/mcp", request_timeout=None)  # unbounded is allowed


@pytest.mark.anyio
async def test_errors_are_the_same_on_an_injected_clock() -> None:
    # The timeouts' helper task must not wrap a server's answer in an ExceptionGroup.
    async with McpResourceSource.stdio(MEMO, clock=FakeClock()) as src:
        with anyio.fail_after(WAIT), pytest.raises(ServerError, match=r"-32602"):
            await src.read("nope://x")
        assert await read_json(src) == {}


# Run in a child process: the bug this guards against is an endless loop in CPython's
# AsyncExitStack, which no timeout inside the same process can interrupt.
CANCELLED_IN_A_STACK = """
import sys
from contextlib import AsyncExitStack

import anyio

from asyncai_watch.mcp.client import McpResourceSource

async def main():
    with anyio.CancelScope() as scope:
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(anyio.create_task_group())
            await stack.enter_async_context(McpResourceSource.stdio(sys.argv[1:]))
            scope.cancel()  # Ctrl-C while connected: the source closes under cancellation
            await anyio.sleep_forever()
    print("closed", scope.cancelled_caught)

anyio.run(main)
"""


@pytest.mark.anyio
async def test_a_source_closed_by_cancellation_inside_an_exit_stack_exits() -> None:
    # Two fresh interpreters (the program and its memo) start, import and exit: under load that
    # takes far longer than one awaited event (WAIT).
    with anyio.fail_after(90):
        proc = await anyio.run_process([sys.executable, "-c", CANCELLED_IN_A_STACK, *MEMO], check=False)
    assert (proc.returncode, proc.stdout.decode().strip()) == (0, "closed True"), proc.stderr.decode()


def _byte_stream(pieces: list[bytes]) -> Any:
    send, receive = anyio.create_memory_object_stream[bytes](len(pieces) + 1)
    for piece in pieces:
        send.send_nowait(piece)
    send.close()
    return receive


async def _lines_of(stream: Any) -> list[bytes]:
    reader = LineReader(stream)
    lines: list[bytes] = []
    while True:
        try:
            lines.append(bytes(await reader.receive()))
        except anyio.EndOfStream:
            return lines


PIECES = [b'{"a"', b":1}\n{", b'"b":2}\n{"c":3}\n', "é".encode()[:1], "é".encode()[1:] + b"tail"]


def sdk_parse(line: str | bytes) -> Any:
    """What the SDK's own stdio reader makes of a line."""
    return types.jsonrpc_message_adapter.validate_json(line, by_name=False)


@pytest.mark.anyio
async def test_the_line_reader_gives_whole_lines_and_the_tail_at_eof() -> None:
    """Lines are split as bytes (a character split between reads too), each handed out whole,
    and a last line without its newline is a line as well."""
    assert await _lines_of(_byte_stream(PIECES)) == [b'{"a":1}', b'{"b":2}', b'{"c":3}', "étail".encode()]
    assert await _lines_of(_byte_stream([])) == []
    assert await _lines_of(_byte_stream([b"\n\n", b"x\n"])) == [b"", b"", b"x"]


@pytest.mark.anyio
async def test_a_large_line_is_parsed_in_steps_while_the_loop_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A line over LARGE_LINE is parsed with the event loop running between steps (another task
    runs many times meanwhile) into the same message the SDK would have made."""
    text = json.dumps({"big": 'é"x\\😀' * 200_000, "n": 12345678901234567890123})
    line = json.dumps(
        {"jsonrpc": "2.0", "id": 7, "result": {"contents": [{"uri": "memo://n", "text": text}]}}
    ).encode()
    monkeypatch.setattr(jsonrpc_framing, "LARGE_LINE", len(line) // 10)
    turns = 0

    async def other_task() -> None:
        nonlocal turns
        while True:
            turns += 1
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(other_task)
        parsed = await jsonrpc_framing.read_message(line)
        tg.cancel_scope.cancel()
    assert isinstance(parsed, SessionMessage)
    assert parsed.message == sdk_parse(line)
    assert turns >= 6  # the parse stepped: each level's scan, then the 2 MB string in 1 MiB pieces


@pytest.mark.anyio
@pytest.mark.parametrize("large", [False, True])
async def test_a_line_that_is_no_message_says_which_error_and_keeps_the_id(
    monkeypatch: pytest.MonkeyPatch, large: bool
) -> None:
    """Not JSON, or nested too deep: -32700; JSON but no JSON-RPC message: -32600. The request
    id is kept wherever it can be read (at the object's top level only), small or large line."""
    if large:
        monkeypatch.setattr(jsonrpc_framing, "LARGE_LINE", 100)
    pad = "x" * 300
    deep = "[" * 100_000 + "]" * 100_000
    cases = [
        (f'{{"jsonrpc": "2.0", "id": 5, "method": "ping", "params": {{"p": "{pad}"', -32700, 5),
        (f'{{"params": {{"id": 9, "p": "{pad}"}}, "id": "abc", "method": "ping", ', -32700, "abc"),
        (f'{{"jsonrpc": "2.0", "id": 8, "method": "ping", "params": {{"x": {deep}}}}}', -32700, 8),
        (f'{{"jsonrpc": "2.0", "method": "ping", "params": {{"x": {deep}, "id": 3}}}}', -32700, None),
        (f'{{"p": "{pad}", "x": "\\"id\\": 4", "id": 6.5', -32700, None),
        (f"not json {pad}", -32700, None),
        (f'{{"no": "message", "id": 11, "x": "{pad}"}}', -32600, 11),
        (f'{{"jsonrpc": "2.0", "id": 12, "method": "ping", "params": ["{pad}"]}}', -32600, 12),
        (f'["{pad}"]', -32600, None),
    ]
    for text, code, request_id in cases:
        got = await jsonrpc_framing.read_message(text.encode())
        assert isinstance(got, jsonrpc_framing.MessageError), text[:80]
        assert (got.code, got.request_id) == (code, request_id), (text[:80], got)
        assert len(got.message) < 300  # says what is wrong without quoting the line
        reply = json.loads(jsonrpc_framing.error_line(got))
        assert reply == {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": got.message}}


def test_a_large_message_is_parsed_to_the_same_message_the_sdk_makes() -> None:
    """Lines over LARGE_LINE are decoded in steps, then validated by the SDK's own model: the
    message is the same."""
    text = json.dumps({"big": 'é"x' * (jsonrpc_framing.LARGE_LINE // 3), "n": 12345678901234567890123})
    answer = {"contents": [{"uri": "memo://notes", "mimeType": "application/json", "text": text}]}
    for message in [
        {"jsonrpc": "2.0", "id": 7, "result": answer},
        {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": text}},
    ]:
        line = json.dumps(message).encode()
        assert len(line) > jsonrpc_framing.LARGE_LINE
        parsed = anyio.run(jsonrpc_framing.read_message, line)
        assert isinstance(parsed, SessionMessage)
        assert parsed.message == sdk_parse(line)
        assert (
            jsonrpc_framing.encode_message(parsed)
            == parsed.message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"
        )


@pytest.mark.anyio
async def test_a_large_body_arrives_whole_over_stdio() -> None:
    value = "x" * (3 * 1024 * 1024)  # 3 MiB: about 50 chunks of the SDK's reader
    async with McpResourceSource.stdio(MEMO) as src:
        await memo_set(src, "big", value)
        with anyio.fail_after(WAIT):
            assert await read_json(src) == {"big": value}


CARELESS = [sys.executable, str(SUPPORT / "careless_server.py")]


@pytest.mark.anyio
async def test_a_result_the_sdk_refuses_is_a_server_error_naming_the_method() -> None:
    async with McpResourceSource.stdio(CARELESS) as src:
        assert src.protocol_version == "2026-07-28"
        # MCP: a tool result without resultType is complete.
        done = await src.call_tool("no_result_type", {})
        assert (done.text, done.is_error) == ("no_result_type ran", False)
        with pytest.raises(
            ServerError, match=r"tools/call 'broken' failed: its result is not valid MCP 2026-07-28: .*text"
        ):
            await src.call_tool("broken", {})
        with pytest.raises(
            ServerError, match=r"tools/call 'bad_structure' failed: its result was refused: .*"
        ):
            await src.call_tool("bad_structure", {})
        # Read as complete, it is still held to the tool's output schema.
        with pytest.raises(
            ServerError, match=r"tools/call 'no_result_type_bad_structure' failed: its result was refused"
        ):
            await src.call_tool("no_result_type_bad_structure", {})
        with pytest.raises(
            ServerError,
            match=r"resources/read 'x://y' failed: its result is not valid MCP 2026-07-28: .*ttlMs",
        ):
            await src.read("x://y")
        # The connection is fine: a refused result is the server's fault, not the transport's.
        assert (await src.call_tool("no_result_type", {})).text == "no_result_type ran"
        assert src.reconnects == 0
