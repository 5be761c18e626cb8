"""Model backends: request shapes against a local fake HTTP endpoint, and the scripted replay."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from asyncai_agent.agent import RUN_CODE_TOOL
from asyncai_agent.backends import make_backend
from asyncai_agent.backends.anthropic import AnthropicBackend
from asyncai_agent.backends.base import BackendError
from asyncai_agent.backends.openai import OpenAIBackend
from asyncai_agent.backends.scripted import ScriptedBackend, parse_script
from asyncai_agent.thread import Message, ToolCall

THREAD = [
    Message(role="user", text="watch the notes"),
    Message(
        role="assistant",
        text="Starting a watch.",
        tool_calls=(ToolCall(id="call_1", name="run_code", arguments={"code": "await watch_list()"}),),
    ),
    Message(role="tool", text="[]", tool_call_id="call_1"),
    Message(role="user", text='<watch-event name="n" uri="memo://notes">\nADDED a\n</watch-event>'),
]


@asynccontextmanager
async def fake_endpoint(
    responses: list[tuple[int, dict[str, Any]]],
) -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """A loopback HTTP server answering POSTs with ``responses`` in order, recording each request."""
    seen: list[dict[str, Any]] = []

    async def handler(request: Request) -> JSONResponse:
        seen.append(
            {"path": request.url.path, "headers": dict(request.headers), "body": await request.json()}
        )
        status, payload = responses.pop(0)
        return JSONResponse(payload, status_code=status)

    app = Starlette(routes=[Route("/{path:path}", handler, methods=["POST"])])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    # Listening before uvicorn starts: early connections wait in the backlog, no readiness probe needed.
    sock.listen(16)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve, [sock])
        try:
            yield f"http://127.0.0.1:{port}", seen
        finally:
            tg.cancel_scope.cancel()
    sock.close()


def _openai_completion(message: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "local-model",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
    }


@pytest.mark.anyio
async def test_openai_request_shape_and_tool_call_parsing() -> None:
    answer = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "run_code", "arguments": json.dumps({"code": "print(1)"})},
            }
        ],
    }
    async with fake_endpoint([(200, _openai_completion(answer))]) as (url, seen):
        backend = OpenAIBackend("local-model", base_url=f"{url}/v1", api_key="sk-test")
        try:
            reply = await backend.complete(system="SYSTEM", messages=THREAD, tools=[RUN_CODE_TOOL])
        finally:
            await backend.aclose()
    assert reply == Message(
        role="assistant",
        text="",
        tool_calls=(ToolCall(id="call_2", name="run_code", arguments={"code": "print(1)"}),),
    )
    (req,) = seen
    assert req["path"] == "/v1/chat/completions"
    assert req["headers"]["authorization"] == "Bearer sk-test"
    body = req["body"]
    assert body["model"] == "local-model"
    assert body["max_tokens"] == 8192
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "run_code",
                "description": RUN_CODE_TOOL.description,
                "parameters": dict(RUN_CODE_TOOL.parameters),
            },
        }
    ]
    assert body["messages"] == [
        {"role": "system", "content": "SYSTEM"},
        {"role": "user", "content": "watch the notes"},
        {
            "role": "assistant",
            "content": "Starting a watch.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "run_code", "arguments": '{"code": "await watch_list()"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "[]"},
        {"role": "user", "content": THREAD[3].text},
    ]
    # The 600 s timeout travels with the request (the SDK announces it).
    assert float(req["headers"]["x-stainless-read-timeout"]) == 600


@pytest.mark.anyio
async def test_openai_text_reply_and_keyless_local_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    answer = {"role": "assistant", "content": "Done."}
    async with fake_endpoint([(200, _openai_completion(answer))]) as (url, seen):
        backend = make_backend("openai:qwen", base_url=f"{url}/v1")
        try:
            reply = await backend.complete(system="S", messages=THREAD[:1], tools=[])
        finally:
            await backend.aclose()
    assert reply == Message(role="assistant", text="Done.")
    assert "tools" not in seen[0]["body"]


@pytest.mark.anyio
async def test_openai_http_error_is_reported_not_swallowed() -> None:
    async with fake_endpoint([(500, {"error": {"message": "model crashed", "type": "server_error"}})]) as (
        url,
        _,
    ):
        backend = OpenAIBackend("m", base_url=f"{url}/v1", api_key="k", max_retries=0)
        try:
            with pytest.raises(BackendError, match=r"openai:m: HTTP 500: .*model crashed"):
                await backend.complete(system="S", messages=THREAD[:1], tools=[])
        finally:
            await backend.aclose()


@pytest.mark.anyio
async def test_openai_unreachable_endpoint_names_it() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now: connection refused
    backend = OpenAIBackend("m", base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0)
    try:
        with pytest.raises(BackendError, match=rf"openai:m: cannot reach http://127.0.0.1:{port}/v1"):
            await backend.complete(system="S", messages=THREAD[:1], tools=[])
    finally:
        await backend.aclose()


def test_openai_without_key_or_base_url_fails_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(BackendError, match=r"OPENAI_API_KEY.*--base-url"):
        make_backend("openai:gpt-4o-mini")


@pytest.mark.anyio
async def test_anthropic_request_shape_and_reply_parsing() -> None:
    answer = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [
            {"type": "text", "text": "Looking."},
            {
                "type": "tool_use",
                "id": "toolu_2",
                "name": "run_code",
                "input": {"code": "await watch_list()"},
            },
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }
    async with fake_endpoint([(200, answer)]) as (url, seen):
        backend = AnthropicBackend("claude-x", base_url=url, api_key="ak-test")
        try:
            reply = await backend.complete(system="SYSTEM", messages=THREAD, tools=[RUN_CODE_TOOL])
        finally:
            await backend.aclose()
    assert reply == Message(
        role="assistant",
        text="Looking.",
        tool_calls=(ToolCall(id="toolu_2", name="run_code", arguments={"code": "await watch_list()"}),),
    )
    (req,) = seen
    assert req["path"] == "/v1/messages"
    # The key goes as x-api-key (SDK 0.x) or as a bearer token (SDK 2.x).
    assert "ak-test" in (
        req["headers"].get("x-api-key"),
        req["headers"].get("authorization", "").removeprefix("Bearer "),
    )
    assert "anthropic-version" in req["headers"]
    body = req["body"]
    assert body["model"] == "claude-x"
    assert body["max_tokens"] == 8192
    assert body["system"] == "SYSTEM"
    assert body["tools"] == [
        {
            "name": "run_code",
            "description": RUN_CODE_TOOL.description,
            "input_schema": dict(RUN_CODE_TOOL.parameters),
        }
    ]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "watch the notes"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Starting a watch."},
                {
                    "type": "tool_use",
                    "id": "call_1",
                    "name": "run_code",
                    "input": {"code": "await watch_list()"},
                },
            ],
        },
        # The tool result and the notice that followed it share one user message, result first.
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "[]"},
                {"type": "text", "text": THREAD[3].text},
            ],
        },
    ]
    assert float(req["headers"]["x-stainless-read-timeout"]) == 600


@pytest.mark.anyio
async def test_anthropic_http_error_is_reported() -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    async with fake_endpoint([(529, error)]) as (url, _):
        backend = AnthropicBackend("c", base_url=url, api_key="k", max_retries=0)
        try:
            with pytest.raises(BackendError, match=r"anthropic:c: HTTP 529: .*Overloaded"):
                await backend.complete(system="S", messages=THREAD[:1], tools=[])
        finally:
            await backend.aclose()


def test_anthropic_without_key_fails_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(BackendError, match="ANTHROPIC_API_KEY"):
        make_backend("anthropic:claude-x")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("gpt-4o", "--model expects openai:MODEL, anthropic:MODEL or scripted:FILE, got 'gpt-4o'"),
        ("ollama:llama3", "unknown backend 'ollama'"),
        ("openai:", "--model expects"),
    ],
)
def test_bad_model_spec_names_the_accepted_forms(spec: str, message: str) -> None:
    with pytest.raises(BackendError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_backend(spec)


# -- scripted -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, 'expected a JSON object with a "turns" list'),
        ({"turns": [{"steps": []}]}, r'turns\[0\] must be an object with a non-empty "steps" list'),
        ({"turns": [{"steps": [{"run_code": "x"}]}]}, r"turns\[0\].steps\[0\]: a turn must end with a reply"),
        ({"turns": [{"steps": [{"reply": "a"}, {"reply": "b"}]}]}, r"steps\[0\]: a reply ends the turn"),
        ({"turns": [{"steps": [{"reply": "a", "run_code": "b"}]}]}, 'exactly one of "run_code" or "reply"'),
        ({"turns": [{"steps": [{"replly": "a"}]}]}, r"unknown keys \['replly'\]"),
        ({"turns": [{"steps": [{"reply": 3}]}]}, r"steps\[0\].reply must be a string"),
    ],
)
def test_script_validation_names_the_bad_path(data: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_script(data)


@pytest.mark.anyio
async def test_scripted_replay_checks_expectations_and_reports_divergence() -> None:
    script = parse_script(
        {
            "turns": [
                {
                    "expect": "watch",
                    "steps": [
                        {"run_code": "1 + 1"},
                        {"expect": "2", "reply": "got {result}"},
                    ],
                },
                {"expect": "ADDED", "steps": [{"reply": "NO_REPLY"}]},
            ]
        }
    )
    b = ScriptedBackend(script)
    thread = [Message(role="user", text="please watch")]
    first = await b.complete(system="", messages=thread, tools=[])
    assert first.tool_calls[0].arguments == {"code": "1 + 1"}
    thread += [first, Message(role="tool", text="2", tool_call_id=first.tool_calls[0].id)]
    assert (await b.complete(system="", messages=thread, tools=[])).text == "got 2"
    thread.append(Message(role="user", text="DELETED x"))
    with pytest.raises(
        BackendError, match=r"turns\[1\] expected new input containing 'ADDED', got: 'DELETED x'"
    ):
        await b.complete(system="", messages=thread, tools=[])


@pytest.mark.anyio
async def test_scripted_step_expect_fails_on_a_wrong_result() -> None:
    b = ScriptedBackend(
        parse_script({"turns": [{"steps": [{"run_code": "x"}, {"expect": "ok", "reply": "r"}]}]})
    )
    call = await b.complete(system="", messages=[Message(role="user", text="u")], tools=[])
    thread = [
        Message(role="user", text="u"),
        call,
        Message(role="tool", text="NameError: x", tool_call_id="c"),
    ]
    with pytest.raises(
        BackendError, match=r"expected the run_code result to contain 'ok', got: 'NameError: x'"
    ):
        await b.complete(system="", messages=thread, tools=[])


@pytest.mark.anyio
async def test_scripted_exhausted_script_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"turns": [{"steps": [{"reply": "hi"}]}]}))
    b = make_backend(f"scripted:{path}")
    thread = [Message(role="user", text="one")]
    thread.append(await b.complete(system="", messages=thread, tools=[]))
    thread.append(Message(role="user", text="two"))
    with pytest.raises(BackendError, match=r"no turn left \(all 1 used\).*'two'"):
        await b.complete(system="", messages=thread, tools=[])


def test_scripted_file_errors(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="cannot read the script"):
        make_backend(f"scripted:{tmp_path / 'missing.json'}")
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(BackendError, match="not valid JSON"):
        make_backend(f"scripted:{bad}")
