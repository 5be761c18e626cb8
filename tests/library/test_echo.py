"""What errors, logs and CLIs echo back: secrets in URLs and headers redacted, caller input capped."""

from __future__ import annotations

import io
import json
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp.client import Client
from mcp.shared.exceptions import MCPError

from asyncai_watch import log
from asyncai_watch.core.echo import SECRET_PARAMETERS, quoted, redact, redact_url
from asyncai_watch.core.routing import ServerListing
from asyncai_watch.core.routing import route as route_uri
from asyncai_watch.core.spec import WatchSpec
from asyncai_watch.errors import (
    FilterError,
    InvalidWatchNameError,
    RoutingError,
    ServerConnectionError,
    ServerError,
)
from asyncai_watch.mcp.client import McpResourceSource
from asyncai_watch.runtime.manager import WatchManager
from asyncai_watch.serve.bridge import Bridge
from asyncai_watch.serve.hub import Hub
from asyncai_watch.serve.ring import NoticeRing
from asyncai_watch.serve.server import build_server
from asyncai_watch.testing import FakeClock
from tests.support.managers import IMMEDIATE, NOTES, memo_fake
from tests.support.serve import MEMO, serve

SECRET = "S3CRET-value"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nobody listens here once the socket is closed


# -- redaction ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://h/mcp?access_token=S3", "https://h/mcp?access_token=***"),
        ("https://h/mcp?a=1&token=S3&b=2", "https://h/mcp?a=1&token=***&b=2"),
        ("https://h/cb#access_token=S3&state=xyz", "https://h/cb#access_token=***&state=xyz"),
        ("https://u:pw@h:81/mcp", "https://***@h:81/mcp"),
        (
            "https://h/o?X-Amz-Signature=S3&X-Amz-Credential=S3",
            "https://h/o?X-Amz-Signature=***&X-Amz-Credential=***",
        ),
        ("https://h/o?sv=1&sig=S3", "https://h/o?sv=1&sig=***"),
        ("https://h/?Access_Token=S3&KEY=S3", "https://h/?Access_Token=***&KEY=***"),
        ("https://h/?password=S3&secret=S3&code=S3", "https://h/?password=***&secret=***&code=***"),
        ("https://h/?refresh_token=S3&client_secret=S3", "https://h/?refresh_token=***&client_secret=***"),
        # An authorization URL a person must open keeps everything it needs.
        (
            "https://as/authorize?response_type=code&client_id=c&code_challenge=x&state=s"
            "&redirect_uri=http%3A%2F%2F127.0.0.1%3A33418%2Fcallback",
            "https://as/authorize?response_type=code&client_id=c&code_challenge=x&state=s"
            "&redirect_uri=http%3A%2F%2F127.0.0.1%3A33418%2Fcallback",
        ),
        ("http://127.0.0.1:8765/mcp", "http://127.0.0.1:8765/mcp"),
    ],
)
def test_a_url_loses_its_userinfo_and_secret_parameters(url: str, expected: str) -> None:
    assert redact_url(url) == expected


def test_the_secret_parameter_list_is_explicit() -> None:
    for name in (
        "access_token",
        "refresh_token",
        "token",
        "key",
        "signature",
        "sig",
        "password",
        "secret",
        "code",
    ):
        assert name in SECRET_PARAMETERS
    for name in ("state", "client_id", "code_challenge", "redirect_uri", "scope"):
        assert name not in SECRET_PARAMETERS


def test_every_url_and_bearer_token_in_a_text_is_redacted() -> None:
    text = (
        f"Client error '401 Unauthorized' for url 'https://h/mcp?access_token={SECRET}'; "
        f"Illegal header value b'Bearer {SECRET}'; retry https://u:{SECRET}@h/x"
    )
    out = redact(text)
    assert SECRET not in out
    assert "for url 'https://h/mcp?access_token=***'" in out
    assert "b'Bearer ***'" in out
    assert "https://***@h/x" in out
    assert redact("nothing to see here") == "nothing to see here"
    # A token endpoint's body quoted in an OAuth error, as JSON or as a form.
    body = f'Token refresh failed: 400 {{"access_token": "{SECRET}", "refresh_token":"{SECRET}"}}'
    assert SECRET not in redact(body)
    assert '"access_token": "***"' in redact(body)
    assert redact(f"grant_type=refresh_token&refresh_token={SECRET}&client_secret={SECRET}") == (
        "grant_type=refresh_token&refresh_token=***&client_secret=***"
    )
    assert redact("MODIFIED key=3 (token=2)") == "MODIFIED key=3 (token=2)"  # ordinary words stay


