"""The code-mode built-ins: the watch API as keyword-argument functions for model-written code.

``await watch_start(name="notes", uri="memo://notes")`` and friends return the design's dict
shapes (:mod:`asyncai_watch.shapes`). Bad calls (positional arguments, unknown or missing
keywords, wrong types) raise :class:`TypeError` naming the accepted call, so the model can
fix its next attempt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Protocol

from asyncai_watch.info import ResourceInfo, WatchInfo
from asyncai_watch.shapes import resource_dicts, started_dict, watch_dicts
from asyncai_watch.tools import AsyncFn

__all__ = ["BUILTIN_NAMES", "WatchApi", "builtins"]


class WatchApi(Protocol):
    """What the built-ins call: a :class:`~asyncai_watch.WatchManager` (or anything alike)."""

    async def list_resources(self) -> list[ResourceInfo]: ...

    async def read_resource(self, uri: str) -> Any: ...

    async def watch_start(self, name: str, uri: str, on_event: str | None = None) -> WatchInfo: ...

    async def watch_stop(self, name: str) -> bool: ...

    def watch_list(self) -> list[WatchInfo]: ...


_SIGNATURES: Final = {
    "list_resources": ((), ()),
    "read_resource": (("uri",), ()),
    "watch_start": (("name", "uri"), ("on_event",)),
    "watch_stop": (("name",), ()),
    "watch_list": ((), ()),
}
EXAMPLES: Final = {
    "list_resources": "await list_resources()",
    "read_resource": 'await read_resource(uri="memo://notes")',
    "watch_start": 'await watch_start(name="notes", uri="memo://notes", on_event=None)',
    "watch_stop": 'await watch_stop(name="notes")',
    "watch_list": "await watch_list()",
}
BUILTIN_NAMES: Final = tuple(_SIGNATURES)


def check_call(fn: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
    """Raise :class:`TypeError` naming the accepted call unless ``fn(*args, **kwargs)`` fits."""
    required, optional = _SIGNATURES[fn]
    accepted = (*required, *optional)
    hint = f"call it as {EXAMPLES[fn]}"
    if args:
        raise TypeError(
            f"{fn}() takes keyword arguments only ({', '.join(a + '=' for a in accepted) or 'none'}), "
            f"got {len(args)} positional; {hint}"
        )
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        raise TypeError(
            f"{fn}() got unknown argument(s) {', '.join(unknown)}; it accepts "
            f"{', '.join(accepted) or 'no arguments'}; {hint}"
        )
    missing = [a for a in required if a not in kwargs]
    if missing:
        raise TypeError(f"{fn}() is missing {', '.join(a + '=' for a in missing)}; {hint}")
    for a in ("name", "uri"):
        if a in kwargs and not isinstance(kwargs[a], str):
            raise TypeError(
                f"{fn}(): {a} must be a string, got {type(kwargs[a]).__name__} {kwargs[a]!r}; {hint}"
            )


def builtins(manager: WatchApi) -> dict[str, AsyncFn]:
    """``list_resources``, ``read_resource``, ``watch_start``, ``watch_stop``, ``watch_list``."""

    async def list_resources(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        check_call("list_resources", args, kwargs)
        return resource_dicts(await manager.list_resources())

    async def read_resource(*args: Any, **kwargs: Any) -> Any:
        check_call("read_resource", args, kwargs)
        return await manager.read_resource(kwargs["uri"])

    async def watch_start(*args: Any, **kwargs: Any) -> dict[str, Any]:
        check_call("watch_start", args, kwargs)
        return started_dict(await manager.watch_start(kwargs["name"], kwargs["uri"], kwargs.get("on_event")))

    async def watch_stop(*args: Any, **kwargs: Any) -> bool:
        check_call("watch_stop", args, kwargs)
        return await manager.watch_stop(kwargs["name"])

    async def watch_list(*args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        check_call("watch_list", args, kwargs)
        return watch_dicts(manager.watch_list())

    fns: dict[str, AsyncFn] = {
        "list_resources": list_resources,
        "read_resource": read_resource,
        "watch_start": watch_start,
        "watch_stop": watch_stop,
        "watch_list": watch_list,
    }
    for name, fn in fns.items():
        fn.__name__ = fn.__qualname__ = name
        fn.__doc__ = EXAMPLES[name]
    return fns
