"""A cap on one message from an upstream server (issue 28 item 5), against a hostile server.

tests/support/huge_server.py answers a read with a line far larger than the client's cap. The read fails
with an error naming the cap and its flag, the line is dropped as it arrives (memory stays
bounded: a 64 MiB line read with a 64 KiB cap), and the next request is answered: on the same
connection when the line's request id can be seen, on a respawned server when it cannot.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client

from asyncai_watch.errors import ServerConnectionError, ServerError
from asyncai_watch.jsonrpc_framing import LineReader, Overlong
from asyncai_watch.mcp.body_cap import DEFAULT_MAX_MESSAGE_BYTES
from asyncai_watch.mcp.client import McpResourceSource
from tests.support import SUPPORT
from tests.support.memo import WAIT, memo_http_server
from tests.support.serve import Channel, call, file_uri, files_arg, serve, tool_error, write

pytestmark = pytest.mark.anyio

HUGE = [sys.executable, str(SUPPORT / "huge_server.py")]
CAP = 64 << 10
NAMED = "more than the 65,536 bytes one message may hold (max_message_bytes; --max-message-bytes)"


async def test_a_line_over_the_cap_fails_its_read_and_the_connection_serves_the_next() -> None:
    async with McpResourceSource.stdio(HUGE, max_message_bytes=CAP) as src:
        for uri in ("huge://big?bytes=1048576", "huge://big-id-last?bytes=1048576"):
            with anyio.fail_after(WAIT), pytest.raises(ServerError) as info:
                await src.read(uri)
            assert NAMED in str(info.value)
            assert "its answer is 1,048," in str(info.value)  # its size, as it was counted
            with anyio.fail_after(WAIT):
                assert (await src.read("huge://small")).text == "small and fine"
        assert src.reconnects == 0  # the same connection all along


async def test_a_line_without_a_readable_id_ends_the_connection_and_the_server_is_respawned() -> None:
    async with McpResourceSource.stdio(HUGE, max_message_bytes=CAP) as src:
        with anyio.fail_after(WAIT), pytest.raises(ServerConnectionError) as info:
            await src.read("huge://no-id?bytes=1048576")
        assert NAMED in str(info.value)
        with anyio.fail_after(WAIT):
            assert (await src.read("huge://small")).text == "small and fine"
        assert src.reconnects == 1


async def test_the_default_cap_is_16_mib_and_a_body_under_it_is_read() -> None:
    assert DEFAULT_MAX_MESSAGE_BYTES == 16 << 20
    async with McpResourceSource.stdio(HUGE) as src:
        with anyio.fail_after(WAIT):
            assert len((await src.read("huge://big?bytes=3000000")).text) == 3_000_000
        with anyio.fail_after(WAIT), pytest.raises(ServerError, match="16,777,216 bytes one message"):
            await src.read(f"huge://big?bytes={17 << 20}")
        with anyio.fail_after(WAIT):
            assert (await src.read("huge://small")).text == "small and fine"


# A child process, so its peak RSS is the read's alone: connect, note the peak, read 64 MiB.
_PEAK = """
import resource, sys, anyio
from asyncai_watch.errors import ServerError
from asyncai_watch.mcp.client import McpResourceSource

async def main():
    async with McpResourceSource.stdio(sys.argv[1:], max_message_bytes=64 << 10) as src:
        await src.read("huge://small")
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            await src.read("huge://big?bytes=%d" % (64 << 20))
        except ServerError as exc:
            refused = "max_message_bytes" in str(exc)
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        text = (await src.read("huge://small")).text
    print(before, after, refused, text)

