"""A cap on the size of one message from an MCP server, for both transports.

stdio: :class:`~asyncai_watch.jsonrpc_framing.LineReader`'s ``max_line`` drops an over-long line as
it arrives. Streamable HTTP: the SDK caps each SSE event (``max_sse_event_size``); a JSON
response body is capped here, by :class:`BodyCap`, an ``httpx`` transport that counts the body
as it streams in and stops at the cap (a ``Content-Length`` over it stops it before a byte is
read), so a 1 GiB answer costs no more than the cap.

:func:`too_large` is the one message both say, naming the cap and how to raise it.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from typing import Final

import httpx2

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "MESSAGE_TOO_LARGE",
    "BodyCap",
    "BodyTooLarge",
    "add_cap_argument",
    "too_large",
]

DEFAULT_MAX_MESSAGE_BYTES: Final = 16 << 20
"""Bytes one message from a server may hold (16 MiB): a resource read's answer included."""

MESSAGE_TOO_LARGE: Final = -32001
"""The JSON-RPC error code of the answer made for a request whose real answer was too large."""


def too_large(size: int | None, cap: int, *, at_least: bool = False) -> str:
    """``its answer is 20,000,000 bytes, more than the 16,777,216 ...``: what was refused and the knob."""
    how_big = "" if size is None else f" {'over ' if at_least else ''}{size:,} bytes,"
    return (
        f"its answer is{how_big} more than the {cap:,} bytes one message may hold "
        "(max_message_bytes; --max-message-bytes); it was dropped unread"
    )


def _cap(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"must be a whole number of bytes >= 1, e.g. {DEFAULT_MAX_MESSAGE_BYTES} (16 MiB), got {text[:40]!r}"
        )
    return value


def add_cap_argument(parser: argparse.ArgumentParser) -> None:
    """``--max-message-bytes N``: the cap, for every command that connects to servers."""
    parser.add_argument(
        "--max-message-bytes",
        type=_cap,
        default=DEFAULT_MAX_MESSAGE_BYTES,
        metavar="N",
        help=f"largest message a server may send, a resource read's answer included (default "
        f"{DEFAULT_MAX_MESSAGE_BYTES:,} bytes, 16 MiB); a larger one fails its request, and is "
        "dropped as it arrives",
    )


class BodyTooLarge(httpx2.StreamError):
    """A response body went over the cap (the SDK reports a ``StreamError`` as the request's error)."""


class BodyCap(httpx2.AsyncBaseTransport):
    """An HTTP transport whose non-SSE response bodies stop at ``cap`` bytes with :class:`BodyTooLarge`."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, cap: int) -> None:
        self._inner = inner
        self._cap = cap

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        stream = response.stream
        kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        # An SSE stream is long-lived: the SDK caps each of its events instead.
        if kind != "text/event-stream" and isinstance(stream, httpx2.AsyncByteStream):
            response.stream = _Capped(stream, self._cap, response.headers.get("content-length"))
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Capped(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, cap: int, length: str | None) -> None:
        self._inner = inner
        self._cap = cap
        self._length = int(length) if length is not None and length.isdigit() and len(length) < 20 else None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._length is not None and self._length > self._cap:
            raise BodyTooLarge(too_large(self._length, self._cap))
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._cap:
                raise BodyTooLarge(too_large(seen, self._cap, at_least=True))
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()
