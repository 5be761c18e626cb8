"""The filter tests' `Catalog`: a parent-side catalog of functions that records each call."""

from __future__ import annotations

from typing import Any


class Catalog:
    """A parent-side catalog that records calls; ``hooks`` run instead of the default answer."""

    def __init__(self, names: set[str], hooks: dict[str, Any] | None = None) -> None:
        self.names = frozenset(names)
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.hooks = hooks or {}

    async def call(self, name: str, kwargs: dict[str, Any]) -> Any:
        self.calls.append((name, kwargs))
        if name in self.hooks:
            return await self.hooks[name](**kwargs)
        return {"name": name, "kwargs": kwargs}
