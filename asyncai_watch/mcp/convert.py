"""SDK results and SDK errors as ours: pure functions, tested without a server.

:class:`~asyncai_watch.mcp.client.McpResourceSource` makes the requests; what it gets back (a
``resources/read`` result, list pages, a tool and its result, an exception the SDK raised) is
turned into this library's values and errors here, so each rule is written, and tested, once.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Collection, Iterable, Mapping
from typing import Any, Final

import mcp_types as types
import pydantic
from mcp import MCPError

from asyncai_watch.core.echo import quoted, redact
from asyncai_watch.core.resources import ListedResource, ListedTemplate
from asyncai_watch.errors import ServerError
from asyncai_watch.mcp.body_cap import MESSAGE_TOO_LARGE
from asyncai_watch.mcp.source import ReadResult, ToolInfo, ToolResult

__all__ = [
    "NOTIFIED_META_KEY",
    "UnreadableResult",
    "complete_without_result_type",
    "content_text",
    "describe_error",
    "invalid_fields",
    "is_connection_closed",
    "leaf_errors",
    "listed_resources",
    "listed_templates",
    "named_uris",
    "never_notified",
    "read_result",
    "server_error",
    "tool_info",
    "tool_result",
]

NOTIFIED_META_KEY: Final = "io.github.asyncai-watch/notified"  # asyncai_watch.server.kit.NOTIFIED_META_KEY


class UnreadableResult(ValueError):
    """A ``resources/read`` result this library cannot use; the message says why."""


# -- results ------------------------------------------------------------------------------------


def read_result(uri: str, result: types.ReadResourceResult) -> ReadResult:
    """The first content of a ``resources/read`` result, as text (a blob must be UTF-8)."""
    if not result.contents:
        raise UnreadableResult("the server returned no contents")
    content = result.contents[0]
    if isinstance(content, types.TextResourceContents):
        return ReadResult(uri=content.uri or uri, text=content.text, mime_type=content.mime_type)
    try:
        text = base64.b64decode(content.blob, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise UnreadableResult(
            f"the content is a binary blob ({content.mime_type or 'no mimeType'}), not UTF-8 text"
        ) from exc
    return ReadResult(uri=content.uri or uri, text=text, mime_type=content.mime_type)


def never_notified(meta: Mapping[str, Any] | None) -> bool:
    """Whether a listed entry's ``_meta`` says no change of it was announced yet."""
    return meta is not None and meta.get(NOTIFIED_META_KEY) is False


def listed_resources(pages: Iterable[types.ListResourcesResult]) -> list[ListedResource]:
    return [
        ListedResource(
            uri=r.uri,
            name=r.name,
            description=r.description or "",
            mime_type=r.mime_type,
            never_notified=never_notified(r.meta),
        )
        for page in pages
        for r in page.resources
    ]


def listed_templates(pages: Iterable[types.ListResourceTemplatesResult]) -> list[ListedTemplate]:
    return [
        ListedTemplate(
            uri_template=t.uri_template,
            name=t.name,
            description=t.description or "",
            mime_type=t.mime_type,
            never_notified=never_notified(t.meta),
        )
        for page in pages
        for t in page.resource_templates
    ]


def tool_info(tool: types.Tool) -> ToolInfo:
    notes = tool.annotations
    read_only = notes is not None and notes.read_only_hint is True
    # MCP: destructiveHint defaults to true and only means something for a tool that is not read-only.
    destructive = not read_only and (notes is None or notes.destructive_hint is not False)
    return ToolInfo(
        name=tool.name,
        description=tool.description or "",
        input_schema=dict(tool.input_schema),
        read_only=read_only,
        destructive=destructive,
    )


def tool_result(result: types.CallToolResult) -> ToolResult:
    """A ``tools/call`` result as :class:`ToolResult`: its text content joined, its structured content."""
    return ToolResult(
        text="\n".join(content_text(block) for block in result.content),
        structured=result.structured_content,
        is_error=bool(result.is_error),
    )


