"""Every reference server that serves Streamable HTTP, started as a subprocess the same way.

memo, files (over an empty root), switchboard (SQLite, one credential: requests
need its bearer token), kcp (the fake kubectl; nothing here reaches a
cluster) and postgres (a config naming one table, and a DSN nothing answers: the
protocol needs no database, and the server keeps trying to LISTEN in the background). ``reference_server`` (async) and ``reference_server_process`` (sync, for
fixtures wider than one test) yield the URL and the headers a client must send.
"""

from __future__ import annotations

import json
import selectors
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import IO

import attrs

from asyncai_watch.server.http import running_http_server
from tests.support.fake_kubectl import FakeCluster
from tests.support.kcp_helpers import kcp_argv, kcp_env, write_kubeconfig
from tests.support.local_token import local_auth

SERVERS = ("memo", "files", "switchboard", "kcp", "postgres")
SWITCHBOARD_TOKEN = "reference-token"


@attrs.frozen
class Served:
    name: str
    url: str
    headers: Mapping[str, str]


def server_command(name: str, work: Path) -> tuple[list[str], dict[str, str] | None, dict[str, str]]:
    """The argv, environment and client headers of server ``name``, its files made under ``work``."""
    work.mkdir(parents=True, exist_ok=True)
    if name == "memo":
        return [sys.executable, "-m", "asyncai_servers.memo", "--http", "127.0.0.1:0"], None, {}
    if name == "files":
        (work / "root").mkdir(exist_ok=True)
        return (
            [sys.executable, "-m", "asyncai_servers.files", "--http", "127.0.0.1:0", str(work / "root")],
            None,
            {},
        )
    if name == "switchboard":
        config = work / "credentials.json"
        credential = {"name": "suite", "token": SWITCHBOARD_TOKEN, "queues": ["*"], "attribution": "agent"}
        config.write_text(json.dumps({"credentials": [credential]}))
        argv = [sys.executable, "-m", "asyncai_servers.switchboard", "--config", str(config)]
        argv += ["--sqlite", str(work / "ledger.db"), "--http", "127.0.0.1:0"]
        return argv, None, {"Authorization": f"Bearer {SWITCHBOARD_TOKEN}"}
    if name == "kcp":
        kubeconfig = write_kubeconfig(work / "kubeconfig", "https://127.0.0.1:1")
        argv = [sys.executable, *kcp_argv(kubeconfig, "--http", "127.0.0.1:0")]
        return argv, kcp_env(FakeCluster(work / "cluster"), work), {}
    if name == "postgres":
        config = work / "pg.toml"
        config.write_text('[[table]]\nname = "items"\n')
        argv = [sys.executable, "-m", "asyncai_servers.postgres", "--config", str(config)]
        return [*argv, "--dsn", "host=127.0.0.1 port=1 connect_timeout=1", "--http", "127.0.0.1:0"], None, {}
    raise ValueError(f"no reference server {name!r}; they are {SERVERS}")


@asynccontextmanager
async def reference_server(name: str, work: Path) -> AsyncIterator[Served]:
    """Run server ``name`` on ``--http 127.0.0.1:0`` with its files under ``work``."""
    argv, env, headers = server_command(name, work)
    async with running_http_server(argv, env=env) as (url, _proc):
        yield Served(name, url, local_auth(url, headers))


@contextmanager
def reference_server_process(name: str, work: Path, ready_timeout: float = 60.0) -> Iterator[Served]:
    """:func:`reference_server` without an event loop: a module-scoped fixture can hold it."""
    argv, env, headers = server_command(name, work)
    with subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
    ) as proc:
        assert proc.stderr is not None
        drain: threading.Thread | None = None
        try:
            url = _await_ready(proc.stderr, ready_timeout, argv)
            # Keep reading stderr so a chatty server never blocks on a full pipe; ends at its EOF.
            drain = threading.Thread(target=proc.stderr.read, name=f"{name}-stderr")
            drain.start()
            yield Served(name, url, local_auth(url, headers))
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if drain is not None:
                drain.join()


def _await_ready(stderr: IO[bytes], timeout: float, argv: list[str]) -> str:
    """The URL of the server's ``READY <url>`` line, waiting on its stderr (not polling a port)."""
    deadline = time.monotonic() + timeout
    seen = b""
    with selectors.DefaultSelector() as selector:
        selector.register(stderr, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not selector.select(remaining):
                raise TimeoutError(
                    f"{' '.join(argv)} printed no READY line within {timeout:g} s: {seen[-2000:]!r}"
                )
            line = stderr.readline()
            if not line:
                raise RuntimeError(f"{' '.join(argv)} exited before READY: {seen[-2000:]!r}")
            seen += line
            if line.startswith(b"READY "):
                return line.decode().split(" ", 1)[1].strip()
