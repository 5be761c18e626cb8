"""Build the API reference: HTML pages from the docstrings of the public API, with pdoc.

    python scripts/api_docs.py OUTPUT_DIR

The public API is ``asyncai_watch.__all__`` plus the public submodules that the package's own
docstring lists (``- :mod:`asyncai_watch.NAME```): one page each, and an index. Any warning pdoc
gives (a name in ``__all__`` that does not resolve, an annotation it cannot read) fails the build,
as does a public module, class, function or method without a docstring: exit 1, naming each.
tests/docs/test_api_reference.py builds it on every run and checks its links (docs/api.md).
"""

from __future__ import annotations

import importlib
import re
import sys
import warnings
from pathlib import Path
from types import ModuleType

import pdoc
import pdoc.doc

PACKAGE = "asyncai_watch"
PUBLIC_SUBMODULE = re.compile(r"^- :mod:`(asyncai_watch\.\w+)`", re.M)


def public_modules() -> list[ModuleType]:
    """The package and every public submodule its docstring lists, with each ``__all__`` name
    resolved: the package imports its names on first use (PEP 562), which pdoc would not see."""
    root = importlib.import_module(PACKAGE)
    names = [PACKAGE, *PUBLIC_SUBMODULE.findall(root.__doc__ or "")]
    modules = [importlib.import_module(name) for name in names]
    for module in modules:
        for name in getattr(module, "__all__", ()):
            getattr(module, name)
    return modules


def undocumented(modules: list[ModuleType]) -> list[str]:
    """Every public module, class, function and method of the reference with no docstring
    (a method inherits its base class's docstring, as pdoc shows it)."""
    missing: list[str] = []

    def walk(members: list[pdoc.doc.Doc]) -> None:  # type: ignore[type-arg]
        for member in members:
            if member.name.startswith("_"):
                continue
            if isinstance(member, pdoc.doc.Class | pdoc.doc.Function) and not member.docstring.strip():
                missing.append(member.fullname)
            if isinstance(member, pdoc.doc.Class) and member.taken_from[0].startswith(PACKAGE):
                walk(member.own_members)

    for module in modules:
        doc = pdoc.doc.Module(module)
        if not doc.docstring.strip():
            missing.append(doc.fullname)
        walk(list(doc.members.values()))
    return missing


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python scripts/api_docs.py OUTPUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[0])
    modules = public_modules()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        missing = undocumented(modules)
        pdoc.pdoc(*(m.__name__ for m in modules), output_directory=out)
    problems = [f"pdoc: {w.message}" for w in caught if w.category is not DeprecationWarning]
    problems += [f"no docstring: {name}" for name in missing]
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return 1
    print(f"wrote the API reference of {len(modules)} modules to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
