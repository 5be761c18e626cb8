"""The docs stand on their own: no citation of design records that do not ship, working links,
a license the metadata names, a changelog and project URLs."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from tests.support import ROOT

DOCS = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").rglob("*.md")])
SOURCES = sorted(
    p for pkg in ("asyncai_watch", "asyncai_agent", "asyncai_servers") for p in (ROOT / pkg).rglob("*.py")
)

# Documents that are not part of this project: citing them leaves a reader with nothing to open.
UNSHIPPED = re.compile(r"\bADR\b|ADR[- ]?\d|adr-\d|design-channels|SPEC-\d")
# Being rewritten on another branch at the time this test was written; drop once they are clean.

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_slug(line.lstrip("#")) for line in path.read_text().splitlines() if line.startswith("#")}


@pytest.mark.parametrize("path", DOCS + SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_citation_of_unshipped_design_records(path: Path) -> None:
    rel = str(path.relative_to(ROOT))
    hits = [
        f"{rel}:{n}: {line.strip()}"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if UNSHIPPED.search(line)
    ]
    assert hits == []


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    broken = []
    for target in LINK.findall(path.read_text()):
        if re.match(r"[a-z]+:", target):  # http(s), mailto: not checked here
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        missing_anchor = bool(anchor) and dest.suffix == ".md" and anchor not in _anchors(dest)
        if not dest.exists() or missing_anchor:
            broken.append(target)
    assert broken == []


def test_the_design_page_exists_and_is_linked() -> None:
    design = ROOT / "docs" / "design.md"
    text = design.read_text()
    for section in ("Why push", "Read shapes", "Event logs and GAP", "Limits", "Resubscribe policy"):
        assert f"## {section}" in text
    assert "### NO_REPLY" in text
    assert "## Channels: doorbells over a durable queue" in text
    assert "docs/design.md" in (ROOT / "README.md").read_text()


def test_license_changelog_and_urls_in_the_metadata() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"  # an SPDX expression, not the deprecated table
    assert project["license-files"] == ["LICENSE"]
    license_text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in license_text
    assert "Version 2.0, January 2004" in license_text
    assert "END OF TERMS AND CONDITIONS" in license_text
    assert {"Homepage", "Documentation", "Issues"} <= set(project["urls"])
    assert all(url.startswith("https://") for url in project["urls"].values())
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert changelog.startswith("# Changelog")
    assert re.search(r"^## \[", changelog, re.MULTILINE)
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    # license-files and SPDX license strings need setuptools 77.
    assert any(re.fullmatch(r"setuptools>=(7[7-9]|[89]\d|\d{3,})(\.\d+)*", req) for req in build)
