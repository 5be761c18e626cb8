"""docs/architecture.md names the modules as they are: its module map against the tree, both ways."""

from __future__ import annotations

import re

from tests.support import ROOT

PACKAGES = ("asyncai_watch", "asyncai_agent", "asyncai_servers")
PAGE = ROOT / "docs" / "architecture.md"
# Where a bare module path on the page may live: the checkout (tests/..., examples/...), a
# package (asyncai_watch/core/feed.py), or inside asyncai_watch (runtime/runner.py, state_file.py).
BASES = (ROOT, ROOT / "asyncai_watch", ROOT / "asyncai_servers", ROOT / "asyncai_agent")


def module_map(text: str) -> set[str]:
    """Each `folder/`: `name.py`, ... item of the "Module map" section, as folder/name.py."""
    section = text.split("## Module map", 1)[1].split("\n## ", 1)[0]
    named = set()
    for item in re.split(r"\n- ", section)[1:]:
        folder = re.match(r"`([\w/]+/)`", item)
        assert folder, f"a module map item must start with its `folder/`: {item[:60]!r}"
        # a module's own mention of a sibling elsewhere (`core/echo.py`) has a slash: not listed
        named |= {folder.group(1) + name for name in re.findall(r"`(\w+\.py)`", item)}
    return named


def test_the_module_map_lists_every_module_of_the_packages_and_nothing_else() -> None:
    tree = {
        p.relative_to(ROOT).as_posix()
        for package in PACKAGES
        for p in (ROOT / package).rglob("*.py")
        if p.name != "__init__.py"
    }
    named = module_map(PAGE.read_text())
    assert not tree - named, f"modules the map of docs/architecture.md leaves out: {sorted(tree - named)}"
    assert not named - tree, f"modules docs/architecture.md maps that do not exist: {sorted(named - tree)}"


def test_every_module_path_on_the_page_exists() -> None:
    paths = set(re.findall(r"`([\w./]+\.py)`", PAGE.read_text()))
    # a bare name (`runner.py`, in a folder's list) must be some module of the packages
    modules = {p.name for package in PACKAGES for p in (ROOT / package).rglob("*.py")}
    missing = sorted(
        p for p in paths if not any((base / p).is_file() for base in BASES) and ("/" in p or p not in modules)
    )
    assert not missing, f"docs/architecture.md names modules that are not in the tree: {missing}"
