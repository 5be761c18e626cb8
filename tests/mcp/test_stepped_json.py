"""A large JSON text decoded in steps is the value msgspec decodes whole; stdio lines survive any chunking."""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp_types as types
import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncai_watch import jsonrpc_framing
from asyncai_watch._stepped_json import parse_in_steps
from asyncai_watch.jsonrpc_framing import LineReader

pytestmark = pytest.mark.timeout(120)

# Characters that stress the cuts: escapes (\" \\ \n \u0001), multi-byte UTF-8, characters
# outside the BMP (a surrogate-pair escape when ASCII-escaped) and "u" after a backslash.
CHARS = st.sampled_from(['"', "\\", "\n", "\x01", "u", "é", "€", "😀", "a", "D", "8"])
TEXT = st.lists(CHARS, max_size=60).map("".join) | st.text(max_size=40)
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**30), 10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(TEXT, inner, max_size=5),
    max_leaves=25,
)


def run(steps: Any) -> tuple[Any, int]:
    """Drive a stepped parse to its end; its value and how many steps it yielded."""
    count = 0
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value, count
        count += 1


def dumps(value: Any, ascii_only: bool, indent: int | None) -> bytes:
    return json.dumps(value, ensure_ascii=ascii_only, indent=indent).encode("utf-8", "surrogatepass")


@given(JSON, st.booleans(), st.sampled_from([None, 0, 2]), st.integers(16, 200))
def test_the_stepped_parse_is_the_whole_parse(
    value: Any, ascii_only: bool, indent: int | None, step: int
) -> None:
    data = dumps(value, ascii_only, indent)
    try:
        whole = msgspec.json.decode(data)
    except msgspec.DecodeError:  # e.g. a lone surrogate msgspec refuses: the steps refuse it too
        with pytest.raises(msgspec.DecodeError):
            run(parse_in_steps(b" \n" + data + b"\r\n", step))
        return
    assert run(parse_in_steps(b" \n" + data + b"\r\n", step))[0] == whole


def test_a_long_string_is_cut_at_every_place_without_splitting_a_character() -> None:
    """Each step size puts the cuts somewhere else: inside escapes, pairs and UTF-8 sequences."""
    value = 'a\\"\\\\\\u00e9é😀\\ud83d\\ude00\\n€x' * 7
    for ascii_only in (True, False):
        data = json.dumps(value, ensure_ascii=ascii_only).encode()
        for step in range(16, 90):
            got, count = run(parse_in_steps(data, step))
            assert got == value
            assert count >= len(data) // (step + 12) - 1  # it really was cut into pieces


def test_large_containers_are_stepped_and_bad_text_is_refused() -> None:
    value = {"jsonrpc": "2.0", "result": {"contents": [{"text": "x" * 5000, "n": list(range(2000))}]}}
    got, count = run(parse_in_steps(json.dumps(value).encode(), 256))
    assert got == value
    assert count > 40
    for bad in [b'{"a": "' + b"x" * 1000, b"[" + b"1," * 1000 + b"]", b'"' + b"x" * 1000, b'"x' * 300 + b'"']:
        with pytest.raises(msgspec.DecodeError):
            run(parse_in_steps(bad, 64))
    with pytest.raises(ValueError, match="at least 16"):
        run(parse_in_steps(b"[]", 8))


LINES = st.lists(
    st.builds(
        lambda i, text: json.dumps({"jsonrpc": "2.0", "id": i, "result": {"text": text}}),
        st.integers(0, 1000),
        st.sampled_from(["", "é😀", "x" * 300, 'é"\\😀' * 120]),
    ),
    min_size=1,
    max_size=6,
)


@given(LINES, st.lists(st.integers(1, 700), min_size=1, max_size=8))
def test_stdio_lines_survive_any_chunking(lines: list[str], cuts: list[int]) -> None:
    """However the bytes arrive, the line reader gives every line whole, and each becomes the
    message the SDK itself would make, large lines (the stepped decode) included."""
    data = "".join(line + "\n" for line in lines).encode()
    pieces, at = [], 0
    for size in cuts * (len(data) // sum(cuts) + 1):
        if at >= len(data):
            break
        pieces.append(data[at : at + size])
        at += size

    async def read() -> list[Any]:
        send, receive = anyio.create_memory_object_stream[bytes](len(pieces) + 1)
        for piece in pieces:
            send.send_nowait(piece)
        send.close()
        reader = LineReader(receive)
        messages = []
        while True:
            try:
                line = await reader.receive()
            except anyio.EndOfStream:
                return messages
            messages.append(await jsonrpc_framing.read_message(line))

    saved = jsonrpc_framing.LARGE_LINE
    jsonrpc_framing.LARGE_LINE = 200  # lines over 200 bytes take the stepped path
    try:
        messages = anyio.run(read)
    finally:
        jsonrpc_framing.LARGE_LINE = saved
    assert len(messages) == len(lines)
    for message, line in zip(messages, lines, strict=True):
        assert message.message == types.jsonrpc_message_adapter.validate_json(line, by_name=False)
