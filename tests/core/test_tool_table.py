"""The one table of built-in watch tools (``asyncai_watch.core.tools``) and everything made from it.

Each surface is read back the way its consumer reads it, not from the table: ``serve``'s
``tools/list`` through an MCP client, code mode's built-ins through their docstrings and the
calls they refuse, each framework's tool schema as that framework derives it from the generated
function, and the agent's prompt by parsing its lines. All four must say what the table says.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.utils.function_calling import convert_to_openai_tool
from mcp import Client

from asyncai_agent.prompt import build_system_prompt
from asyncai_watch.codemode import builtins, check_call
from asyncai_watch.core.limits import Limits
from asyncai_watch.core.notice import SOURCE_WATCH, Notice
from asyncai_watch.core.tools import BRIDGE_TOOLS, WATCH_TOOLS, ToolSpec, check_arguments, tool
from asyncai_watch.integrations.langgraph import watch_tools as langchain_tools
from asyncai_watch.integrations.openai_agents import watch_tools as agents_tools
from asyncai_watch.integrations.pydantic_ai import watch_toolset
from asyncai_watch.mcp.source import ListedResource
from asyncai_watch.runtime.manager import WatchManager
from asyncai_watch.serve.bridge import Bridge
from asyncai_watch.serve.channel import instructions
from asyncai_watch.serve.hub import Hub
from asyncai_watch.serve.ring import NoticeRing
from asyncai_watch.serve.server import ToolInputError, _check_arguments, build_server
from asyncai_watch.testing import FakeClock, FakeSource
from tests.support.managers import NOTES, memo_fake

pytestmark = pytest.mark.anyio

Params = dict[str, tuple[frozenset[str] | None, bool]]
"""Parameter name -> (JSON types it accepts, or None where the surface does not say; required)."""

# One value of each JSON type a parameter can have, to probe what a surface accepts.
PROBES: Mapping[str, Any] = {"string": "x", "integer": 3, "boolean": True, "null": None}


def table_params(spec: ToolSpec) -> Params:
    return {p.name: (frozenset(p.types), p.required) for p in spec.params}


def schema_params(schema: Mapping[str, Any]) -> Params:
    """What a JSON Schema of arguments says (types from ``type`` or an ``anyOf`` of types)."""
    required = set(schema.get("required", ()))
    out: Params = {}
    for name, prop in schema.get("properties", {}).items():
        kinds = prop.get("type", [s.get("type") for s in prop.get("anyOf", ())])
        out[name] = (frozenset([kinds] if isinstance(kinds, str) else kinds), name in required)
    return out


def call_params(call: str) -> Params:
    """``await watch_start(name=..., on_event=None)`` -> name required, on_event optional."""
    expr = ast.parse(call.strip()).body[0]
    assert isinstance(expr, ast.Expr)
    assert isinstance(expr.value, ast.Await)
    node = expr.value.value
    assert isinstance(node, ast.Call)
    assert not node.args
    return {
        k.arg or "": (None, isinstance(k.value, ast.Constant) and k.value.value is Ellipsis)
        for k in node.keywords
    }


def without_types(params: Params) -> Params:
    return {name: (None, required) for name, (_, required) in params.items()}


def canonical(schema: Any) -> Any:
    """A framework's (pydantic-made) schema in the table's spelling: no titles, an ``anyOf`` of
    plain types as a type list, no empty ``required``."""
    if isinstance(schema, list):
        return [canonical(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: canonical(v) for k, v in schema.items() if k != "title"}
    options = out.get("anyOf")
    if options and all(set(o) == {"type"} and isinstance(o["type"], str) for o in options):
        del out["anyOf"]
        out["type"] = [o["type"] for o in options]
    if out.get("required") == []:
        del out["required"]
    return out


def strict(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The table's schema as the Agents SDK's strict mode sends it: every property required
    (an optional one stays nullable), so none has a default."""
    props = {k: {kk: vv for kk, vv in v.items() if kk != "default"} for k, v in schema["properties"].items()}
    out = {**schema, "properties": props}
    if props:
        out["required"] = list(props)
    return out


def without_additional(schema: Mapping[str, Any]) -> dict[str, Any]:
    """LangChain's ``StructuredTool`` leaves ``additionalProperties`` out (its model ignores extras)."""
    return {k: v for k, v in schema.items() if k != "additionalProperties"}


@asynccontextmanager
async def bridge(manager: WatchManager, ring: NoticeRing) -> AsyncIterator[Client]:
    server = build_server(Bridge.over(manager, ring, Hub(exclusive=False)), instructions="test")
    async with Client(server) as client:
        yield client


