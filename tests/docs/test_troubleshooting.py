"""docs/troubleshooting.md quotes the messages the code still says.

Each quoted message (a ``text`` block of the page) must contain at least one of the fragments
below, and each fragment must be in the page and in a string the code writes (a literal, or a
literal part of an f-string, with adjacent literals joined as Python joins them). A message
reworded in the code fails here until the page quotes the new words.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from functools import cache

import pytest

from tests.support import ROOT

PAGE = ROOT / "docs" / "troubleshooting.md"
PACKAGES = ("asyncai_watch", "asyncai_servers", "asyncai_agent")
TEXT_BLOCK = re.compile(r"^```text\n(.*?)^```", re.M | re.S)

# Literal parts of the messages the page quotes (between an f-string's interpolations).
FRAGMENTS = [
    "cannot connect to MCP server ",
    "cannot start MCP server ",
    "did you mean --server http://",
    " (a URL with its scheme)? ",
    "HTTP bearer token in ",
    "refusing the token ",
    "is the path right? MCP servers usually serve at /mcp (e.g. http://127.0.0.1:8765/mcp): ",
    "on_event may only read; it calls ",
    " is not read-only (no readOnlyHint: true)",
    ": no answer to the connect handshake within ",
    " got no answer within ",
    "; the connection was dropped and the next call reconnects (pass a larger request_timeout if the server is only slow)",
    "cannot subscribe to ",
    "this server serves ",
    ": no server lists it, it matches no template, and no server ",
    " advertises resources.subscribe. Known URIs: ",
    " is not watchable: ",
    " and does not advertise resources.subscribe (it serves ",
    "on_event fails on a sample event: ",
    " is not allowed in the sandbox: no module can be imported; ",
    "filter workers run without their seccomp filter (",
    "); see docs/filters.md",
    "; pick another name, or watch_stop(name=",
    " watches (Limits.max_watches=",
    ". Stop one with watch_stop(name=...) first",
    " is in use by another process (",
    "; one state file has one owner: stop that process, or give this one its own --watch-state file",
    ": the inotify watch limit was reached (fs.inotify.max_user_watches is ",
    "too many inotify instances or open files (EMFILE): fs.inotify.max_user_instances is ",
    "; asyncai-mcp-files needs inotify and never falls back to polling",
    " (permission denied): GRANT USAGE ON SCHEMA ",
    " may not read it (GRANT SELECT ON it TO ",
    " has partitions without asyncai-watch triggers (",
    "), so their changes would never be heard: run asyncai-mcp-postgres --config CONFIG "
    "--install-triggers as its owner (as a superuser it also covers partitions created later)",
]


def literal_strings(tree: ast.AST) -> Iterable[str]:
    """Every string literal of a module, and every literal part of its f-strings."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value


@cache
def code_strings() -> frozenset[str]:
    strings: set[str] = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            strings.update(literal_strings(ast.parse(path.read_text(), str(path))))
    return frozenset(strings)


def in_code(fragment: str) -> bool:
    return any(fragment in s for s in code_strings())


def quoted_messages() -> list[str]:
    return TEXT_BLOCK.findall(PAGE.read_text())


@pytest.mark.parametrize("fragment", FRAGMENTS)
def test_a_quoted_fragment_is_still_in_the_code(fragment: str) -> None:
    assert in_code(fragment), f"no string in {', '.join(PACKAGES)} says {fragment!r} any more"


@pytest.mark.parametrize("fragment", FRAGMENTS)
def test_a_fragment_is_quoted_on_the_page(fragment: str) -> None:
    assert fragment in PAGE.read_text()


def test_every_message_on_the_page_is_checked() -> None:
    messages = quoted_messages()
    assert len(messages) >= 15
    unchecked = [m for m in messages if not any(f in m for f in FRAGMENTS)]
    assert unchecked == []


def test_a_reworded_message_is_not_found() -> None:
    # The check can fail: a message as it might have been worded, and one split across an
    # interpolation, are not taken for the code's.
    assert not in_code("cannot connect to the MCP server ")
    assert not in_code("cannot connect to MCP server URL")
    assert in_code("so their changes would never be heard")  # adjacent literals are joined
