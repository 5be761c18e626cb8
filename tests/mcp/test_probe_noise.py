"""ProbeNoise: the dump a Python SDK 1.x server logs about our server/discover probe is dropped
from its stderr; every other line, and any other dump, passes through in order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from asyncai_watch.mcp.probe_noise import ProbeNoise

PROBE_DUMP = [
    b"Failed to validate request: 31 validation errors for ClientRequest\n",
    b"PingRequest.method\n",
    b"  Input should be 'ping' [type=literal_error, input_value='server/discover', input_type=str]\n",
    b"    For further information visit https://errors.pydantic.dev/2.14/v/literal_error\n",
    b"CallToolRequest.params.name\n",
    b"  Field required [type=missing, input_value={'_meta': {}}, input_type=dict]\n",
]
OTHER_DUMP = [
    b"Failed to validate request: 2 validation errors for ClientRequest\n",
    b"PingRequest.method\n",
    b"  Input should be 'ping' [type=literal_error, input_value='tools/bogus', input_type=str]\n",
]


def run(lines: list[bytes]) -> list[bytes]:
    noise = ProbeNoise()
    out = [kept for line in lines for kept in noise.feed(line)]
    return out + noise.end()


def test_the_probe_dump_is_dropped_and_the_lines_around_it_kept() -> None:
    assert run([b"starting\n", *PROBE_DUMP, b"ready\n"]) == [b"starting\n", b"ready\n"]


def test_another_dump_passes_through_whole() -> None:
    assert run([*OTHER_DUMP, b"next\n"]) == [*OTHER_DUMP, b"next\n"]
    assert run(OTHER_DUMP[:1]) == OTHER_DUMP[:1]  # a head alone, then the end: kept


@given(st.lists(st.sampled_from([b"a line\n", b"  indented\n", b"Word.field\n", b"x = 1\n"])))
def test_lines_without_a_dump_head_pass_unchanged(lines: list[bytes]) -> None:
    assert run(lines) == lines
