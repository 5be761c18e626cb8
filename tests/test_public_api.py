"""The public API is small and is what our own reference agent is built on."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import asyncai_watch

ROOT = Path(__file__).resolve().parent.parent
PUBLIC_SUBMODULES = {
    "asyncai_watch.codemode",
    "asyncai_watch.http_auth",
    "asyncai_watch.log",
    "asyncai_watch.server",
    "asyncai_watch.signals",
    "asyncai_watch.testing",
    "asyncai_watch.integrations",
    "asyncai_watch.integrations.pydantic_ai",
    "asyncai_watch.integrations.openai_agents",
    "asyncai_watch.integrations.langgraph",
}


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


def test_the_reference_agent_imports_only_the_public_api() -> None:
    offending = []
    for path in sorted((ROOT / "asyncai_agent").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("asyncai_watch"):
                module = node.module or ""
                names = [alias.name for alias in node.names]
                if module == "asyncai_watch":
                    allowed = set(asyncai_watch.__all__) | {m.split(".")[1] for m in PUBLIC_SUBMODULES}
                elif module in PUBLIC_SUBMODULES:
                    allowed = set(getattr(importlib.import_module(module), "__all__", ()))
                else:
                    allowed = set()
                offending += [f"{path.name}: from {module} import {n}" for n in names if n not in allowed]
            elif isinstance(node, ast.Import):
                offending += [
                    f"{path.name}: import {a.name}"
                    for a in node.names
                    if a.name.startswith("asyncai_watch.") and a.name not in PUBLIC_SUBMODULES
                ]
    assert offending == []
