"""The README's "Use the library" program and the examples run as written, as a user runs them:
a fresh interpreter (the venv's, with its bin directory off PATH, as in an IDE), real servers,
and the output the text promises."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import anyio
import pytest

from tests.support import ROOT

pytestmark = pytest.mark.anyio

WAIT = 90  # a fresh interpreter importing the SDK, plus a server process, on a loaded machine


def readme_program() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Use the library", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the section has one program"
    return blocks[0]


def without_venv_on_path() -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p != bin_dir)
    return {**os.environ, "PATH": path}


async def run(argv: list[str], tmp_path: Path, env: dict[str, str] | None = None) -> tuple[str, str]:
    with anyio.fail_after(WAIT):
        done = await anyio.run_process(argv, check=False, cwd=tmp_path, env=env)
    stdout, stderr = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, stderr
    assert "Traceback" not in stderr
    return stdout, stderr


async def test_the_readme_program_runs_as_written(tmp_path: Path) -> None:
    program = tmp_path / "watch_memo.py"
    program.write_text(readme_program())
    stdout, stderr = await run([sys.executable, str(program)], tmp_path, without_venv_on_path())
    assert stdout.splitlines() == ["ADDED todo", "ADDED owner"]
    assert stderr == ""


async def test_the_library_example_runs(tmp_path: Path) -> None:
    stdout, _ = await run(
        [sys.executable, str(ROOT / "examples" / "library.py")], tmp_path, without_venv_on_path()
    )
    assert stdout.splitlines() == ["watching memo://notes (state)", "ADDED todo", "ADDED owner"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="the CLI example is a bash script")
async def test_the_cli_example_runs(tmp_path: Path) -> None:
    # The script needs asyncai-watch and asyncai-mcp-files on PATH, as after pip install.
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    stdout, _ = await run(["bash", str(ROOT / "examples" / "cli_watch.sh")], tmp_path, env)
    lines = stdout.splitlines()
    assert (
        "file://{+path}  (template, files, MCP 2026-07-28, no mimeType, watchable via subscriptions/listen)"
        in lines
    )
    started = re.fullmatch(
        r"asyncai-watch: watching (file://\S+/config\.json) on files \(state\); Ctrl-C stops", lines[-2]
    )
    assert started is not None, lines
    record = json.loads(lines[-1])
    assert {k: record[k] for k in ("kind", "watch", "uri", "server", "lines", "failed")} == {
        "kind": "watch",
        "watch": "watch",
        "uri": started[1],
        "server": "files",
        "lines": ["MODIFIED mode (off→on)"],
        "failed": False,
    }
    [event] = record["events"]
    assert (event["type"], event["key"], event["old"], event["new"]) == ("MODIFIED", "mode", "off", "on")
