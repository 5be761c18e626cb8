"""nox sessions: tests, lint, typecheck, bench, floors."""

from __future__ import annotations

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
