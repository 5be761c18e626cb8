"""End to end with the reference agent: kcp server (stdio) + fake kubectl, a configmap watch set up
through run_code by the scripted model, notices arriving as turns (issue 4 "End to end")."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream

from asyncai_agent.backends.scripted import ScriptedBackend, parse_script
from asyncai_agent.events import AgentEvent, NoticeReceived, RunCompleted, RunFailed
from asyncai_agent.session import SessionConfig, open_session
from asyncai_watch.core.limits import Limits
from asyncai_watch.core.turns import WATCH_INSTRUCTION
from asyncai_watch.mcp.client import McpResourceSource
from tests.support.fake_kubectl import FakeCluster
from tests.support.kcp_helpers import WAIT, kcp_argv, kcp_env, watch_starts, write_kubeconfig

URI = "kcp-events://watch/root:app/configmaps?namespace=*"
ON_EVENT = """
m = event["object"]["metadata"]
f'{event["type"].lower()} {m["namespace"]}/{m["name"]}' if event["type"] in ("ADDED", "DELETED") else None
"""
SCRIPT = {
    "turns": [
        {
            "expect": "watch configmaps",
            "steps": [
                {"run_code": f"await watch_start(name='cm', uri={URI!r}, on_event='''{ON_EVENT}''')"},
                {"expect": "'shape': 'event-log'", "reply": "Watching configmaps in root:app."},
            ],
        },
        {
            "expect": "added default/final-check",
            "steps": [{"reply": "ConfigMap default/final-check appeared."}],
        },
        {
            "expect": "deleted default/final-check",
            "steps": [{"reply": "ConfigMap default/final-check is gone."}],
        },
    ]
}


class Channel:
    def __init__(self) -> None:
        self.sent: list[str] = []

    @property
    def name(self) -> str:
        return "alice"

    async def send(self, text: str) -> None:
        self.sent.append(text)


async def turn(
    events: MemoryObjectReceiveStream[AgentEvent], notices: list[NoticeReceived], deadline: float = WAIT
) -> None:
    with anyio.fail_after(deadline):
        async for event in events:
            if isinstance(event, NoticeReceived):
                notices.append(event)
            assert not isinstance(event, RunFailed), event.error
            if isinstance(event, RunCompleted):
                return


@pytest.mark.anyio
async def test_agent_configmap_watch_create_patches_delete(tmp_path: Path) -> None:
    cluster = FakeCluster(tmp_path / "cluster")
    cluster.create("already-there")
    kc = write_kubeconfig(tmp_path / "kc.json", "https://kcp.test:6443")
    channel = Channel()
    notices: list[NoticeReceived] = []
    backend = ScriptedBackend(parse_script(SCRIPT))
    async with watch_starts() as starts:
        env = {**kcp_env(cluster, tmp_path), "FAKE_KUBECTL_NOTIFY": starts.path}
        source = McpResourceSource.stdio(
            [sys.executable, *kcp_argv(kc, "--backoff", "0:0")], name="kcp", env=env
        )
        config = SessionConfig(limits=Limits(debounce_quiet=0.0, debounce_max_wait=0.0))
        async with open_session(config, backend, default_channel=channel, sources=[source]) as session:
            orch = session.orchestrator
            events = orch.subscribe()
            orch.submit(
                "watch configmaps in root:app (all namespaces); tell me when one appears or disappears",
                channel,
            )
            # The first turn includes the seed (kubectl get) behind watch_start's baseline read.
            await turn(events, notices, deadline=3 * WAIT)
            await starts.next()  # kubectl -w is streaming
            cluster.create("final-check", {"a": "1"})
            await turn(events, notices)
            for n in range(3):
                cluster.patch("final-check", {"a": str(n + 2)})
            cluster.delete("final-check")
            await turn(events, notices)
            with anyio.fail_after(WAIT):
                await orch.wait_idle()
            (listed,) = session.manager.watch_list()
    assert backend.finished
    assert [n.rendered.text for n in notices] == [
        f'<watch-event name="cm" uri="{URI}">\n{line}\n</watch-event>\n{WATCH_INSTRUCTION}'
        for line in ("added default/final-check", "deleted default/final-check")
    ]
    # The patches were dropped by the filter: 5 events (ADDED, 3 MODIFIED, DELETED), 2 notices, 3 turns.
    assert (listed.events, listed.notices) == (5, 2)
    assert channel.sent == [
        "Watching configmaps in root:app.",
        "ConfigMap default/final-check appeared.",
        "ConfigMap default/final-check is gone.",
    ]
