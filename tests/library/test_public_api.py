"""The public API is small, what our reference agent and servers are built on, and cheap to import."""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

import asyncai_watch
from tests.support import ROOT

PUBLIC_SUBMODULES = {
    "asyncai_watch.cli_help",
    "asyncai_watch.clock",
    "asyncai_watch.codemode",
    "asyncai_watch.exception_groups",
    "asyncai_watch.extras",
    "asyncai_watch.http_auth",
    "asyncai_watch.log",
    "asyncai_watch.log_flags",
    "asyncai_watch.mcp.server_spec",
    "asyncai_watch.server",
    "asyncai_watch.signals",
    "asyncai_watch.small_file",
    "asyncai_watch.testing",
    "asyncai_watch.integrations",
    "asyncai_watch.integrations.pydantic_ai",
    "asyncai_watch.integrations.openai_agents",
    "asyncai_watch.integrations.langgraph",
    "asyncai_watch.integrations.claude_agent_sdk",
    "asyncai_watch.integrations.google_adk",
    "asyncai_watch.server.errors",
    "asyncai_watch.server.eventlog",
    "asyncai_watch.server.http",
    "asyncai_watch.server.index",
    "asyncai_watch.server.policy",
    "asyncai_watch.server.resumable",
    "asyncai_watch.server.schemas",
    "asyncai_watch.server.stdio",
    "asyncai_watch.server.subscriptions",
    "asyncai_watch.server.tool_dispatch",
    "asyncai_watch.server.text",
}
SDK = (
    "mcp",
    "mcp_types",
    "httpx",
    "httpx2",
    "starlette",
    "sse_starlette",
    "uvicorn",
    "pydantic",
    "pydantic_core",
)
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def imports_of(path: Path) -> list[tuple[str, list[str]]]:
    """Every ``from M import names`` and ``import M`` in ``path``, those inside functions included."""
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            found.append((node.module or "", [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
    return found


def test_the_root_exports_about_thirty_documented_names() -> None:
    assert 25 <= len(asyncai_watch.__all__) <= 36
    for name in asyncai_watch.__all__:
        value = getattr(asyncai_watch, name)
        if callable(value):
            assert value.__doc__, f"asyncai_watch.{name} has no docstring"


def test_every_public_submodule_is_named_in_the_package_docstring() -> None:
    assert asyncai_watch.__doc__ is not None
    for module in PUBLIC_SUBMODULES:
        if module.count(".") == 1:
            assert f":mod:`{module}`" in asyncai_watch.__doc__, module


@pytest.mark.parametrize("package", ["asyncai_agent", "asyncai_servers"])
def test_the_agent_and_the_servers_import_only_the_public_api(package: str) -> None:
    offending = []
    for path in sorted((ROOT / package).rglob("*.py")):
        where = path.relative_to(ROOT)
        for module, names in imports_of(path):
            if not module.startswith("asyncai_watch"):
                continue
            if not names:  # import asyncai_watch.x
                if module != "asyncai_watch" and module not in PUBLIC_SUBMODULES:
                    offending.append(f"{where}: import {module}")
                continue
            if module == "asyncai_watch":
                allowed = set(asyncai_watch.__all__) | {m.split(".")[1] for m in PUBLIC_SUBMODULES}
            elif module in PUBLIC_SUBMODULES:
                allowed = set(getattr(importlib.import_module(module), "__all__", ()))
            else:
                allowed = set()
            offending += [f"{where}: from {module} import {n}" for n in names if n not in allowed]
    assert offending == []


def test_the_library_never_imports_the_reference_servers() -> None:
    offending = [
        f"{path.relative_to(ROOT)}: {module}"
        for path in sorted((ROOT / "asyncai_watch").rglob("*.py"))
        for module, _ in imports_of(path)
        if module.split(".")[0] == "asyncai_servers"
    ]
    assert offending == []


def test_every_root_name_is_importable_listed_and_typed() -> None:
    """The lazy root resolves each name of ``__all__`` from its module; ``dir()`` lists them, and
    the ``TYPE_CHECKING`` imports name the same set for type checkers."""
    homes = vars(asyncai_watch)["_HOME"]
    assert set(homes) == set(asyncai_watch.__all__)
    for name, home in homes.items():
        assert getattr(asyncai_watch, name) is getattr(importlib.import_module(home), name)
    assert set(asyncai_watch.__all__) <= set(dir(asyncai_watch))
    tree = ast.parse((ROOT / "asyncai_watch" / "__init__.py").read_text())
    typed = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
        for stmt in node.body
        if isinstance(stmt, ast.ImportFrom)
        for alias in stmt.names
    }
    assert typed == set(asyncai_watch.__all__)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = asyncai_watch.Nope
    for module in ("log", "clock", "server"):
        assert getattr(asyncai_watch, module) is importlib.import_module(f"asyncai_watch.{module}")


def loaded_after(statement: str) -> set[str]:
    """The top-level packages and ``asyncai_watch`` modules a fresh interpreter holds after ``statement``."""
    code = f"import sys\n{statement}\nprint(' '.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, check=True)
    return {m if m.startswith("asyncai_watch") else m.split(".")[0] for m in done.stdout.split()}


def test_importing_the_core_loads_no_sdk() -> None:
    modules = sorted(p.stem for p in (ROOT / "asyncai_watch" / "core").glob("*.py") if p.stem != "__init__")
    loaded = loaded_after(
        "import asyncai_watch.core.feed\n" + "\n".join(f"import asyncai_watch.core.{m}" for m in modules)
    )
    assert "asyncai_watch.core.feed" in loaded
    assert loaded & set(SDK) == set()


def test_a_plain_import_loads_nothing_but_the_root() -> None:
    loaded = loaded_after("import asyncai_watch")
    assert {m for m in loaded if m.startswith("asyncai_watch")} == {
        "asyncai_watch",
        "asyncai_watch._mcp_version",
    }
    assert loaded & set(SDK) == set()
