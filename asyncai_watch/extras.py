"""Optional dependencies: import one, or say in one line which extra installs it (public).

Some features need a package that ``pip install asyncai-watch`` does not bring
(a model SDK, a PostgreSQL driver). They are declared as extras in
``pyproject.toml`` and imported only when the feature is chosen, through
:func:`require`, so a missing one is a one-line hint instead of a traceback::

    psycopg = require("postgres", feature="--postgres")
    # MissingExtraError: --postgres needs the 'psycopg' package: pip install 'asyncai-watch[postgres]'
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Final

__all__ = ["EXTRAS", "PACKAGE", "MissingExtraError", "install_hint", "require"]

PACKAGE: Final = "asyncai-watch"
"""The distribution whose extras these are."""

EXTRAS: Final = {
    "openai": "openai",
    "anthropic": "anthropic",
    "postgres": "psycopg",
    "pydantic-ai": "pydantic_ai",
    "openai-agents": "agents",
    "langgraph": "langgraph",
    "claude-agent-sdk": "claude_agent_sdk",
    "google-adk": "google.adk",
    "fastmcp": "fastmcp",
    "webhooks": "standardwebhooks",
}
"""Each extra of ``pyproject.toml`` with a runtime feature, and the top-level module it provides.

A new extra is added here and in ``pyproject.toml``; a test checks that the two agree."""


class MissingExtraError(ImportError):
    """An optional dependency is missing or broken; the message names the extra to install."""

    def __init__(self, message: str, *, module: str, extra: str) -> None:
        super().__init__(message, name=module)
        self.module = module
        self.extra = extra


def install_hint(extra: str) -> str:
    """The command that installs ``extra``, e.g. ``pip install 'asyncai-watch[postgres]'``."""
    return f"pip install '{PACKAGE}[{extra}]'"


def require(extra: str, *, feature: str, module: str | None = None) -> ModuleType:
    """Import the module of ``extra`` for ``feature``, or raise :class:`MissingExtraError`.

    ``feature`` is what the user asked for (``--postgres``, ``openai:MODEL``); ``module``
    defaults to the extra's module in :data:`EXTRAS`. A module that is absent says which extra
    installs it; one that is installed but fails to import (e.g. a missing system library)
    says so, with the import error on the same line, and the same hint.
    """
    if module is None:
        module = EXTRAS[extra]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        root = module.split(".")[0]
        if exc.name is None or exc.name.split(".")[0] != root:
            raise _broken(module, extra, feature, exc) from exc
        raise MissingExtraError(
            f"{feature} needs the '{root}' package: {install_hint(extra)}", module=module, extra=extra
        ) from None
    except ImportError as exc:
        raise _broken(module, extra, feature, exc) from exc


def _broken(module: str, extra: str, feature: str, exc: ImportError) -> MissingExtraError:
    detail = " ".join(str(exc).split())  # one line, whatever the library's message looks like
    return MissingExtraError(
        f"{feature} needs the '{module}' package, which is installed but cannot be imported "
        f"({detail}); reinstall it: {install_hint(extra)}",
        module=module,
        extra=extra,
    )
