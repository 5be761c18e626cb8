"""Real peers of other SDKs (the TypeScript v1 server and its fetcher) and how the tests wait on them."""

from __future__ import annotations

import os
from typing import Any

import anyio
import anyio.abc
import pytest

from asyncai_watch import Notice, WatchManager
from tests.support import SUPPORT
from tests.support.script_module import load_script

PEERS_DIR = SUPPORT / "peers"
TS_SERVER = PEERS_DIR / "ts_v1_server.cjs"
COUNTER = "peer://counter"
WAIT = 60  # seconds: generous for a busy machine; nothing here sleeps


def _load_fetcher() -> Any:
    return load_script("scripts/fetch_conformance.py", "fetch_conformance")


@pytest.fixture(scope="module")
def peers() -> Any:
    try:
        return _load_fetcher().fetch_peers()
    except Exception as exc:
        reason = f"the npm peers are unavailable (npm install into .tools/): {exc}"
        if os.environ.get("ASYNCAI_REQUIRE_PEERS") == "1":
            pytest.fail(reason)
        pytest.skip(reason)


def ts_server(peers: Any, *args: str) -> list[str]:
    return [str(peers.node), str(TS_SERVER), "--modules", str(peers.modules), *args]


async def next_notice(m: WatchManager, seconds: float = WAIT) -> Notice:
    with anyio.fail_after(seconds):
        return await m.notices.receive()


async def wait_until_watching(proc: anyio.abc.Process) -> None:
    """The CLI says "watching ..." on stderr once the watch is up; if it exits instead, say why."""
    assert proc.stderr is not None
    seen = b""
    with anyio.fail_after(WAIT):
        while b"watching" not in seen:
            try:
                seen += await proc.stderr.receive()
            except anyio.EndOfStream:
                raise AssertionError(
                    f"asyncai-watch exited before watching: {seen.decode(errors='replace')}"
                ) from None