def content_text(block: types.ContentBlock) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.EmbeddedResource) and isinstance(block.resource, types.TextResourceContents):
        return block.resource.text
    if isinstance(block, types.ResourceLink):
        return f"[resource {block.uri}]"
    return f"[{block.type}]"


def complete_without_result_type(exc: BaseException | None) -> types.CallToolResult | None:
    """The tool result the SDK refused in ``exc`` when a missing ``resultType`` was its only fault
    (MCP 2026-07-28: a result without ``resultType`` is complete)."""
    if not isinstance(exc, pydantic.ValidationError):
        return None
    errors = exc.errors()
    if not errors or any(err["type"] != "missing" or err["loc"][-1:] != ("resultType",) for err in errors):
        return None
    body = errors[0]["input"]
    if not isinstance(body, dict):
        return None
    try:
        return types.CallToolResult.model_validate({**body, "resultType": "complete"}, by_name=False)
    except pydantic.ValidationError:
        return None


# -- errors -------------------------------------------------------------------------------------


def named_uris(uris: Collection[str]) -> str:
    """How a listen's URIs are named in errors: the URI, or the count and the first."""
    if len(uris) == 1:
        return quoted(next(iter(uris)))
    return f"{len(uris)} URIs ({quoted(min(uris))}, ...)"


def leaf_errors(exc: BaseException) -> list[BaseException]:
    """The non-group exceptions inside ``exc`` (the SDK raises task-group errors as groups)."""
    if isinstance(exc, BaseExceptionGroup):
        leaves: list[BaseException] = []
        for inner in exc.exceptions:
            leaves.extend(leaf_errors(inner))
        return leaves
    return [exc]


def describe_error(exc: BaseException) -> str:
    """Every distinct leaf error in ``exc``, ``Type: text`` (an MCPError by its text alone)."""
    parts = []
    for leaf in leaf_errors(exc):
        text = str(leaf) or type(leaf).__name__
        parts.append(text if isinstance(leaf, MCPError) else f"{type(leaf).__name__}: {text}")
    # The SDK's and httpx's messages may hold the request URL (and so its secret parameters).
    return redact("; ".join(dict.fromkeys(parts)))


def is_connection_closed(exc: BaseException) -> bool:
    """Whether the SDK says (anywhere in ``exc``) that the connection is closed."""
    return any(
        isinstance(leaf, MCPError) and leaf.code == types.CONNECTION_CLOSED for leaf in leaf_errors(exc)
    )


def invalid_fields(exc: pydantic.ValidationError) -> str:
    """What made a result invalid, briefly: each field and why (the body itself is not shown)."""
    found = [
        f"{'.'.join(str(part) for part in err['loc']) or 'result'}: {err['msg']}" for err in exc.errors()
    ]
    shown = list(dict.fromkeys(found))
    return "; ".join(shown[:4]) + (f"; +{len(shown) - 4} more" if len(shown) > 4 else "")


def server_error(
    server: str, what: str, exc: BaseException, protocol_version: str, *, uris: tuple[str, ...] = ()
) -> ServerError | None:
    """``exc``, raised by the SDK for request ``what`` (naming ``uris``), as the server's error;
    ``None`` when it is not the server's answer (a closed connection, a transport failure, a timeout)."""
    if isinstance(exc, MCPError):
        if exc.code == types.CONNECTION_CLOSED:
            return None
        if exc.code == MESSAGE_TOO_LARGE:  # made by our transport: the server's answer was dropped
            return ServerError(server, what, None, exc.message, uris=uris)
        return ServerError(server, what, exc.code, exc.message, uris=uris)
    if isinstance(exc, pydantic.ValidationError):
        return ServerError(
            server,
            what,
            None,
            f"its result is not valid MCP {protocol_version}: {invalid_fields(exc)}",
            uris=uris,
        )
    if isinstance(exc, RuntimeError):
        # The SDK refused a result it did get: structured content that misses the tool's
        # output schema, an input_required exchange that never ends.
        first_line = (str(exc) or type(exc).__name__).splitlines()[0]
        return ServerError(server, what, None, f"its result was refused: {first_line}", uris=uris)
    return None
