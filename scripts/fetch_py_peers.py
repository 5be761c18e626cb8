"""Install the Python MCP peers the tests run, each in its own virtualenv under ``.tools/``.

- the official Python SDK 1.x (``mcp`` :data:`PY_V1`), on which most Python MCP servers run
  today (MCP 2025-11-25, ``initialize``; it advertises ``resources.subscribe: false`` even with
  a subscribe handler), with uvicorn to serve ``tests/support/peers/py_v1_server.py`` over HTTP.

Our own environment holds the SDK 2.3, so the 1.x SDK cannot live beside it: it gets a
virtualenv of its own, made with the interpreter that runs this script. The install goes into
a side directory first and is renamed when complete, so a half-finished one is never taken for
a cached one; a second run finds it and downloads nothing.

Usage: ``python scripts/fetch_py_peers.py``; exit 0 prints ``NAME PYTHON`` per peer; exit 1
prints why it failed on stderr.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Final

PY_V1: Final = "1.30.0"
"""The Python SDK 1.x release the peer runs on (the last of the 1.x line)."""
_V1_REQUIREMENTS: Final = (f"mcp=={PY_V1}", "uvicorn>=0.30", "starlette>=0.40")
TOOLS: Final = Path(__file__).resolve().parent.parent / ".tools"
_TIMEOUT: Final = 600  # s for the whole pip install (a stalled index connection hangs pip)


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _installed(venv: Path, version: str) -> bool:
    python = _python(venv)
    if not python.is_file():
        return False
    probe = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('mcp'))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return probe.returncode == 0 and probe.stdout.strip() == version


def fetch_py_v1(tools: Path = TOOLS) -> Path:
    """The interpreter of the cached Python SDK 1.x virtualenv, made if missing."""
    venv = tools / f"mcp-py-v1-{PY_V1}"
    if _installed(venv, PY_V1):
        return _python(venv)
    part = venv.with_name(venv.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    tools.mkdir(parents=True, exist_ok=True)
    # A venv's scripts name their own path: it is made at its final path, under a lock-free
    # rename of the side directory only after pip succeeded.
    made = subprocess.run(
        [sys.executable, "-m", "venv", str(part)], capture_output=True, text=True, timeout=120, check=False
    )
    if made.returncode != 0:
        raise RuntimeError(f"python -m venv {part} failed: {made.stderr.strip()[-1000:]}")
    pip = [str(_python(part)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    try:
        proc = subprocess.run(
            [*pip, *_V1_REQUIREMENTS], capture_output=True, text=True, timeout=_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired as exc:
        shutil.rmtree(part, ignore_errors=True)
        raise RuntimeError(f"pip install {' '.join(_V1_REQUIREMENTS)}: no end within {_TIMEOUT} s") from exc
    if proc.returncode != 0:
        shutil.rmtree(part, ignore_errors=True)
        raise RuntimeError(
            f"pip install {' '.join(_V1_REQUIREMENTS)} failed (exit {proc.returncode}): "
            f"{proc.stderr.strip()[-2000:]}"
        )
    shutil.rmtree(venv, ignore_errors=True)
    part.replace(venv)
    # The venv's python is a symlink to the base interpreter and its pyvenv.cfg names no path of
    # its own, so the renamed venv works; its console scripts (unused here) keep the old path.
    if not _installed(venv, PY_V1):
        raise RuntimeError(f"{venv} holds no mcp {PY_V1} after the install")
    return _python(venv)


def main() -> int:
    try:
        python = fetch_py_v1()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        print(f"fetch_py_peers: {exc}", file=sys.stderr)
        return 1
    print(f"mcp@{PY_V1} {python}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