def probe_types(spec: ToolSpec, param: str) -> frozenset[str]:
    """The JSON types code mode lets through for ``param`` (the rest of the call kept valid)."""
    base = {p.name: p.example for p in spec.params if p.required}
    accepted = set()
    for kind, value in PROBES.items():
        problem = None
        try:
            check_call(spec.name, (), {**base, param: value})
        except TypeError as exc:
            problem = str(exc)
        if problem is None:
            accepted.add(kind)
        else:
            assert f"{param} must be" in problem, problem
    return frozenset(accepted)


async def test_the_four_surfaces_say_what_the_table_says() -> None:
    async with WatchManager([memo_fake()], clock=FakeClock()) as manager:
        fns = builtins(manager)
        async with bridge(manager, NoticeRing(10)) as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
    prompt = build_system_prompt(fns, servers=["memo"], builtin_names=list(fns))
    prompt_lines = {
        line.split("(")[0].removeprefix("- await "): line
        for line in prompt.splitlines()
        if line.startswith("- await ")
    }
    frameworks = {
        "pydantic-ai": {
            name: (t.tool_def.parameters_json_schema, t.tool_def.description)
            for name, t in watch_toolset(manager).tools.items()
        },
        "openai-agents": {
            t.name: (t.params_json_schema, t.description)  # type: ignore[union-attr]
            for t in agents_tools(manager)
        },
        "langgraph": {
            (f := convert_to_openai_tool(t)["function"])["name"]: (f["parameters"], f["description"])
            for t in langchain_tools(manager)
        },
    }

    # The same tools everywhere; serve adds watch_notices.
    names = [t.name for t in WATCH_TOOLS]
    assert list(listed) == [t.name for t in BRIDGE_TOOLS]
    assert list(fns) == names
    assert list(prompt_lines) == names
    for derived in frameworks.values():
        assert list(derived) == names

    for spec in BRIDGE_TOOLS:
        listed_tool = listed[spec.name]
        assert schema_params(listed_tool.input_schema) == table_params(spec)
        assert listed_tool.input_schema.get("additionalProperties") is False
        assert listed_tool.description == spec.full_description(bridge=True)
        assert listed_tool.description.startswith(spec.description)
        assert listed_tool.output_schema == spec.structured_schema
        assert listed_tool.annotations is not None
        assert listed_tool.annotations.read_only_hint is spec.read_only

    for spec in WATCH_TOOLS:
        # Code mode: the call its docstring shows, the types its check lets through, its description.
        doc = fns[spec.name].__doc__ or ""
        call, _, description = doc.partition("\n\n")
        code_params = call_params(call.split(" -> ")[0])
        assert {n: (probe_types(spec, n), r) for n, (_, r) in code_params.items()} == table_params(spec)
        assert description == spec.description
        # The prompt: the call it shows and the tool's summary.
        line = prompt_lines[spec.name]
        assert call_params(line.removeprefix("- ").split(" -> ")[0]) == without_types(table_params(spec))
        assert line.endswith(": " + spec.summary)
        # Each framework, as it derives the tool from the generated function.
        for framework, derived in frameworks.items():
            schema, text = derived[spec.name]
            got = schema_params(canonical(schema))
            if framework == "openai-agents":  # strict mode: optional parameters are required but nullable
                got = {n: (t, r and "null" not in (t or ())) for n, (t, r) in got.items()}
            assert got == table_params(spec), framework
            assert text == spec.full_description(), framework


async def test_each_framework_derives_the_tables_whole_schema() -> None:
    """Descriptions of parameters, defaults, ``additionalProperties``: all of it, up to what each
    framework is known to spell its own way (titles; strict mode; LangChain's open models)."""
    async with WatchManager([memo_fake()], clock=FakeClock()) as manager:
        pydantic_ai = {n: t.tool_def.parameters_json_schema for n, t in watch_toolset(manager).tools.items()}
        agents = {t.name: t.params_json_schema for t in agents_tools(manager)}  # type: ignore[union-attr]
        langchain = {
            (f := convert_to_openai_tool(t)["function"])["name"]: f["parameters"]
            for t in langchain_tools(manager)
        }
    for spec in WATCH_TOOLS:
        assert canonical(pydantic_ai[spec.name]) == spec.input_schema
        assert canonical(agents[spec.name]) == strict(spec.input_schema)
        assert canonical(langchain[spec.name]) == without_additional(spec.input_schema)


