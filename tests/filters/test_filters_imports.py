"""The filter package's modules import each other without a cycle (lazy imports included)."""

from __future__ import annotations

import ast
from pathlib import Path

import asyncai_watch.filters

PACKAGE = "asyncai_watch.filters"
ROOT = Path(asyncai_watch.filters.__file__).parent


def _imports(path: Path, modules: set[str]) -> set[str]:
    """Every module of the package that ``path`` imports, at top level or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                # `from asyncai_watch.filters import _wire` imports the submodule, not the package.
                if sub in modules:
                    found.add(sub)
                elif node.module in modules:
                    found.add(node.module)
    return found


def test_no_import_cycles_between_filter_modules() -> None:
    paths = {f"{PACKAGE}.{p.stem}": p for p in ROOT.glob("*.py") if p.stem != "__init__"}
    graph = {name: _imports(path, set(paths)) - {name} for name, path in paths.items()}
    assert f"{PACKAGE}.restricted" in graph
    assert f"{PACKAGE}.engine" in graph

    def cycle_from(start: str) -> list[str] | None:
        stack = [(start, [start])]
        while stack:
            node, trail = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    return [*trail, nxt]
                if nxt not in trail:
                    stack.append((nxt, [*trail, nxt]))
        return None

    cycles = [c for c in map(cycle_from, sorted(graph)) if c]
    assert cycles == []