# -- where URLs are echoed ------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_secret_in_a_server_url_is_in_no_error_or_description() -> None:
    url = f"http://127.0.0.1:{closed_port()}/mcp?access_token={SECRET}"
    source = McpResourceSource.http(url, headers={"Authorization": f"Bearer {SECRET}"})
    assert SECRET not in source.description
    assert SECRET not in repr(source)
    assert "access_token=***" in source.description
    with pytest.raises(ServerConnectionError) as info:
        async with source:
            pytest.fail("nothing listens there")
    assert "cannot connect to MCP server URL" in str(info.value)
    assert SECRET not in str(info.value)
    with pytest.raises(ValueError, match="expected an http") as bad:
        McpResourceSource.http(f"ftp://h/mcp?token={SECRET}")
    assert SECRET not in str(bad.value)


@pytest.mark.anyio
async def test_a_header_value_with_a_line_break_is_refused_by_name_only() -> None:
    with pytest.raises(ValueError, match="holds a line break or NUL") as info:
        McpResourceSource.http("http://h/mcp", headers={"Authorization": f"Bearer {SECRET}\nX-Evil: 1"})
    assert "header 'Authorization'" in str(info.value)
    assert SECRET not in str(info.value)


def test_ndjson_records_carry_no_secret_in_any_field_or_traceback() -> None:
    stream = io.StringIO()
    handler = log.configure_ndjson(stream, verbose=True)
    try:
        log.emit("watch.list_failed", server="h", error=f"GET https://h/mcp?token={SECRET} failed")
        log.emit("auth.check", headers=[f"Authorization: Bearer {SECRET}"])
        try:
            raise ConnectionError(f"lost https://h/mcp?key={SECRET}")
        except ConnectionError:
            log.logger.exception("serve.tool_failed", extra={"tool": "read_resource"})
    finally:
        log.logger.removeHandler(handler)
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [r["event"] for r in records] == ["watch.list_failed", "auth.check", "serve.tool_failed"]
    assert SECRET not in stream.getvalue()
    assert records[0]["error"] == "GET https://h/mcp?token=*** failed"
    assert "key=***" in records[2]["exc_info"]


