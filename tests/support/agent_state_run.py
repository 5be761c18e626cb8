"""Run the reference agent (a scripted model that replies "hi") on a ``--watch-state`` file, as a
real process: how a state file the agent refuses reaches the user (stderr and the exit code)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

__all__ = ["run_agent_with_state"]


def run_agent_with_state(tmp_path: Path, state: Path) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"turns": [{"steps": [{"reply": "hi"}]}]}))
    return subprocess.run(
        [sys.executable, "-m", "asyncai_agent", "--model", f"scripted:{script}", "--watch-state", str(state)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
