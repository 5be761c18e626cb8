"""Errors a program reads by their fields, not their text (issue 33): a server's refusal
(``ServerError``: server, method, URIs, code, the server's own message), a connection that cannot
be made (``ServerConnectionError``: target, kind, HTTP status) and the failure notice (its
``FAILED`` event's cause and attempts). ``asyncai-watch`` builds its messages from these fields."""

from __future__ import annotations

import shlex

import pytest

from asyncai_watch import McpResourceSource
from asyncai_watch.cli_commands import _leading_with_advice, _shell_advice, _Unserved
from asyncai_watch.core.deliver import Delivery, failure_head
from asyncai_watch.core.notice import FAILED
from asyncai_watch.errors import ServerConnectionError, ServerError, SubscriptionLostError, WatchError
from asyncai_watch.testing import FakeClock
from tests.support.cli import MEMO, run_cli
from tests.support.managers import NOTES, manager, memo_fake, next_notice
from tests.support.memo import memo_http_server

pytestmark = pytest.mark.anyio


async def test_a_refused_subscription_is_a_server_error_with_its_parts_as_fields() -> None:
    async with McpResourceSource.stdio(shlex.split(MEMO), name="memo") as memo:
        with pytest.raises(ServerError) as caught:
            async with memo.subscribe(["memo://nope"]):
                pass
    error = caught.value
    assert (error.server, error.method, error.uris, error.uri) == (
        "memo",
        "subscriptions/listen",
        ("memo://nope",),
        "memo://nope",
    )
    assert error.code == -32602
    assert error.server_message.startswith("memo: cannot subscribe to ['memo://nope']")
    assert "this server serves 'memo://notes'" in error.server_message
    # What the server lists, for a program to offer instead (not parsed from its message).
    assert error.served == ("memo://notes", "memo://notes/{key}")
    # The text is as before: the fields are what it is made of.
    assert str(error) == (
        f"server 'memo': subscriptions/listen 'memo://nope' failed (-32602): {error.server_message}"
    )


async def test_a_refused_read_names_its_method_and_uri() -> None:
    async with McpResourceSource.stdio(shlex.split(MEMO), name="memo") as memo:
        with pytest.raises(ServerError) as caught:
            await memo.read("memo://nope")
    assert (caught.value.method, caught.value.uri, caught.value.server) == (
        "resources/read",
        "memo://nope",
        "memo",
    )


async def test_a_wrong_http_path_is_a_connection_error_with_the_url_its_kind_and_the_status() -> None:
    async with memo_http_server() as (url, _):
        wrong = url.removesuffix("/mcp") + "/nope"
        with pytest.raises(ServerConnectionError) as caught:
            async with McpResourceSource.http(wrong):
                pass
    error = caught.value
    assert (error.target, error.kind, error.http_status, error.method) == (wrong, "url", 404, None)
    assert "HTTP 404" in str(error)


async def test_a_command_that_cannot_start_is_a_connection_error_of_kind_command() -> None:
    command = ["/nonexistent/mcp-server", "--flag"]
    with pytest.raises(ServerConnectionError) as caught:
        async with McpResourceSource.stdio(command):
            pass
    error = caught.value
    assert (error.target, error.kind, error.http_status) == (
        "/nonexistent/mcp-server --flag",
        "command",
        None,
    )
    assert str(error).startswith("cannot start MCP server ")


def _refusal(server: str = "memo", code: int | None = -32602) -> WatchError:
    said = "memo: cannot subscribe to ['memo://nope']; this server serves 'memo://notes'"
    cause = ServerError(server, "subscriptions/listen 'memo://nope'", code, said, uris=("memo://nope",))
    error = WatchError(f"watch_start: subscribing on server {server!r} failed: ServerError: {cause}")
    error.__cause__ = cause
    return error


def test_the_cli_leads_with_the_servers_answer_read_from_the_fields() -> None:
    assert _leading_with_advice(_refusal()) == (
        "memo: cannot subscribe to ['memo://nope']; this server serves 'memo://notes' "
        "(server 'memo' refused the subscription to 'memo://nope', error -32602)"
    )


def test_the_cli_reads_the_fields_not_the_text() -> None:
    # A server name that the old message regex ('([^']*)') could not take apart.
    odd = _refusal(server="it's")
    assert _leading_with_advice(odd).endswith(
        "(server \"it's\" refused the subscription to 'memo://nope', error -32602)"
    )
    # No JSON-RPC code: the answer still leads (the old regex fell back to the whole chain).
    assert _leading_with_advice(_refusal(code=None)).startswith("memo: cannot subscribe")