async def test_what_the_tools_answer_fits_the_tables_result_schemas() -> None:
    fake = memo_fake()
    other = FakeSource("other", resources=[ListedResource(uri="other://doomed", name="doomed")])
    other.set("other://doomed", {"a": 1})
    limits = Limits(debounce_quiet=0, debounce_max_wait=0, resubscribe_attempts=0)
    ring = NoticeRing(1)
    # "doomed" is on a server of its own: the listen it loses holds no other watch's URI.
    async with WatchManager([fake, other], limits=limits, clock=FakeClock()) as manager:
        fns = builtins(manager)
        results: dict[str, Any] = {
            "watch_start": await fns["watch_start"](name="notes", uri=NOTES, on_event=None),
            "list_resources": await fns["list_resources"](),
            "read_resource": await fns["read_resource"](uri=NOTES),
            "watch_stop": await fns["watch_stop"](name="nosuch"),
        }
        await fns["watch_start"](name="doomed", uri="other://doomed")
        other.lose("other://doomed")  # no resubscribe attempts: the watch fails and says so
        with anyio.fail_after(30):
            await manager.notices.receive()  # the failure notice
        results["watch_list"] = await fns["watch_list"]()
        assert {w["name"]: w.get("failed") for w in results["watch_list"]} == {"notes": None, "doomed": True}
        for name, value in results.items():
            jsonschema.validate(value, tool(name).result)

        # serve: the client checks structured content against each tool's outputSchema itself; the
        # text is the result (watch_stop's is its structured content). Two notices in a ring of one
        # make watch_notices report a gap.
        for text in ("ADDED a", "REMOVED a"):
            ring.add(
                Notice(text=text, source=SOURCE_WATCH, meta={"name": "notes", "uri": NOTES}), "2026-01-01"
            )
        calls: dict[str, dict[str, Any]] = {
            "list_resources": {},
            "read_resource": {"uri": NOTES},
            "watch_list": {},
            "watch_stop": {"name": "doomed"},
            "watch_start": {"name": "again", "uri": NOTES},
            "watch_notices": {"after_id": 0},
        }
        async with bridge(manager, ring) as client:
            await client.list_tools()
            for name, args in calls.items():
                spec = tool(name)
                result = await client.call_tool(name, args)
                assert not result.is_error, result
                text = json.loads(getattr(result.content[0], "text", ""))
                jsonschema.validate(result.structured_content, spec.structured_schema)
                jsonschema.validate(text, spec.structured_schema if spec.text_is_structured else spec.result)
                if name == "watch_notices":
                    assert text["gap"]["lost"] == 1
                    assert [n["text"] for n in text["notices"]] == ["REMOVED a"]


JSON_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-5, 2000), st.text(max_size=3))


@given(
    spec=st.sampled_from(BRIDGE_TOOLS),
    args=st.dictionaries(
        st.sampled_from(["name", "uri", "on_event", "after_id", "limit", "server"]), JSON_VALUES, max_size=4
    ),
)
def test_the_argument_check_is_the_input_schema(spec: ToolSpec, args: dict[str, Any]) -> None:
    """What ``serve`` and code mode refuse is exactly what a JSON Schema validator refuses."""
    valid = jsonschema.Draft202012Validator(spec.input_schema).is_valid(args)
    problem = check_arguments(spec, args)
    assert (problem is None) == valid, (args, problem)
    if problem is not None:
        with pytest.raises(ToolInputError, match=f"^{spec.name}: "):
            _check_arguments(spec.name, args)
        if spec in WATCH_TOOLS:
            with pytest.raises(TypeError, match=re.escape(f"call it as {spec.example}")):
                check_call(spec.name, (), args)
    else:
        _check_arguments(spec.name, args)
        if spec in WATCH_TOOLS:
            check_call(spec.name, (), args)


def test_error_texts_name_what_is_accepted() -> None:
    start = tool("watch_start")
    assert (problem := check_arguments(start, {"name": "n", "uri": "u", "on_event": 7})) is not None
    assert problem.message() == "watch_start: on_event must be string or null, got 7"
    assert problem.python_message() == (
        "watch_start(): on_event must be a string or None, got int 7; "
        'call it as await watch_start(name="notes", uri="memo://notes", on_event=None)'
    )
    notices = tool("watch_notices")
    assert (problem := check_arguments(notices, {"limit": 5000})) is not None
    assert problem.message() == "watch_notices: limit must be an integer >= 1 and <= 1000, got 5000"
    with pytest.raises(
        TypeError, match=r"^watch_stop\(\) takes keyword arguments only \(name=\), got 1 positional"
    ):
        check_call("watch_stop", ("notes",), {})


def test_serves_instructions_name_every_tool_it_offers() -> None:
    text = instructions(["memo"], {"max_watches": 5})
    for spec in BRIDGE_TOOLS:
        assert f"{spec.name}(" in text, spec.name


def test_the_table_is_pure() -> None:
    """The table loads no SDK and no framework: ``asyncai_watch.core`` stays importable without them."""
    import subprocess
    import sys

    code = (
        "import sys, asyncai_watch.core.tools; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'mcp', 'mcp_types', 'pydantic', 'pydantic_ai', 'agents', 'langchain_core', 'httpx'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
