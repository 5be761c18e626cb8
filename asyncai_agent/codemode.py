"""``run_code``: the model's one tool, over the shared sandbox, with one persistent scope per thread.

The scope holds every MCP tool of every connected server as an async
function (:func:`asyncai_watch.codemode.tool_functions`) plus the watch
built-ins (:func:`asyncai_watch.codemode.builtins`). Variables the code
assigns stay for later calls and later turns; :meth:`CodeMode.scope_note`
tells the model which exist.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import anyio

from asyncai_agent.agent import CodeOutcome
from asyncai_watch.sandbox import (
    compile_repl,
    describe_error,
    error_line,
    last_printed,
    new_scope,
    run_async,
    scope_variables,
)

__all__ = ["DEFAULT_MAX_LOOP_STEPS", "DEFAULT_MAX_RESULT", "DEFAULT_RUN_TIMEOUT", "CodeMode", "format_value"]

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

AsyncFn = Callable[..., Awaitable[Any]]


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
    """One thread's ``run_code``: a sandbox scope that persists across calls."""

    def __init__(
        self,
        functions: Mapping[str, AsyncFn],
        *,
        max_result: int = DEFAULT_MAX_RESULT,
        run_timeout: float = DEFAULT_RUN_TIMEOUT,
        max_loop_steps: int | None = DEFAULT_MAX_LOOP_STEPS,
    ) -> None:
        self.functions = dict(functions)
        self.max_result = max_result
        self.run_timeout = run_timeout
        self.scope = new_scope(self.functions, label="run_code", max_loop_steps=max_loop_steps)

    async def run(self, code: str) -> CodeOutcome:
        try:
            compiled = compile_repl(code, filename=_FILENAME, allow_await=True)
        except SyntaxError as exc:
            return CodeOutcome(self._cut(self._error(exc, code, printed="")))
        try:
            with anyio.move_on_after(self.run_timeout) as deadline:
                result = await run_async(compiled, self.scope)
        except Exception as exc:  # the model sees its error (a tool's own TimeoutError too) and can fix it
            return CodeOutcome(self._cut(self._error(exc, code, last_printed(self.scope))))
        if deadline.cancelled_caught:
            message = f"TimeoutError: run_code was cancelled after {self.run_timeout:g} s"
            return CodeOutcome(
                self._cut(self._error(TimeoutError(message), code, last_printed(self.scope), message))
            )
        parts = [result.printed.rstrip("\n")] if result.printed else []
        if result.value is not None:
            parts.append(format_value(result.value))
        return CodeOutcome(self._cut("\n".join(parts) if parts else "(no output)"))

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