def test_with_several_servers_every_servers_uris_follow_the_answer() -> None:
    error = _Unserved(_refusal(), {"memo": ["memo://notes"], "files": ["file:///{path}"]})
    assert error.served == {"memo": ["memo://notes"], "files": ["file:///{path}"]}
    assert _leading_with_advice(error) == (
        "memo: cannot subscribe to ['memo://nope']; this server serves 'memo://notes'; the servers "
        "serve: memo: memo://notes; files: file:///{path} (server 'memo' refused the subscription to "
        "'memo://nope', error -32602)"
    )


@pytest.mark.parametrize(
    ("target", "hinted"),
    [
        ("http://127.0.0.1:8765/nope", True),
        ("http://127.0.0.1:8765/", True),
        ("http://127.0.0.1:8765/mcp", False),
    ],
)
def test_a_404_hints_at_mcp_only_when_the_path_is_not_mcp(target: str, hinted: bool) -> None:
    error = ServerConnectionError(
        f"cannot connect to MCP server URL {target!r}: HTTP 404 Not Found (Not Found)",
        target=target,
        kind="url",
        http_status=404,
    )
    shown = _leading_with_advice(error)
    assert shown.startswith("is the path right? MCP servers usually serve at /mcp") is hinted
    assert shown.endswith(str(error))


def test_a_subscription_lost_on_the_way_names_the_server_and_subscribing() -> None:
    cause = ServerConnectionError(
        "server 'memo' (URL 'http://127.0.0.1:1/mcp'): subscriptions/listen 'memo://notes' failed: "
        "the connection is closed",
        server="memo",
        method="subscriptions/listen",
    )
    error = WatchError(f"watch_start: subscribing on server 'memo' failed: ServerConnectionError: {cause}")
    error.__cause__ = cause
    assert _leading_with_advice(error) == f"{cause} (server 'memo', subscribing)"
    read = ServerConnectionError(
        "server 'memo': resources/read failed", server="memo", method="resources/read"
    )
    error.__cause__ = read
    assert _leading_with_advice(error) == str(error)  # not a subscription: as it is


@pytest.mark.parametrize("attempts", [5, 0])
def test_the_failure_notice_carries_its_cause_and_the_shell_advice_is_made_from_it(attempts: int) -> None:
    reason = "subscribing on server 'memo' failed: ServerConnectionError: the connection is closed. Really."
    (notice,) = Delivery("notes", "memo://notes").failed(reason, attempts)
    (event,) = notice.events
    assert (event.type, event.message, event.fields) == (FAILED, reason, {"attempts": attempts})
    shell = _shell_advice(notice, None)
    head = failure_head("notes", "memo://notes", reason, attempts)
    assert shell.text == (
        f"{head.rstrip('.')}. It no longer delivers changes; run asyncai-watch watch 'memo://notes' ... again."
    )
    assert "watch_start" not in shell.text
    assert notice.text.startswith(head)  # the library's text leads with the same head


async def test_end_to_end_the_refusal_line_is_made_from_the_fields_of_the_cause() -> None:
    code, _, err = await run_cli("watch", "memo://zzz", "--server", MEMO)
    assert code == 2, err
    assert err == (
        "asyncai-watch: error: memo: cannot subscribe to ['memo://zzz']; this server serves "
        "'memo://notes' and 'memo://notes/{key}' (server 'memo' refused the subscription to "
        "'memo://zzz', error -32602)\n"
    )


async def test_a_watch_that_gives_up_names_the_type_of_its_last_failure_as_a_field() -> None:
    clock = FakeClock()
    fake = memo_fake()
    async with manager(fake, clock=clock) as m:
        await m.watch_start("notes", NOTES)
        fake.listen_failures = [SubscriptionLostError(f"lost before the ack {i}") for i in range(5)]
        fake.lose(NOTES)
        for _ in range(5):
            await clock.wait_for_sleepers(1)
            (deadline,) = clock.deadlines()
            clock.advance(deadline - clock.now())
        notice = await next_notice(m)
    (event,) = notice.events
    assert event.type == FAILED
    assert event.fields == {"attempts": 5, "error": "SubscriptionLostError"}
    assert event.message == "lost before the ack 4"
