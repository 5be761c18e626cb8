"""The API reference (docs/api.md) builds from the docstrings, and its pages hold together.

``scripts/api_docs.py`` runs as a reader would run it, into a fresh directory: it must exit 0
(no pdoc warning, no public name without a docstring), write a page for the package and for each
public submodule, give every name of ``asyncai_watch.__all__`` an anchor, and every link between
its pages must land on a page and an anchor that exist.
"""

from __future__ import annotations

import html.parser
import subprocess
import sys
import types
from pathlib import Path
from urllib.parse import urldefrag, urlsplit

import pytest

import asyncai_watch
from scripts import api_docs
from tests.support import ROOT

BUILD_TIMEOUT = 300  # seconds: pdoc imports every public module; a busy machine is slow


class Page(html.parser.HTMLParser):
    """The links and the anchors of one HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name == "id":
                self.ids.add(value)
            elif name == "href" and tag == "a":
                self.links.append(value)


def parse(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text())
    return page


def broken_links(site: Path) -> list[str]:
    """Every link from one page of ``site`` to another (or to itself) whose page or anchor is
    missing. Links out of the site (http, mailto, the search script's template) are not followed."""
    pages = {path.resolve(): parse(path) for path in site.rglob("*.html")}
    broken: list[str] = []
    for path, page in pages.items():
        for link in page.links:
            if urlsplit(link).scheme or "${" in link or not link:
                continue
            target, anchor = urldefrag(link)
            where = (path.parent / target).resolve() if target else path
            if where not in pages:
                broken.append(f"{path.relative_to(site.resolve())}: {link} (no such page)")
            elif anchor and anchor not in pages[where].ids:
                broken.append(f"{path.relative_to(site.resolve())}: {link} (no such anchor)")
    return broken


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("api")
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "api_docs.py"), str(out)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_the_reference_has_a_page_for_the_package_and_each_public_submodule(site: Path) -> None:
    names = [module.__name__ for module in api_docs.public_modules()]
    assert "asyncai_watch.codemode" in names  # the list is read from the package's docstring
    assert len(names) >= 10
    missing = [name for name in names if not (site / (name.replace(".", "/") + ".html")).is_file()]
    assert not missing
    assert (site / "index.html").is_file()


def test_every_name_of_the_root_namespace_has_an_entry(site: Path) -> None:
    ids = parse(site / "asyncai_watch.html").ids
    assert [name for name in asyncai_watch.__all__ if name not in ids] == []


def test_no_link_between_the_pages_is_broken(site: Path) -> None:
    assert broken_links(site) == []


def test_the_link_check_finds_a_missing_page_and_a_missing_anchor(tmp_path: Path) -> None:
    (tmp_path / "a.html").write_text('<a href="b.html#here">b</a><a href="#nowhere">self</a><p id="x"></p>')
    (tmp_path / "b.html").write_text('<h1 id="there">b</h1><a href="c.html">c</a><a href="a.html#x">a</a>')
    assert sorted(broken_links(tmp_path)) == [
        "a.html: #nowhere (no such anchor)",
        "a.html: b.html#here (no such anchor)",
        "b.html: c.html (no such page)",
    ]


def test_a_public_name_without_a_docstring_is_named() -> None:
    module = types.ModuleType("asyncai_watch_fake", "A module with a docstring.")

    def documented() -> None:
        """Has one."""

    def bare() -> None:
        pass

    class Thing:
        """A class with one bare method."""

        def method(self) -> None:
            pass

    for value in (documented, bare, Thing):
        value.__module__ = module.__name__
        setattr(module, value.__name__, value)
    Thing.__qualname__ = "Thing"
    module.__all__ = ["documented", "bare", "Thing"]  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    try:
        missing = api_docs.undocumented([module])
    finally:
        del sys.modules[module.__name__]
    assert sorted(missing) == ["asyncai_watch_fake.Thing.method", "asyncai_watch_fake.bare"]
