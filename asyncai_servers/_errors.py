"""The protocol errors every reference server answers with: re-exported from the library.

The one definition (and why an unknown tool or resource is -32602) is in
:mod:`asyncai_watch._mcp_errors`, which ``asyncai-watch serve`` uses too.
"""

from __future__ import annotations

from asyncai_watch._mcp_errors import (
    RESOURCE_NOT_FOUND,
    UNKNOWN_TOOL,
    resource_error,
    resource_not_found,
    unknown_tool,
)

__all__ = ["RESOURCE_NOT_FOUND", "UNKNOWN_TOOL", "resource_error", "resource_not_found", "unknown_tool"]
