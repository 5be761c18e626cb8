"""Each framework example runs as written, as a user would run it: a subprocess that starts the
real memo server, makes its own change with a second client, prints the agent's replies and exits 0."""

from __future__ import annotations

import subprocess
import sys

import anyio
import pytest

from tests.support import ROOT

pytestmark = pytest.mark.anyio

EXAMPLES = ROOT / "examples"
EXPECTED = [
    "agent: Watching memo://notes.",
    "someone else: memo_set todo = 'buy milk'",
    "agent: The memo changed: ADDED todo",
]


@pytest.mark.parametrize(
    "script", ["pydantic_ai_agent.py", "openai_agents_agent.py", "langgraph_agent.py", "google_adk_agent.py"]
)
async def test_the_example_runs_and_prints_the_reply_to_its_change(script: str) -> None:
    with anyio.fail_after(100):  # the whole run of a fresh interpreter importing the framework
        done = await anyio.run_process(
            [sys.executable, str(EXAMPLES / script)],
            check=False,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=EXAMPLES.parent,
        )
    stdout, stderr = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, stderr
    assert stdout.splitlines() == EXPECTED
    assert stderr == ""  # no warnings, no tracebacks: what a user copies runs clean
