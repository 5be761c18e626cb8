"""Code mode: the model writes Python that awaits tools, run in the sandbox.

- :class:`CodeMode`: one thread's ``run_code`` tool, a sandbox scope that persists across calls;
- :func:`tool_functions`: every MCP tool of every server as an async keyword-argument function;
- :func:`builtins`: the watch API (``list_resources``, ``read_resource``, ``watch_start``,
  ``watch_stop``, ``watch_list``) as such functions.

``await watch_start(name="notes", uri="memo://notes")`` and friends return the design's dict
shapes (:mod:`asyncai_watch.shapes`). Bad calls (positional arguments, unknown or missing
keywords, wrong types) raise :class:`TypeError` naming the accepted call, so the model can
fix its next attempt. Their parameters, checks and docs come from the one table of built-in
tools (:mod:`asyncai_watch.core.tools`), which ``serve`` and the framework integrations share.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Protocol

from asyncai_watch.clock import Clock, SystemClock, move_on_at
from asyncai_watch.core.tools import WATCH_TOOLS, check_arguments, shape
from asyncai_watch.core.tools import tool as tool_spec
from asyncai_watch.filters.sandbox import (
    compile_repl,
    describe_error,
    error_line,
    last_printed,
    new_scope,
    run_async,
    scope_variables,
)
from asyncai_watch.info import ResourceInfo, WatchInfo
from asyncai_watch.runtime.tools import AsyncFn, tool_functions
from asyncai_watch.shapes import resource_dicts, started_dict, watch_dicts

__all__ = [
    "BUILTIN_NAMES",
    "DEFAULT_MAX_LOOP_STEPS",
    "DEFAULT_MAX_RESULT",
    "DEFAULT_RUN_TIMEOUT",
    "CodeMode",
    "WatchApi",
    "builtins",
    "describe_builtins",
    "format_value",
    "tool_functions",
]


class WatchApi(Protocol):
    """What the built-ins call: a :class:`~asyncai_watch.WatchManager` (or anything alike)."""

    async def list_resources(self) -> list[ResourceInfo]:
        """Every watchable resource and template of every server."""
        ...

    async def read_resource(self, uri: str) -> Any:
        """The current content of ``uri``."""
        ...

    async def watch_start(self, name: str, uri: str, on_event: str | None = None) -> WatchInfo:
        """Start watching ``uri`` as ``name``, with an optional filter."""
        ...

    async def watch_stop(self, name: str) -> bool:
        """Stop the watch ``name``; ``False`` when there is none."""
        ...

    def watch_list(self) -> list[WatchInfo]:
        """Every watch now."""
        ...


BUILTIN_NAMES: Final = tuple(spec.name for spec in WATCH_TOOLS)
EXAMPLES: Final = {spec.name: spec.example for spec in WATCH_TOOLS}
"""A ready call of each built-in, which every error about a bad call ends with."""


def check_call(fn: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
    """Raise :class:`TypeError` naming the accepted call unless ``fn(*args, **kwargs)`` fits.

    The accepted keywords, which are required and their types are the table's
    (:mod:`asyncai_watch.core.tools`), as in ``serve`` and the framework integrations.
    """
    spec = tool_spec(fn)
    if args:
        keywords = ", ".join(a + "=" for a in spec.accepted) or "none"
        raise TypeError(
            f"{fn}() takes keyword arguments only ({keywords}), got {len(args)} positional; "
            f"call it as {spec.example}"
        )
    problem = check_arguments(spec, kwargs)
    if problem is not None:
        raise TypeError(problem.python_message())


def describe_builtins() -> list[str]:
    """One line per built-in, its call, result and summary, e.g.
    ``await watch_stop(name=...) -> bool: Stop and forget a watch.`` (the agent's prompt lists them)."""
    return [f"{spec.call} -> {shape(spec.result)}: {spec.summary}" for spec in WATCH_TOOLS]


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
        spec = tool_spec(name)
        fn.__name__ = fn.__qualname__ = name
        fn.__doc__ = f"{spec.call} -> {spec.returns}\n\n{spec.description}"
    return fns


# -- run_code ----------------------------------------------------------------------------------

DEFAULT_MAX_RESULT: Final = 20_000
"""Characters of tool result the model sees; the rest is cut with a note."""
DEFAULT_RUN_TIMEOUT: Final = 300.0
"""Seconds one run_code may wait (on tools, reads, ...) before it is cancelled."""
DEFAULT_MAX_LOOP_STEPS: Final = 5_000_000
"""Loop iterations one run_code may make (about a second of a tight loop): it shares the agent's
event loop, where a loop that never awaits would freeze every watch; the run_timeout cannot
interrupt code that never awaits."""
_FILENAME: Final = "<run_code>"
_MAX_NOTE_VARS: Final = 30


def format_value(value: Any) -> str:
    """A last-expression value as the model sees it: text as is, anything else as its repr."""
    if isinstance(value, str):
        return value
    return repr(value)


def _size(value: Any) -> str:
    if isinstance(value, dict):
        return f"dict, {len(value)} keys"
    if isinstance(value, list | tuple | set | frozenset):
        return f"{type(value).__name__}, {len(value)} items"
    if isinstance(value, str):
        return f"str, {len(value)} chars"
    return type(value).__name__


class CodeMode:
    """One thread's ``run_code``: model-written Python in the sandbox, with a scope that persists.

    ``functions`` are what the code may await: typically :func:`tool_functions` (every MCP
    tool of every server) plus :func:`builtins` (the watch API). :meth:`run` returns what the
    model sees as the tool result: printed output and the last expression's value, or the
    error with the line it points at; it never raises for the code's own faults.
    """

    def __init__(
        self,
        functions: Mapping[str, AsyncFn],
        *,
        max_result: int = DEFAULT_MAX_RESULT,
        run_timeout: float = DEFAULT_RUN_TIMEOUT,
        max_loop_steps: int | None = DEFAULT_MAX_LOOP_STEPS,
        clock: Clock | None = None,
    ) -> None:
        self.functions = dict(functions)
        self._clock: Clock = clock if clock is not None else SystemClock()
        self.max_result = max_result
        self.run_timeout = run_timeout
        self.scope = new_scope(self.functions, label="run_code", max_loop_steps=max_loop_steps)

    async def run(self, code: str) -> str:
        """Run the model's ``code`` and return what it printed and its last value, or its error."""
        try:
            compiled = compile_repl(code, filename=_FILENAME, allow_await=True)
        except SyntaxError as exc:
            return self._cut(self._error(exc, code, printed=""))
        try:
            async with move_on_at(self._clock, self._clock.now() + self.run_timeout) as deadline:
                result = await run_async(compiled, self.scope)
        except Exception as exc:  # the model sees its error (a tool's own TimeoutError too) and can fix it
            return self._cut(self._error(exc, code, last_printed(self.scope)))
        if deadline.cancelled_caught:
            message = f"TimeoutError: run_code was cancelled after {self.run_timeout:g} s"
            return self._cut(self._error(TimeoutError(message), code, last_printed(self.scope), message))
        parts = [result.printed.rstrip("\n")] if result.printed else []
        if result.value is not None:
            parts.append(format_value(result.value))
        return self._cut("\n".join(parts) if parts else "(no output)")

    def _error(self, exc: BaseException, code: str, printed: str, message: str | None = None) -> str:
        # Concise: printed output so far, one error line, and the source line it points at.
        lines = [printed.rstrip("\n")] if printed else []
        lines.append("Error: " + (message or describe_error(exc, _FILENAME, self.scope)))
        line = error_line(exc, _FILENAME)
        src = code.splitlines()
        if line is not None and 0 < line <= len(src):
            lines.append(f"  line {line}: {src[line - 1].strip()}")
        return "\n".join(lines)

    def _cut(self, text: str) -> str:
        if len(text) <= self.max_result:
            return text
        more = len(text) - self.max_result
        return (
            text[: self.max_result]
            + f"\n[truncated: {more} more characters. Keep big values in a variable and print a slice or a summary.]"
        )

    def variables(self) -> dict[str, str]:
        """The variables the model's code defined: name -> short description."""
        return {name: _size(self.scope[name]) for name in scope_variables(self.scope)}

    def scope_note(self) -> str:
        """One line naming the variables the model's code has defined so far."""
        found = self.variables()
        if not found:
            return "run_code scope: no variables yet (assign results to reuse them in later turns)."
        shown = [f"{name} ({desc})" for name, desc in list(found.items())[:_MAX_NOTE_VARS]]
        extra = len(found) - len(shown)
        tail = f", +{extra} more" if extra > 0 else ""
        return (
            "run_code scope: variables from earlier calls, reuse them instead of fetching again: "
            + ", ".join(shown)
            + tail
            + "."
        )
