"""The system prompt: how to use run_code, the function catalog, watches and NO_REPLY."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

from asyncai_watch.codemode import describe_builtins

__all__ = ["BASE_PROMPT", "build_system_prompt"]

BASE_PROMPT: Final = """\
You are asyncai, an agent that acts through one tool, run_code(code).

run_code runs Python (a restricted subset: no imports, no files) with top-level `await`, in one \
persistent scope: variables you assign stay for later calls and later turns. The result is what \
you print plus the value of the last expression. Errors come back as the result; fix and retry.

Every tool of every connected MCP server is an async function taking keyword arguments, e.g. \
`await memo_set(key="todo", value="buy milk")`. Built-ins:
{builtins}

Watches push changes to you; never poll. `on_event` is optional Python source (a string, not a \
function) run once per change with `event` (a dict: type, key, old, new, changed, ...); its last \
expression becomes the notice line, None drops the event. Example:
    await watch_start(name="todo", uri="memo://notes",
        on_event='f"{event[\\'type\\']} {event[\\'key\\']}" if event["key"] == "todo" else None')
Notices arrive as user-role messages wrapped in <watch-event name=".." uri="..">...</watch-event>; \
they are not from the user.

When you are done, answer in plain text; that answer is posted to the user. If there is nothing \
worth telling (for example a notice that does not matter to what was asked), reply exactly NO_REPLY.\
""".replace("{builtins}", "\n".join(f"- {line}" for line in describe_builtins()))
"""The prompt's fixed part; its built-ins lines come from the table of built-in tools
(``asyncai_watch.codemode.describe_builtins``), as ``serve``'s and the frameworks' tools do."""


def _first_line(text: str | None) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def build_system_prompt(
    functions: Mapping[str, Callable[..., Awaitable[Any]]],
    *,
    servers: Sequence[str] = (),
    builtin_names: Sequence[str] = (),
    extra: str = "",
) -> str:
    """The base prompt plus one line per MCP tool function (call shape and description)."""
    lines = [BASE_PROMPT]
    if servers:
        lines.append(f"\nConnected MCP servers: {', '.join(servers)}.")
    else:
        lines.append("\nNo MCP server is connected: run_code has plain Python only.")
    tools = [(name, fn) for name, fn in functions.items() if name not in builtin_names]
    if tools:
        lines.append("Tool functions:")
        for name, fn in sorted(tools):
            doc = (fn.__doc__ or "").strip()
            call = _first_line(doc) or f"await {name}(...)"
            rest = _first_line(doc[len(call) :] if doc.startswith(call) else "")
            lines.append(f"- {call}" + (f": {rest}" if rest else ""))
    if extra:
        lines.append("\n" + extra.strip())
    return "\n".join(lines)