anyio.run(main)
"""


async def test_a_64_mib_line_is_dropped_as_it_comes_and_memory_stays_bounded() -> None:
    with anyio.fail_after(120):
        proc = await anyio.run_process([sys.executable, "-c", _PEAK, *HUGE], check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    before, after, refused, *text = proc.stdout.decode().split()
    assert (refused, " ".join(text)) == ("True", "small and fine")
    grown_kib = int(after) - int(before)  # ru_maxrss is in KiB on Linux
    assert grown_kib < 16 << 10, f"peak RSS grew {grown_kib} KiB reading a 64 MiB line with a 64 KiB cap"


async def test_an_http_body_over_the_cap_fails_its_read_and_the_session_serves_the_next() -> None:
    async with memo_http_server() as (url, _proc):
        async with McpResourceSource.http(url) as writer:
            for i in range(3):  # memo takes at most 4 MB per request: three 1 MB values
                await writer.call_tool("memo_set", {"key": f"blob{i}", "value": "x" * 1_000_000})
            await writer.call_tool("memo_set", {"key": "small", "value": "fine"})
        async with McpResourceSource.http(url, max_message_bytes=1 << 20) as src:
            with anyio.fail_after(WAIT), pytest.raises(ServerError) as info:
                await src.read("memo://notes")
            assert "one message may hold (max_message_bytes; --max-message-bytes)" in str(info.value)
            with anyio.fail_after(WAIT):
                assert json.loads((await src.read("memo://notes/small")).text) == "fine"


async def test_serve_answers_an_oversized_read_with_a_tool_error_and_keeps_serving(tmp_path: Path) -> None:
    """Through ``asyncai-watch serve`` (a real process): the cap on what the upstream sends
    (--max-message-bytes) and on what a tool result hands the host (--max-result-chars) are
    each a tool error naming the flag; the bridge answers the next call, and a watch on
    another upstream goes on pushing its changes."""
    doc = tmp_path / "doc.json"
    doc.write_text('{"a": 1}')
    params = serve(
        "--server",
        "huge=" + shlex.join(HUGE),
        "--server",
        files_arg(tmp_path),
        "--max-message-bytes",
        str(CAP),
        "--max-result-chars",
        "10000",
        "--debounce",
        "0",
    )
    channel = Channel()
    async with Client(params, cache=None, extensions=[channel]) as client:
        with anyio.fail_after(WAIT):
            await call(client, "watch_start", name="doc", uri=file_uri(doc))
            error = await tool_error(client, "read_resource", uri="huge://big?bytes=1048576")
        assert NAMED in error
        write(doc, '{"a": 2}')
        assert (await channel.next_for("doc")).content == "MODIFIED a (1→2)"
        with anyio.fail_after(WAIT):
            error = await tool_error(client, "read_resource", uri="huge://big?bytes=20000")
        assert "the result is 20,000 characters, more than the 10,000 a tool result may carry" in error
        assert "(--max-result-chars)" in error
        with anyio.fail_after(WAIT):
            result = await client.call_tool("read_resource", {"uri": "huge://small"})
            assert not result.is_error
            content = dict(result.structured_content or {})
            # The pushed notice no tool result has shown yet rides along (serve's new_notices).
            assert content.pop("new_notices")["count"] == 1
            assert content == {"uri": "huge://small", "value": "small and fine"}
            assert [w["name"] for w in await call(client, "watch_list")] == ["doc"]
        write(doc, '{"a": 3}')
        assert (await channel.next_for("doc")).content == "MODIFIED a (2→3)"


@pytest.mark.parametrize("piece", [1, 7, 100, 1 << 16])
async def test_the_line_reader_drops_an_over_long_line_and_keeps_the_lines_around_it(piece: int) -> None:
    big = b'{"jsonrpc":"2.0","id":7,"result":"' + b"x" * 5000 + b'"}'
    last = b'{"jsonrpc":"2.0","result":"' + b"y" * 5000 + b'","id":"r-9"}'
    wire = b'{"a":1}\n' + big + b"\n" + b'{"b":2}\n' + last + b"\n" + b"x" * 3000
    send, receive = anyio.create_memory_object_stream[bytes](len(wire))
    for i in range(0, len(wire), piece):
        send.send_nowait(wire[i : i + piece])
    send.close()
    reader = LineReader(receive, max_line=1000)
    got: list[bytes | Overlong] = []
    with anyio.fail_after(WAIT):
        while True:
            try:
                line = await reader.receive()
            except anyio.EndOfStream:
                break
            got.append(line if isinstance(line, Overlong) else bytes(line))
    assert [g if isinstance(g, bytes) else (g.size, g.request_id()) for g in got] == [
        b'{"a":1}',
        (len(big), 7),
        b'{"b":2}',
        (len(last), "r-9"),
        (3000, None),  # the unterminated tail, too long as well
    ]


async def test_the_cli_takes_the_cap_as_max_message_bytes() -> None:
    cli = [sys.executable, "-m", "asyncai_watch", "resources", "--server", shlex.join(HUGE)]
    with anyio.fail_after(WAIT):
        done = await anyio.run_process([*cli, "--max-message-bytes", "100"], check=False)
    assert done.returncode == 2
    last = done.stderr.decode().splitlines()[-1]
    assert last.startswith("asyncai-watch: error: cannot connect to MCP server")
    assert "more than the 100 bytes one message may hold (max_message_bytes; --max-message-bytes)" in last
    with anyio.fail_after(WAIT):
        done = await anyio.run_process([*cli, "--max-message-bytes", "0"], check=False)
    assert done.returncode == 2
    assert "--max-message-bytes: must be a whole number of bytes >= 1" in done.stderr.decode()
    with anyio.fail_after(WAIT):
        done = await anyio.run_process(cli, check=False)  # the default cap: listed
    assert done.returncode == 0, done.stderr.decode()
    assert "huge://small" in done.stdout.decode()
