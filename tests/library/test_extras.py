"""Optional extras: a missing one is a one-line install hint and exit 2, never a traceback.

Each entry point runs in a subprocess whose import system hides the extra's module, as on an
install without that extra.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from asyncai_watch.extras import EXTRAS, MissingExtraError, install_hint, require
from tests.support import ROOT


def canonical(name: str) -> str:
    """A distribution name as PEP 503 compares them (pydantic_ai_slim == pydantic-ai-slim)."""
    return re.sub(r"[-_.]+", "-", name).lower()


# Prepended to the program: a meta-path finder that makes the named top-level modules absent.
HIDE = """
import sys

class _Hide:
    def __init__(self, hidden):
        self.hidden = hidden

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.hidden:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _Hide(HIDDEN))
for _name in list(sys.modules):
    if _name.split(".")[0] in HIDDEN:
        del sys.modules[_name]
"""


def run_hidden(hidden: set[str], entry: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    module, func = entry.split(":")
    program = (
        f"HIDDEN = {sorted(hidden)!r}\n"
        + HIDE
        + (f"import sys\nfrom {module} import {func}\nsys.argv[1:] = {args!r}\nsys.exit({func}())\n")
    )
    return subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
        cwd=ROOT,
    )


def test_switchboard_postgres_without_psycopg_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "switchboard.json"
    credential = {"name": "alice", "token": "alice-token", "queues": ["ops"], "attribution": "human"}
    config.write_text(json.dumps({"credentials": [credential]}))
    args = ["--config", str(config), "--postgres", "postgresql:///nowhere", "--http", "127.0.0.1:0"]
    proc = run_hidden({"psycopg"}, "asyncai_servers.switchboard.__main__:main", args)
    assert proc.stderr.splitlines() == [
        "asyncai-switchboard: --postgres needs the 'psycopg' package: pip install 'asyncai-watch[postgres]'"
    ]
    assert proc.returncode == 2


@pytest.mark.parametrize(
    ("extra", "model"), [("openai", "openai:gpt-4o-mini"), ("anthropic", "anthropic:claude-sonnet-4-5")]
)
def test_agent_model_sdk_missing_is_one_line(extra: str, model: str) -> None:
    proc = run_hidden({extra}, "asyncai_agent.__main__:main", ["--model", model])
    feature = model.split(":")[0] + ":MODEL"
    assert proc.stderr.splitlines() == [
        f"asyncai-agent: error: {feature} needs the '{extra}' package: pip install 'asyncai-watch[{extra}]'"
    ]
    assert proc.returncode == 2


def test_every_runtime_extra_is_known_to_require() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    runtime = set(declared) - {"test", "dev"}
    assert set(EXTRAS) == runtime
    provided_by = importlib.metadata.packages_distributions()
    for extra, module in EXTRAS.items():
        # One of the extra's requirements provides the module it is required by
        # (psycopg[binary] -> psycopg, openai-agents -> agents).
        names = {canonical(re.split(r"[\[<>=~! ;]", req, maxsplit=1)[0]) for req in declared[extra]}
        assert names & {canonical(d) for d in provided_by.get(module.split(".")[0], [])}, (
            extra
        )  # google.adk: google


def test_require_names_the_extra_or_the_broken_import(monkeypatch: pytest.MonkeyPatch) -> None:
    assert require("postgres", feature="--postgres").__name__ == "psycopg"
    with pytest.raises(MissingExtraError) as info:
        require("postgres", feature="--postgres", module="no_such_module_xyz")
    assert str(info.value) == "--postgres needs the 'no_such_module_xyz' package: " + install_hint("postgres")
    assert info.value.extra == "postgres"
    assert isinstance(info.value, ImportError)

    def broken(name: str) -> None:
        raise ImportError("no pq wrapper available.\nAttempts:\n- couldn't import psycopg 'c'")

    monkeypatch.setattr("importlib.import_module", broken)
    with pytest.raises(MissingExtraError) as info:
        require("postgres", feature="--postgres")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(
        "--postgres needs the 'psycopg' package, which is installed but cannot be imported"
    )
    assert "no pq wrapper available. Attempts:" in message
    assert message.endswith("pip install 'asyncai-watch[postgres]'")


def test_postgres_server_without_psycopg_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "pg.toml"
    config.write_text('[[table]]\nname = "t"\n')
    proc = run_hidden({"psycopg"}, "asyncai_servers.postgres.__main__:main", ["--config", str(config)])
    assert proc.stderr.splitlines() == [
        "asyncai-mcp-postgres: this server needs the 'psycopg' package: pip install 'asyncai-watch[postgres]'"
    ]
    assert proc.returncode == 2
