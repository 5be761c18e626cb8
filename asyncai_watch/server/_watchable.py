"""The subscriptions and declared changes of one kit-made server (:class:`Watchable`), shared by
:mod:`~asyncai_watch.server.kit` (which makes a server watchable) and the fastmcp side of it
(:mod:`~asyncai_watch.server._fastmcp`), which imports this, not the kit."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypeVar

import mcp_types as types
from mcp import InvalidUriTemplate, UriTemplate
from mcp.server import Server
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext

from asyncai_watch.server.subscriptions import SubscriptionRegistry

__all__ = ["NOTIFIED_META_KEY", "Watchable"]

NOTIFIED_META_KEY = "io.github.asyncai-watch/notified"
"""The ``_meta`` key a kit-made server puts on each listed resource and template: whether any
change of it was announced since the server started (``false``: "watchable, never notified yet":
no declared tool has changed it and nothing called :meth:`Watchable.notify` for it)."""

_F = TypeVar("_F")


class Watchable:
    """The subscriptions and the declared changes of one server (see the module docstring).

    Made by :func:`watchable`; :attr:`registry` is the server's subscription registry.
    """

    def __init__(self, name: str, changes: Mapping[str, str | Sequence[str]] | None = None) -> None:
        self.registry = SubscriptionRegistry(name)
        self._changes: dict[str, list[UriTemplate]] = {}
        self.notified: set[str] = set()
        """Every URI a change was announced for since the server started."""
        for tool, uris in (changes or {}).items():
            self._declare(tool, [uris] if isinstance(uris, str) else list(uris))

    # -- declaring and announcing changes ---------------------------------------------------------

    def _declare(self, tool: str, uris: Iterable[str]) -> None:
        parsed = []
        for uri in uris:
            if not isinstance(uri, str) or not uri:
                raise ValueError(
                    f"watchable: tool {tool!r} changes: expected URIs or URI templates, got {uri!r}"
                )
            try:
                parsed.append(UriTemplate.parse(uri))
            except InvalidUriTemplate as exc:
                raise ValueError(
                    f"watchable: tool {tool!r} changes {uri!r}, which is no RFC 6570 URI template ({exc}); "
                    "write a URI, or a template such as notes://{name}"
                ) from exc
        self._changes.setdefault(tool, []).extend(parsed)

    def changes(self, *uris: str) -> Callable[[_F], _F]:
        """Declare, above ``@mcp.tool()``, the URIs (or templates over its arguments) a tool changes."""

        def declare(tool: _F) -> _F:
            name = getattr(tool, "name", None) or getattr(tool, "__name__", None)
            if not isinstance(name, str):
                raise TypeError(f"watchable.changes: cannot tell the tool's name from {tool!r}")
            self._declare(name, uris)
            return tool

        return declare

    def changed_by(self, tool: str, arguments: Mapping[str, Any] | None) -> list[str]:
        """The URIs a call of ``tool`` with ``arguments`` changed, as declared."""
        found: dict[str, None] = {}
        args = dict(arguments or {})
        for template in self._changes.get(tool, ()):
            names = template.variable_names
            if any(name not in args for name in names):
                continue  # a template this call cannot fill: it names no resource
            found[template.expand({name: _text(args[name]) for name in names})] = None
        return list(found)

    async def notify(self, uri: str) -> int:
        """Announce that ``uri`` changed, to every listener of both eras; how many were told."""
        self.notified.add(uri)
        return await self.registry.publish(uri)

    def notify_nowait(self, uri: str) -> int:
        """:meth:`notify` from synchronous code running on the server's event loop."""
        self.notified.add(uri)
        return self.registry.publish_nowait(uri)

    async def tool_returned(self, tool: str, arguments: Mapping[str, Any] | None) -> None:
        """Notify every URI the call of ``tool`` with ``arguments`` may have changed."""
        for uri in self.changed_by(tool, arguments):
            await self.notify(uri)

    # -- wiring -----------------------------------------------------------------------------------

    def serve_on(self, server: Server[Any]) -> None:
        """Serve both eras' subscriptions on the low-level ``server``, and run with its lifespan."""
        self.add_handlers(server)
        inner: Callable[[Any], AbstractAsyncContextManager[Any]] = server.lifespan
        registry = self.registry

        @asynccontextmanager
        async def lifespan(app: Any) -> AsyncIterator[Any]:
            async with registry.running(), inner(app) as state:
                yield state

        server.lifespan = lifespan

    def add_handlers(self, server: Server[Any]) -> None:
        """The registry's ``subscriptions/listen``, ``resources/subscribe`` and ``resources/unsubscribe``
        on the low-level ``server`` (whose capabilities then say ``resources.subscribe: true``)."""
        handlers = self.registry.handlers()
        server.add_request_handler(
            "subscriptions/listen",
            types.SubscriptionsListenRequestParams,
            handlers["on_subscriptions_listen"],
        )
        server.add_request_handler(
            "resources/subscribe", types.SubscribeRequestParams, handlers["on_subscribe_resource"]
        )
        server.add_request_handler(
            "resources/unsubscribe", types.UnsubscribeRequestParams, handlers["on_unsubscribe_resource"]
        )

    def mark_listing(self, result: HandlerResult) -> HandlerResult:
        """A ``resources/list`` or ``resources/templates/list`` result (a model, or the wire dict the
        SDK's handlers return) with :data:`NOTIFIED_META_KEY` on each entry: whether a change of it
        (of a URI it matches, for a template) was announced."""
        if isinstance(result, types.ListResourcesResult | types.ListResourceTemplatesResult):
            result = result.model_dump(by_alias=True, exclude_none=True)
        if not isinstance(result, dict):
            return result
        for entry in result.get("resources", ()):
            if isinstance(entry, dict) and isinstance(entry.get("uri"), str):
                entry["_meta"] = {
                    **(entry.get("_meta") or {}),
                    NOTIFIED_META_KEY: entry["uri"] in self.notified,
                }
        for entry in result.get("resourceTemplates", ()):
            if isinstance(entry, dict) and isinstance(entry.get("uriTemplate"), str):
                entry["_meta"] = {
                    **(entry.get("_meta") or {}),
                    NOTIFIED_META_KEY: self.heard(entry["uriTemplate"]),
                }
        return result

    def heard(self, uri_template: str) -> bool:
        """Whether a change of a URI ``uri_template`` matches was announced."""
        try:
            parsed = UriTemplate.parse(uri_template)
        except InvalidUriTemplate:
            return False
        return any(parsed.match(uri) is not None for uri in self.notified)

    async def middleware(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """The ``ServerMiddleware`` for ``MCPServer.middleware``: a tool's declared changes are
        announced when it returns; listings say what was ever notified."""
        result = await call_next(ctx)
        params = ctx.params or {}
        if ctx.method == "tools/call" and isinstance(params.get("name"), str):
            arguments = params.get("arguments")
            await self.tool_returned(params["name"], arguments if isinstance(arguments, Mapping) else None)
        elif ctx.method in ("resources/list", "resources/templates/list"):
            result = self.mark_listing(result)
        return result


def _text(value: Any) -> str:
    """An argument as it goes in a URI: strings as they are, anything else as its JSON text."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
