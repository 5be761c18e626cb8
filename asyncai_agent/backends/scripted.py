"""``scripted:FILE``: a deterministic model that replays a script of ``run_code`` calls and replies.

It stands in for the model only. Its ``run_code`` calls go through the real
tool path, so the code really runs against the connected servers, and the
script can check what came back (``expect``) instead of assuming it.

Script format (JSON)::

    {
      "description": "optional text",
      "turns": [
        {
          "expect": "watch my notes",          # optional: the turn's new user-role text must contain this
          "steps": [
            {"run_code": "await watch_start(name='notes', uri='memo://notes')",
             "say": "optional text sent with the call"},
            {"expect": "'shape': 'state'",      # optional: the previous run_code result must contain this
             "reply": "Watching. Result: {result}"}   # {result} = the previous run_code result
          ]
        }
      ]
    }

One turn is one run: each model request takes the next step; a turn ends at
its ``reply`` step (always the last step). A reply of ``NO_REPLY`` exercises
suppression. When the agent starts a run the script has no turn for, or an
``expect`` does not match, the request fails with an error naming the turn,
so a diverging replay is reported, never papered over.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from asyncai_agent.backends.base import BackendError
from asyncai_agent.thread import Message, ToolCall, ToolSpec

__all__ = ["Script", "ScriptedBackend", "Step", "Turn", "load_script", "parse_script"]


@attrs.frozen(kw_only=True)
class Step:
    run_code: str | None = None
    reply: str | None = None
    say: str = ""
    expect: str | None = None


@attrs.frozen(kw_only=True)
class Turn:
    steps: tuple[Step, ...]
    expect: str | None = None


@attrs.frozen(kw_only=True)
class Script:
    turns: tuple[Turn, ...]
    description: str = ""


def _opt_str(obj: dict[str, Any], key: str, where: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{where}.{key} must be a string, got {type(value).__name__}")
    return value


def parse_script(data: Any, *, origin: str = "script") -> Script:
    """Validate a decoded script; errors name the offending path (``turns[1].steps[0]``)."""
    if not isinstance(data, dict) or not isinstance(data.get("turns"), list):
        raise ValueError(f'{origin}: expected a JSON object with a "turns" list')
    turns: list[Turn] = []
    for ti, raw_turn in enumerate(data["turns"]):
        where = f"{origin}: turns[{ti}]"
        if (
            not isinstance(raw_turn, dict)
            or not isinstance(raw_turn.get("steps"), list)
            or not raw_turn["steps"]
        ):
            raise ValueError(f'{where} must be an object with a non-empty "steps" list')
        steps: list[Step] = []
        for si, raw in enumerate(raw_turn["steps"]):
            swhere = f"{where}.steps[{si}]"
            if not isinstance(raw, dict):
                raise ValueError(f"{swhere} must be an object")
            unknown = set(raw) - {"run_code", "reply", "say", "expect"}
            if unknown:
                raise ValueError(
                    f"{swhere}: unknown keys {sorted(unknown)}; accepted: run_code, reply, say, expect"
                )
            run_code, reply = _opt_str(raw, "run_code", swhere), _opt_str(raw, "reply", swhere)
            if (run_code is None) == (reply is None):
                raise ValueError(f'{swhere} needs exactly one of "run_code" or "reply"')
            last = si == len(raw_turn["steps"]) - 1
            if reply is not None and not last:
                raise ValueError(f"{swhere}: a reply ends the turn, so it must be the last step")
            if run_code is not None and last:
                raise ValueError(f"{swhere}: a turn must end with a reply step")
            steps.append(
                Step(
                    run_code=run_code,
                    reply=reply,
                    say=_opt_str(raw, "say", swhere) or "",
                    expect=_opt_str(raw, "expect", swhere),
                )
            )
        turns.append(Turn(steps=tuple(steps), expect=_opt_str(raw_turn, "expect", where)))
    description = data.get("description", "")
    return Script(turns=tuple(turns), description=description if isinstance(description, str) else "")


def load_script(path: Path) -> Script:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BackendError(f"scripted:{path}: cannot read the script: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise BackendError(f"scripted:{path}: not valid JSON: {exc}") from exc
    try:
        return parse_script(data, origin=f"scripted:{path}")
    except ValueError as exc:
        raise BackendError(str(exc)) from exc


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


class ScriptedBackend:
    def __init__(self, script: Script, *, label: str = "script") -> None:
        self._script = script
        self._label = label
        self._turn = -1
        self._step = 0

    @classmethod
    def from_file(cls, path: Path) -> ScriptedBackend:
        return cls(load_script(path), label=str(path))

    @property
    def name(self) -> str:
        return f"scripted:{self._label}"

    @property
    def turns_used(self) -> int:
        return self._turn + 1

    @property
    def finished(self) -> bool:
        """True when every turn of the script has been replayed to its reply."""
        return self._turn == len(self._script.turns) - 1 and self._step == 0

    async def complete(
        self, *, system: str, messages: Sequence[Message], tools: Sequence[ToolSpec]
    ) -> Message:
        last = messages[-1] if messages else None
        if last is None or last.role != "tool":
            self._start_turn(messages)
        turn = self._script.turns[self._turn]
        step = turn.steps[self._step]
        where = f"{self.name}: turns[{self._turn}].steps[{self._step}]"
        previous = last.text if last is not None and last.role == "tool" else ""
        if step.expect is not None and step.expect not in previous:
            raise BackendError(
                f"{where} expected the run_code result to contain {step.expect!r}, got: {_short(previous)!r}"
            )
        if step.run_code is not None:
            self._step += 1
            call = ToolCall(
                id=f"call_{self._turn}_{self._step}", name="run_code", arguments={"code": step.run_code}
            )
            return Message(role="assistant", text=step.say, tool_calls=(call,))
        assert step.reply is not None  # parse_script guarantees one of the two
        self._step = 0
        return Message(role="assistant", text=step.reply.replace("{result}", previous))

    def _start_turn(self, messages: Sequence[Message]) -> None:
        # The turn's new input: user-role messages since the last assistant message.
        new: list[str] = []
        for m in reversed(messages):
            if m.role != "user":
                break
            new.append(m.text)
        seen = "\n".join(reversed(new))
        if self._turn + 1 >= len(self._script.turns):
            raise BackendError(
                f"{self.name}: the script has no turn left (all {len(self._script.turns)} used); "
                f"the agent started another run for: {_short(seen)!r}"
            )
        self._turn += 1
        self._step = 0
        expect = self._script.turns[self._turn].expect
        if expect is not None and expect not in seen:
            raise BackendError(
                f"{self.name}: turns[{self._turn}] expected new input containing {expect!r}, got: {_short(seen)!r}"
            )

    async def aclose(self) -> None:
        return None
