"""The watch built-ins as typed async functions, the shape every framework's tool wrapper takes.

Each framework builds its tool schema from a signature and a docstring (PydanticAI's
``FunctionToolset``, the Agents SDK's ``function_tool``, LangChain's ``StructuredTool``), so the
five built-ins are written out here once, with real parameters. Each calls the code-mode
built-in (:func:`asyncai_watch.codemode.builtins`), so the argument checks, the manager's
sandboxed ``on_event`` filter and the design's dict shapes (:mod:`asyncai_watch.shapes`) are
the same as in code mode. Errors the model can act on (:data:`TOOL_ERRORS`) are turned into
each framework's tool error by its module, with :func:`tool_error_text` as the message.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

from asyncai_watch.codemode import WatchApi, builtins
from asyncai_watch.errors import WatchError
from asyncai_watch.runtime.subscriptions import describe

__all__ = ["TOOL_ERRORS", "tool_error_text", "watch_functions"]

TOOL_ERRORS: Final = (WatchError, TypeError)
"""What a tool reports to the model as a failed call (a bad URI, a duplicate name, a bad filter,
a bad argument); anything else is a bug or an outage and propagates as the framework decides."""


def tool_error_text(exc: BaseException) -> str:
    """The message the model sees for a failed call: ``Type: message``, the library's wording."""
    return describe(exc)


def watch_functions(manager: WatchApi) -> list[Callable[..., Awaitable[Any]]]:
    """``list_resources``, ``read_resource``, ``watch_start``, ``watch_stop``, ``watch_list`` over
    ``manager``, as typed async functions with docstrings a framework turns into tool schemas."""
    fns = builtins(manager)

    async def list_resources() -> list[dict[str, Any]]:
        """List the resources and URI templates of the connected MCP servers.

        Each entry has uri (or template with an example URI), name, description, mime_type,
        server, and subscribable (true when watch_start can watch it).
        """
        result: list[dict[str, Any]] = await fns["list_resources"]()
        return result

    async def read_resource(uri: str) -> Any:
        """Read a resource once and return its current content (parsed JSON, else text).

        Args:
            uri: The resource URI, e.g. memo://notes.
        """
        return await fns["read_resource"](uri=uri)

    async def watch_start(name: str, uri: str, on_event: str | None = None) -> dict[str, Any]:
        """Start watching a resource; each later change arrives as a <watch-event> message.

        Returns {"name", "uri", "shape"}. The watch keeps running across turns until watch_stop.

        Args:
            name: A name for the watch (letters, digits, _ . -), used by watch_stop.
            uri: The resource URI to watch, e.g. memo://notes (see list_resources).
            on_event: Optional Python filter source, run once per event with `event` in
                scope; its last expression is the notice line (None drops the event). The
                filter can only read (read_resource, list_resources, read-only tools).
        """
        result: dict[str, Any] = await fns["watch_start"](name=name, uri=uri, on_event=on_event)
        return result

    async def watch_stop(name: str) -> bool:
        """Stop a watch; returns false when there is no watch by that name.

        Args:
            name: The watch's name, as given to watch_start.
        """
        result: bool = await fns["watch_stop"](name=name)
        return result

    async def watch_list() -> list[dict[str, Any]]:
        """List the watches: name, uri, shape, and the events and notices each has seen."""
        result: list[dict[str, Any]] = await fns["watch_list"]()
        return result

    return [list_resources, read_resource, watch_start, watch_stop, watch_list]
