"""nox sessions: tests, stress, lint, typecheck, bench, floors, docs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nox

nox.options.sessions = ["lint", "typecheck", "tests"]
nox.options.reuse_existing_virtualenvs = True

PACKAGES = ["asyncai_watch", "asyncai_agent", "asyncai_servers"]


@nox.session
def tests(session: nox.Session) -> None:
    session.install("-e", ".[test]")
    session.run("pytest", "-n", "2", "--dist", "loadfile", *session.posargs)


@nox.session
def stress(session: nox.Session) -> None:
    """The whole suite with every core kept busy by a CPU hog, twice: in file order, then in a
    random order (pytest-randomly; the seed it prints replays the order:
    ``nox -s stress -- --randomly-seed=N``). A test that fails here has a race a quiet machine hides."""
    # pytest-randomly shuffles every run it is installed in: only here, not in the test extra.
    session.install("-e", ".[test]", "pytest-randomly>=3.15")
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    failed = []
    try:
        for order, flags in (("file order", ["--randomly-dont-reorganize"]), ("random order", [])):
            try:
                session.run("pytest", "-n", "2", "--dist", "loadfile", *flags, *session.posargs)
            except nox.command.CommandFailed:
                failed.append(order)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    if failed:
        session.error(f"the suite failed under load, in {' and '.join(failed)}")


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    session.install("-e", ".[test]", "mypy")
    session.run("mypy", *[arg for pkg in PACKAGES for arg in ("-p", pkg)])


@nox.session
def bench(session: nox.Session) -> None:
    """Every benchmark in bench/, each printing its figures, baselines and ratios."""
    session.install("-e", ".[test]")
    for script in sorted(Path("bench").glob("*.py")):
        # floors.py is not a bench: it reruns benches under a profiler (nox -s floors)
        if not script.name.startswith("_") and script.name != "floors.py":
            session.run("python", str(script), *session.posargs)


@nox.session
def floors(session: nox.Session) -> None:
    """Where the missed targets' CPU goes: benches profiled by py-spy, split by layer."""
    session.install("-e", ".[test]", "py-spy>=0.4")
    session.run("python", "bench/floors.py", *session.posargs)


@nox.session
def docs(session: nox.Session) -> None:
    """Build the API reference into build/api (docs/api.md)."""
    session.install("-e", ".[test]")
    session.run("python", "scripts/api_docs.py", "build/api")
