"""Shared setup for the kcp server tests: a fake cluster directory, a kubeconfig, the server's argv/env."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from mcp import Client, StdioServerParameters

from tests.support.fake_kubectl import FakeCluster

FAKE_KUBECTL = str(Path(__file__).parent / "bin" / "kubectl")
WAIT = 30  # seconds: the bound on any one awaited notification or read (generous: 2 shared cores)


def write_kubeconfig(path: Path, server: str, token: str | None = None, namespace: str = "default") -> Path:
    """A kubeconfig in JSON (a YAML subset, which the real kubectl reads too)."""
    user: dict[str, Any] = {"token": token} if token else {}
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "kcp", "cluster": {"server": server}}],
                "users": [{"name": "admin", "user": user}],
                "contexts": [
                    {"name": "kcp", "context": {"cluster": "kcp", "user": "admin", "namespace": namespace}}
                ],
                "current-context": "kcp",
            }
        )
    )
    return path


def kcp_env(cluster: FakeCluster, home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "FAKE_KUBECTL_DIR": str(cluster.root),
        "FAKE_KUBECTL_PYTHON": sys.executable,
        "HOME": str(home),  # kubectl's discovery cache stays in the test's tmp dir
    }


def kcp_argv(kubeconfig: Path, *extra: str, kubectl: str = FAKE_KUBECTL) -> list[str]:
    return ["-m", "asyncai_servers.kcp", "--kubectl", kubectl, "--kubeconfig", str(kubeconfig), *extra]


class WatchStarts:
    """Counts ``kubectl get -w`` streams as the fake kubectl announces them on a unix socket."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="fk", dir="/tmp")  # unix socket paths must stay short
        self.path = os.path.join(self.dir, "s")
        self.send, self.recv = anyio.create_memory_object_stream[str](100)
        self.count = 0

    async def _serve(self, listener: anyio.abc.SocketListener) -> None:
        async def handle(conn: anyio.abc.SocketStream) -> None:
            async with conn:
                with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                    await self.send.send((await conn.receive()).decode().strip())

        await listener.serve(handle)

    async def next(self) -> str:
        """Wait for the next watch stream to start streaming."""
        with anyio.fail_after(WAIT):
            msg = await self.recv.receive()
        self.count += 1
        return msg


@asynccontextmanager
async def watch_starts() -> AsyncIterator[WatchStarts]:
    starts = WatchStarts()
    listener = await anyio.create_unix_listener(starts.path)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(starts._serve, listener)
            yield starts
            tg.cancel_scope.cancel()
    finally:
        shutil.rmtree(starts.dir, ignore_errors=True)


@asynccontextmanager
async def kcp_client(
    tmp_path: Path,
    cluster: FakeCluster,
    *extra: str,
    kubectl: str = FAKE_KUBECTL,
    server: str | None = None,
    starts: WatchStarts | None = None,
    namespace: str = "default",
) -> AsyncIterator[Client]:
    kc = write_kubeconfig(
        tmp_path / "kubeconfig.json", server or "https://kcp.test:6443/clusters/root", namespace=namespace
    )
    params = StdioServerParameters(
        command=sys.executable,
        args=kcp_argv(kc, "--backoff", "0:0", *extra, kubectl=kubectl),
        env={**kcp_env(cluster, tmp_path), **({"FAKE_KUBECTL_NOTIFY": starts.path} if starts else {})},
    )
    async with Client(params) as client:
        yield client


def events_of(text: str) -> list[dict[str, Any]]:
    body = json.loads(text)
    events: list[dict[str, Any]] = body["events"]
    return events
