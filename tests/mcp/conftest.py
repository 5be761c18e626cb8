"""The MCP client tests' fixtures: ``peers``, the real peers of other SDKs (module-scoped)."""

from __future__ import annotations

from tests.support.real_peers import peers  # noqa: F401  (fixture)
