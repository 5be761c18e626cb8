"""Ctrl-C, SIGTERM and a broken pipe end every reference server's and the bridge's stdio mode at once
and quietly (their HTTP modes: tests/server/test_signal_exit.py).

The client still holds stdin in each case; the server must exit 0 with no traceback.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import pytest

from tests.support.fake_kubectl import FakeCluster
from tests.support.interrupt import assert_ctrl_c_ends
from tests.support.kcp_helpers import kcp_argv, kcp_env, write_kubeconfig

pytestmark = pytest.mark.anyio

ENDINGS = ["SIGINT", "SIGTERM", "broken-pipe"]


@pytest.mark.parametrize("how", ENDINGS)
async def test_memo(tmp_path: Path, how: str) -> None:
    await assert_ctrl_c_ends([sys.executable, "-m", "asyncai_servers.memo"], how=how)


async def test_memo_on_a_terminal(tmp_path: Path) -> None:
    await assert_ctrl_c_ends([sys.executable, "-m", "asyncai_servers.memo"], terminal=True)


@pytest.mark.parametrize("how", ENDINGS)
async def test_memo_also_http(tmp_path: Path, how: str) -> None:
    argv = [sys.executable, "-m", "asyncai_servers.memo", "--also-http", "127.0.0.1:0"]
    await assert_ctrl_c_ends(argv, how=how)


@pytest.mark.parametrize("how", ENDINGS)
async def test_files(tmp_path: Path, how: str) -> None:
    await assert_ctrl_c_ends([sys.executable, "-m", "asyncai_servers.files", str(tmp_path)], how=how)


@pytest.mark.parametrize("how", ENDINGS)
async def test_kcp(tmp_path: Path, how: str) -> None:
    cluster = FakeCluster(tmp_path / "cluster")
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig.json", "https://kcp.test:6443/clusters/root")
    await assert_ctrl_c_ends([sys.executable, *kcp_argv(kubeconfig)], env=kcp_env(cluster, tmp_path), how=how)


@pytest.mark.parametrize("how", ENDINGS)
async def test_switchboard(tmp_path: Path, how: str) -> None:
    config = tmp_path / "switchboard.json"
    credential = {"name": "alice", "token": "alice-token", "queues": ["ops"], "attribution": "human"}
    config.write_text(json.dumps({"credentials": [credential]}))
    argv = [sys.executable, "-m", "asyncai_servers.switchboard", "--config", str(config)]
    argv += ["--sqlite", str(tmp_path / "switchboard.db")]
    await assert_ctrl_c_ends(argv, env={**os.environ, "SWITCHBOARD_TOKEN": "alice-token"}, how=how)


@pytest.mark.parametrize("how", ENDINGS)
async def test_bridge(tmp_path: Path, how: str) -> None:
    memo = f"{shlex.quote(sys.executable)} -m asyncai_servers.memo"
    await assert_ctrl_c_ends([sys.executable, "-m", "asyncai_watch", "serve", "--server", memo], how=how)