def watch_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``asyncai-watch watch ARGS`` to its end (each case here fails at once, with exit 2)."""
    return subprocess.run(
        [sys.executable, "-m", "asyncai_watch", "watch", *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_cli_names_the_server_without_its_secrets(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(f"{SECRET}-tok\n")
    token.chmod(0o600)
    url = f"http://127.0.0.1:{closed_port()}/mcp?access_token={SECRET}"
    run = watch_cli("memo://notes", "--server", url, "--token-file", str(token))
    (line,) = run.stderr.splitlines()
    assert line.startswith("asyncai-watch: error: cannot connect to MCP server URL 'http://127.0.0.1:")
    assert "access_token=***" in line
    assert SECRET not in line
    assert run.returncode == 2


def test_the_cli_refuses_a_token_with_a_line_break_in_one_line_without_it(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(f"{SECRET}\nX-Injected: 1\n")
    token.chmod(0o644)
    url = f"http://127.0.0.1:{closed_port()}/mcp"
    run = watch_cli("memo://notes", "--server", url, "--token-file", str(token))
    (line,) = run.stderr.splitlines()
    assert line.startswith(f"asyncai-watch: error: --token-file: {str(token)!r} holds a line break")
    assert SECRET not in run.stderr
    assert "Injected" not in run.stderr
    assert run.returncode == 2


# -- caller input, quoted with a cap ----------------------------------------------------------------


def test_quoted_caps_a_long_string_and_says_how_long_it_was() -> None:
    assert quoted("notes") == "'notes'"
    assert quoted("a" * 10_000_000) == "'" + "a" * 200 + "…' (10,000,000 characters)"
    assert quoted(7) == "7"
    deep: list[object] = []
    for _ in range(100_000):  # repr() of this would raise RecursionError
        deep = [deep]
    assert len(quoted(deep)) < 300
    assert len(quoted(list(range(1_000_000)))) < 300
    assert len(quoted(b"x" * 1_000_000)) < 300


HUGE_NAME = "a" * 10_000_000
HUGE_URI = "memo://notes/" + "u" * 4_000_000
SHORT = (
    2_500  # an error quoting caller input (and a server's echo of it) stays this short, whatever the input
)


async def tool_error_text(client: Client, tool: str, args: dict[str, object]) -> str:
    with anyio.fail_after(60):
        result = await client.call_tool(tool, args)
    text: str = getattr(result.content[0], "text", "")
    assert result.is_error, text[:300]
    return text


@pytest.mark.anyio
async def test_serve_quotes_huge_tool_arguments_in_short_errors() -> None:
    fake = memo_fake()
    # A server that quotes the URI back in its error, as McpResourceSource raises it.
    fake.read_errors[HUGE_URI] = ServerError(
        "memo", f"resources/read {quoted(HUGE_URI)}", -32602, f"unknown {HUGE_URI!r}"
    )
    async with WatchManager([fake], limits=IMMEDIATE, clock=FakeClock()) as manager:
        server = build_server(Bridge.over(manager, NoticeRing(8), Hub(exclusive=False)), instructions="")
        async with Client(server) as client:
            text = await tool_error_text(client, "watch_start", {"name": HUGE_NAME, "uri": NOTES})
            assert len(text) < SHORT
            assert "invalid watch name 'aaaa" in text
            assert "(10,000,000 characters)" in text
            for tool, args in [
                ("watch_start", {"name": "big", "uri": HUGE_URI}),
                ("read_resource", {"uri": HUGE_URI}),
            ]:
                text = await tool_error_text(client, tool, args)
                assert len(text) < SHORT, (tool, len(text))
                assert "(4,000,013 characters)" in text
            text = await tool_error_text(client, "watch_start", {"name": "x", "uri": NOTES, HUGE_NAME: 1})
            assert len(text) < SHORT
            assert "unknown argument(s) aaaa" in text
            nested: object = 1
            for _ in range(60):  # as deep as the client's serializer sends
                nested = [nested]
            for value in ([0] * 1_000_000, nested):
                text = await tool_error_text(
                    client, "watch_start", {"name": "x", "uri": NOTES, "on_event": value}
                )
                assert len(text) < SHORT
                assert text.startswith("watch_start: on_event must be string or null, got [")
            with anyio.fail_after(60), pytest.raises(MCPError) as unknown:
                await client.call_tool(HUGE_NAME, {})
            assert len(unknown.value.message) < SHORT
            assert "(10,000,000 characters)" in unknown.value.message


def test_the_spec_and_routing_errors_quote_input_with_a_cap() -> None:
    with pytest.raises(InvalidWatchNameError) as name:
        WatchSpec.checked(HUGE_NAME, NOTES)
    assert len(str(name.value)) < SHORT
    with pytest.raises(InvalidWatchNameError) as kind:
        WatchSpec.checked([0] * 1_000_000, NOTES)
    assert len(str(kind.value)) < SHORT
    with pytest.raises(FilterError) as on_event:
        WatchSpec.checked("x", NOTES, {"k": "v" * 1_000_000})
    assert len(str(on_event.value)) < SHORT
    catalog = ServerListing(name="memo")
    with pytest.raises(RoutingError) as route:
        route_uri(HUGE_URI, [catalog])
    assert len(str(route.value)) < SHORT
    assert "(4,000,013 characters)" in str(route.value)


def test_the_cli_quotes_a_huge_uri_in_a_short_error() -> None:
    uri = "nosuch://" + "u" * 100_000  # near the longest argument a command line takes
    run = watch_cli(uri, "--server", "asyncai-mcp-simple")
    (line,) = run.stderr.splitlines()
    assert line.startswith("asyncai-watch: error: ")
    assert "(100,009 characters)" in line
    assert len(line) < SHORT
    assert run.returncode == 2


@pytest.mark.anyio
async def test_serve_results_quote_caller_input_capped() -> None:
    """Results echo caller input capped too (issue 28 item 8): a 1 MiB name given to watch_stop,
    a 1 MiB URI read through ``asyncai-watch serve`` (a real process, memo upstream)."""
    name = "n" * (1 << 20)
    uri = "memo://notes/" + "k" * (1 << 20)
    params = serve("--server", "memo=" + shlex.join(MEMO))
    async with Client(params, cache=None) as client:
        for tool, args, length in [
            ("watch_stop", {"name": name}, "(1,048,576 characters)"),
            ("read_resource", {"uri": uri}, "(1,048,589 characters)"),
        ]:
            with anyio.fail_after(60):
                result = await client.call_tool(tool, args)
            shown = json.dumps([c.model_dump() for c in result.content]) + json.dumps(
                result.structured_content
            )
            assert len(shown) < SHORT, (tool, len(shown))
            assert length in shown, (tool, shown[:500])
