"""What is wrong with one call's arguments for a built-in tool, worded for each caller.

Pure. :func:`check_arguments` answers the first problem (unknown, missing, type, range) as an
:class:`ArgumentProblem`; ``serve`` words it in JSON terms (:meth:`ArgumentProblem.message`),
code mode in Python terms (:meth:`ArgumentProblem.python_message`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

import attrs

from asyncai_watch.core.echo import clip, quoted
from asyncai_watch.core.tool_spec import ToolSpec

__all__ = ["ArgumentProblem", "check_arguments"]

_PY_KINDS: Final = {"string": "a string", "integer": "an int", "boolean": "a bool", "null": "None"}


_MAX_NAMED: Final = 10
"""Unknown argument names an error lists (the rest are counted)."""


@attrs.frozen(kw_only=True)
class ArgumentProblem:
    """What is wrong with one call's arguments; each surface words it for its caller.

    :meth:`message` is ``serve``'s tool error (JSON words); :meth:`python_message` is code
    mode's :class:`TypeError` (Python words, ending with a call that works).
    """

    tool: ToolSpec
    kind: Literal["unknown", "missing", "type", "range"]
    names: tuple[str, ...]
    value: Any = None

    def _bounds(self) -> str:
        p = self.tool.param(self.names[0])
        bounds = [f">= {p.minimum}"] if p.minimum is not None else []
        bounds += [f"<= {p.maximum}"] if p.maximum is not None else []
        return " and ".join(bounds)

    @property
    def _names(self) -> str:
        # Names a caller made up are caller input: each capped, at most ten of them.
        shown = ", ".join(clip(name) for name in self.names[:_MAX_NAMED])
        more = len(self.names) - _MAX_NAMED
        return shown + (f" and {more:,} more" if more > 0 else "")

    def message(self) -> str:
        """``watch_start: unknown argument(s) server; it accepts name, uri, on_event``."""
        t, names = self.tool, self._names
        accepted = ", ".join(t.accepted) or "no arguments"
        if self.kind == "unknown":
            return f"{t.name}: unknown argument(s) {names}; it accepts {accepted}"
        if self.kind == "missing":
            return f"{t.name}: missing required argument(s) {names}; it accepts {accepted}"
        if self.kind == "type":
            allowed = " or ".join(t.param(names).types)
            return f"{t.name}: {names} must be {allowed}, got {quoted(self.value)}"
        return f"{t.name}: {names} must be an integer {self._bounds()}, got {self.value}"

    def python_message(self) -> str:
        """``watch_start() is missing uri=; call it as await watch_start(name="notes", ...)``."""
        t, names = self.tool, self._names
        hint = f"call it as {t.example}"
        if self.kind == "unknown":
            accepted = ", ".join(t.accepted) or "no arguments"
            return f"{t.name}() got unknown argument(s) {names}; it accepts {accepted}; {hint}"
        if self.kind == "missing":
            return f"{t.name}() is missing {', '.join(n + '=' for n in self.names)}; {hint}"
        shown = f"{type(self.value).__name__} {quoted(self.value)}"
        if self.kind == "type":
            allowed = " or ".join(_PY_KINDS.get(k, k) for k in t.param(names).types)
            return f"{t.name}(): {names} must be {allowed}, got {shown}; {hint}"
        return f"{t.name}(): {names} must be an int {self._bounds()}, got {shown}; {hint}"


def _is(kind: str, value: Any) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    return kind == "null" and value is None


def check_arguments(spec: ToolSpec, args: Mapping[str, Any]) -> ArgumentProblem | None:
    """The first thing wrong with ``args`` for ``spec`` (unknown, missing, type, range), or None."""
    unknown = tuple(sorted(set(args) - set(spec.accepted)))
    if unknown:
        return ArgumentProblem(tool=spec, kind="unknown", names=unknown)
    missing = tuple(p.name for p in spec.params if p.required and p.name not in args)
    if missing:
        return ArgumentProblem(tool=spec, kind="missing", names=missing)
    for p in spec.params:
        if p.name not in args:
            continue
        value = args[p.name]
        if not any(_is(k, value) for k in p.types):
            return ArgumentProblem(tool=spec, kind="type", names=(p.name,), value=value)
        if _is("integer", value) and (
            (p.minimum is not None and value < p.minimum) or (p.maximum is not None and value > p.maximum)
        ):
            return ArgumentProblem(tool=spec, kind="range", names=(p.name,), value=value)
    return None
