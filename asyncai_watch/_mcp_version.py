"""The ``mcp`` SDK versions this release is tested with, checked once at ``import asyncai_watch``.

The library leans on the SDK's 2.3 API (``subscriptions/listen``, ``server/discover``, the
``Transport`` protocol, the low-level ``Server``); another minor version may move any of it,
and the failure would then surface far from its cause (an ``AttributeError`` deep inside a
connect). So an ``mcp`` outside :data:`MCP_VERSIONS` is refused at import with one error that
names the range and the command that installs a fitting one. The check reads the installed
distribution's metadata; it imports nothing of the SDK.
"""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version
from typing import Final

__all__ = ["MCP_VERSIONS", "McpVersionError", "check_mcp_version"]

MCP_VERSIONS: Final = ">=2.3,<2.4"
"""The tested range, as ``pyproject.toml`` declares it (a test keeps the two equal)."""

_LOWEST: Final = (2, 3)
_BEYOND: Final = (2, 4)
_RELEASE: Final = re.compile(r"(\d+)\.(\d+)")


class McpVersionError(ImportError):
    """The installed ``mcp`` is missing or outside :data:`MCP_VERSIONS`."""


def _fix() -> str:
    return f"pip install 'mcp{MCP_VERSIONS}'"


def check_mcp_version() -> None:
    """Raise :class:`McpVersionError` unless the installed ``mcp`` is within :data:`MCP_VERSIONS`."""
    try:
        found = version("mcp")
    except PackageNotFoundError:
        raise McpVersionError(
            f"asyncai-watch needs the mcp package (mcp{MCP_VERSIONS}), and it is not installed: {_fix()}",
            name="mcp",
        ) from None
    release = _RELEASE.match(found)
    if release is None or not _LOWEST <= (int(release[1]), int(release[2])) < _BEYOND:
        raise McpVersionError(
            f"asyncai-watch is tested with mcp{MCP_VERSIONS}, but mcp {found} is installed: {_fix()}",
            name="mcp",
        )
