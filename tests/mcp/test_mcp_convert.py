"""SDK results and errors as ours (asyncai_watch.mcp.convert), and the error factories, without a server."""

from __future__ import annotations

import base64

import mcp_types as types
import pydantic
import pytest
from mcp import MCPError

from asyncai_watch.errors import (
    NotWatchableError,
    ProtocolVersionError,
    ServerError,
    advertised_but_missing,
    not_advertised,
    protocol_too_old,
    refused_when_tried,
)
from asyncai_watch.mcp.body_cap import MESSAGE_TOO_LARGE
from asyncai_watch.mcp.convert import (
    UnreadableResult,
    complete_without_result_type,
    describe_error,
    is_connection_closed,
    listed_resources,
    named_uris,
    read_result,
    server_error,
    tool_info,
    tool_result,
)
from asyncai_watch.mcp.source import ReadResult, subscription_mode_for
from tests.support import ROOT

DOCS = ROOT / "docs"


def test_a_read_gives_its_first_content_as_text_and_a_blob_only_when_it_is_utf8() -> None:
    text = types.ReadResourceResult(
        contents=[types.TextResourceContents(uri="memo://notes", text="{}", mime_type="application/json")]
    )
    assert read_result("memo://notes", text) == ReadResult(
        uri="memo://notes", text="{}", mime_type="application/json"
    )
    blob = types.ReadResourceResult(
        contents=[types.BlobResourceContents(uri="x://a", blob=base64.b64encode("é".encode()).decode())]
    )
    assert read_result("x://a", blob).text == "é"
    binary = types.ReadResourceResult(
        contents=[types.BlobResourceContents(uri="x://b", blob="/w==", mime_type="image/png")]
    )
    with pytest.raises(UnreadableResult, match=r"binary blob \(image/png\), not UTF-8 text"):
        read_result("x://b", binary)
    with pytest.raises(UnreadableResult, match="no contents"):
        read_result("x://c", types.ReadResourceResult(contents=[]))


def test_a_listed_resource_says_when_no_change_of_it_was_announced_yet() -> None:
    page = types.ListResourcesResult(
        resources=[
            types.Resource(uri="a://1", name="one", meta={"io.github.asyncai-watch/notified": False}),
            types.Resource(uri="a://2", name="two", description="d"),
        ]
    )
    one, two = listed_resources([page])
    assert (one.uri, one.never_notified, one.description) == ("a://1", True, "")
    assert (two.uri, two.never_notified, two.description) == ("a://2", False, "d")


def test_a_tool_is_destructive_unless_annotated_read_only_or_not_destructive() -> None:
    bare = tool_info(types.Tool(name="t", input_schema={"type": "object"}))
    assert (bare.read_only, bare.destructive) == (False, True)
    read_only = tool_info(
        types.Tool(
            name="r", input_schema={"type": "object"}, annotations=types.ToolAnnotations(read_only_hint=True)
        )
    )
    assert (read_only.read_only, read_only.destructive) == (True, False)
    gentle = types.ToolAnnotations(destructive_hint=False)
    assert tool_info(types.Tool(name="g", input_schema={}, annotations=gentle)).destructive is False


def test_a_tool_result_joins_its_text_and_names_what_is_not_text() -> None:
    result = types.CallToolResult(
        content=[
            types.TextContent(text="hello"),
            types.ResourceLink(uri="memo://notes", name="notes"),
            types.ImageContent(data="AA==", mime_type="image/png"),
        ],
        structured_content={"n": 1},
        is_error=True,
    )
    converted = tool_result(result)
    assert converted.text == "hello\n[resource memo://notes]\n[image]"
    assert (converted.structured, converted.is_error) == ({"n": 1}, True)


def test_a_tool_result_without_result_type_is_complete_and_other_faults_are_not_forgiven() -> None:
    body = {"content": [{"type": "text", "text": "ok"}]}
    found = complete_without_result_type(_missing(body, "resultType"))
    assert found is not None
    assert tool_result(found).text == "ok"
    assert complete_without_result_type(_missing(body, "other")) is None
    assert complete_without_result_type(ValueError("not a validation error")) is None


def _missing(body: dict[str, object], field: str) -> pydantic.ValidationError:
    """The error the SDK raises for ``body`` missing ``field`` (its schema requires resultType)."""
    model = pydantic.create_model("Strict", **{field: (str, ...)})  # type: ignore[call-overload]
    try:
        model.model_validate(body)
    except pydantic.ValidationError as exc:
        return exc
    raise AssertionError(f"a body without {field} validated")


def test_sdk_errors_become_the_servers_error_naming_the_method_and_closed_ones_do_not() -> None:
    refused = server_error("memo", "tools/call 'x'", MCPError(-32602, "bad argument"), "2026-07-28")
    assert isinstance(refused, ServerError)
    assert (refused.code, refused.server_message) == (-32602, "bad argument")
    assert str(refused) == "server 'memo': tools/call 'x' failed (-32602): bad argument"
    too_large = server_error("memo", "resources/read 'a'", MCPError(MESSAGE_TOO_LARGE, "over"), "v")
    assert too_large is not None
    assert too_large.code is None
    sdk_refused = server_error("memo", "tools/call 'x'", RuntimeError("no schema match\ndetails"), "v")
    assert sdk_refused is not None
    assert sdk_refused.server_message == "its result was refused: no schema match"
    closed = MCPError(types.CONNECTION_CLOSED, "Connection closed")
    assert server_error("memo", "resources/read 'a'", closed, "v") is None
    assert is_connection_closed(closed)
    assert is_connection_closed(ExceptionGroup("tg", [ValueError("x"), ExceptionGroup("in", [closed])]))
    assert not is_connection_closed(MCPError(-32601, "Method not found"))


def test_an_error_description_names_each_leaf_once_and_hides_url_secrets() -> None:
    group = ExceptionGroup(
        "tg", [OSError("refused http://h/mcp?token=s3cret"), OSError("refused http://h/mcp?token=s3cret")]
    )
    described = describe_error(group)
    assert described.count("OSError: refused") == 1
    assert "s3cret" not in described
    assert describe_error(MCPError(-1, "plain")) == "plain"


def test_uris_are_named_one_by_one_or_by_count() -> None:
    assert named_uris(["memo://notes"]) == "'memo://notes'"
    assert named_uris(["b://2", "a://1", "c://3"]) == "3 URIs ('a://1', ...)"


def test_the_version_decides_the_subscription_mode() -> None:
    assert subscription_mode_for("2026-07-28") == "listen"
    assert subscription_mode_for("2025-11-25") == "subscribe"
    assert subscription_mode_for("") == "subscribe"


def test_the_not_watchable_factories_say_what_the_docs_quote() -> None:
    contract = (DOCS / "server-contract.md").read_text()
    refused = refused_when_tried("peer", "2026-07-28", "subscriptions/listen", "Method not found")
    assert str(refused) in contract
    missing = advertised_but_missing("peer", "subscriptions/listen", "Method not found")
    assert str(missing) in contract
    assert isinstance(not_advertised("x", "resources.listChanged"), NotWatchableError)
    assert str(NotWatchableError.for_server("old", "2025-11-25")) in (DOCS / "claude-code.md").read_text()
    too_old = protocol_too_old("old", "2025-11-25", "2026-07-28")
    assert isinstance(too_old, ProtocolVersionError)
    assert (
        str(too_old) == "server 'old' speaks 2025-11-25; watches need MCP 2026-07-28 (subscriptions/listen)"
    )
