"""The one HTTP policy (docs/http-security.md), over real sockets on loopback, for every server.

A non-loopback bind is tested by binding ``0.0.0.0`` and connecting to ``127.0.0.1`` with a
foreign ``Host`` / ``Origin``. Attackers that must count as another client connect from
``127.0.0.2`` (loopback too).
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import resource
import subprocess
import sys
import urllib.parse
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.server.streamable_http import EventMessage
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types import JSONRPCNotification
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from asyncai_watch.server.http import running_http_server, serve_http
from asyncai_watch.server.introspection import IntrospectionCache, IntrospectionVerifier
from asyncai_watch.server.policy import HttpPolicy
from asyncai_watch.server.resumable import EventBuffer
from tests.support.http_servers import SERVERS, SWITCHBOARD_TOKEN, server_command
from tests.support.local_token import local_auth, local_client

pytestmark = pytest.mark.anyio

TOKEN = "policy-test-token-1"
HALF_OPEN = 1100
ALL = (*SERVERS, "serve")
WAIT = 60.0
INITIALIZE = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
).encode()
MCP_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


def command(name: str, work: Path, address: str) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """Server ``name``'s argv on ``address``, its environment, and the headers it needs (none: no auth)."""
    if name == "serve":
        memo = f"{sys.executable} -m asyncai_servers.memo"
        argv = [sys.executable, "-m", "asyncai_watch", "serve", "--server", f"memo={memo}", "--http", address]
        return argv, dict(os.environ), {}
    argv, env, headers = server_command(name, work)
    argv = [address if a == "127.0.0.1:0" else a for a in argv]
    return argv, dict(env if env is not None else os.environ), dict(headers)


def with_token(name: str, env: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The environment that gives server ``name`` a token, and the header that carries it."""
    if name == "switchboard":
        return env, {"Authorization": f"Bearer {SWITCHBOARD_TOKEN}"}
    return {**env, "ASYNCAI_HTTP_TOKEN": TOKEN}, {"Authorization": f"Bearer {TOKEN}"}


def local(url: str) -> str:
    return url.replace("0.0.0.0", "127.0.0.1")


def authority(url: str) -> str:
    return url.split("/")[2]


async def initialize(url: str, headers: Mapping[str, str], *, source: str | None = None) -> httpx2.Response:
    transport = httpx2.AsyncHTTPTransport(local_address=source) if source else None
    async with httpx2.AsyncClient(transport=transport, timeout=WAIT) as client:
        # A loopback server with no token of its own published one for the run: send it.
        return await client.post(url, content=INITIALIZE, headers={**MCP_HEADERS, **local_auth(url, headers)})


@pytest.mark.parametrize("name", ALL)
async def test_a_wildcard_bind_refuses_a_foreign_host_or_origin_and_serves_its_own(
    name: str, tmp_path: Path
) -> None:
    argv, env, _ = command(name, tmp_path, "0.0.0.0:0")
    env, auth = with_token(name, env)
    async with running_http_server(argv, env=env, ready_timeout=WAIT) as (url, _proc):
        url = local(url)
        port = authority(url).rsplit(":", 1)[1]
        refused = await initialize(url, {**auth, "Host": "evil.example"})
        assert refused.status_code == 421, refused.text
        assert "--allow-host" in refused.json()["error"]["message"]
        refused = await initialize(url, {**auth, "Origin": "http://evil.example"})
        assert refused.status_code == 403, refused.text
        assert "--allow-origin" in refused.json()["error"]["message"]
        other_port = str(int(port) + 1 if int(port) < 65535 else int(port) - 1)
        refused = await initialize(url, {**auth, "Origin": f"http://127.0.0.1:{other_port}"})
        assert refused.status_code == 403, "a page on another local port is another origin"
        assert (await initialize(url, {})).status_code == 401
        assert (await initialize(url, {"Authorization": "Bearer wrong-token"})).status_code == 401
        served = await initialize(url, {**auth, "Origin": f"http://localhost:{port}"})
        assert served.status_code == 200, served.text


@pytest.mark.parametrize(
    "name", [n for n in ALL if n != "switchboard"]
)  # the switchboard always authenticates
async def test_a_wildcard_bind_without_a_token_exits_with_one_line(name: str, tmp_path: Path) -> None:
    argv, env, _ = command(name, tmp_path, "0.0.0.0:0")
    env.pop("ASYNCAI_HTTP_TOKEN", None)
    with anyio.fail_after(WAIT):
        done = await anyio.run_process(argv, env=env, check=False, stdin=subprocess.DEVNULL)
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode == 2, lines
    assert len(lines) == 1, lines
    assert "without authentication" in lines[0]
    assert "--token-file" in lines[0]
    assert "--insecure-no-auth" in lines[0]


async def test_insecure_no_auth_serves_a_wildcard_bind_with_a_warning(tmp_path: Path) -> None:
    argv, env, _ = command("memo", tmp_path, "0.0.0.0:0")
    async with await anyio.open_process(
        [*argv, "--insecure-no-auth"], env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE
    ) as proc:
        assert proc.stderr is not None
        seen = b""
        with anyio.fail_after(WAIT):
            while b"READY " not in seen:
                seen += await proc.stderr.receive()
        proc.terminate()
    assert b"WARNING" in seen
    assert b"NO authentication" in seen


@pytest.mark.parametrize("source", ["env", "file"])
@pytest.mark.parametrize("name", [n for n in ALL if n != "switchboard"])
async def test_a_token_is_required_and_accepted_on_loopback(name: str, source: str, tmp_path: Path) -> None:
    argv, env, _ = command(name, tmp_path, "127.0.0.1:0")
    if source == "env":
        env["ASYNCAI_HTTP_TOKEN"] = TOKEN
    else:
        token_file = tmp_path / "token"
        token_file.write_text(TOKEN + "\n")
        token_file.chmod(0o600)
        argv = [*argv, "--token-file", str(token_file)]
    async with running_http_server(argv, env=env, ready_timeout=WAIT) as (url, _proc):
        missing = await initialize(url, {})
        assert missing.status_code == 401
        assert missing.headers["www-authenticate"].startswith("Bearer")
        assert (await initialize(url, {"Authorization": f"Bearer {TOKEN}"})).status_code == 200


async def test_memo_bearer_token_on_the_command_line_is_refused() -> None:
    with anyio.fail_after(WAIT):
        done = await anyio.run_process(
            [
                sys.executable,
                "-m",
                "asyncai_servers.memo",
                "--http",
                "127.0.0.1:0",
                "--bearer-token",
                "s3cret",
            ],
            check=False,
            stdin=subprocess.DEVNULL,
        )
    assert done.returncode == 2
    assert b"/proc/*/cmdline" in done.stderr
    assert b"--token-file" in done.stderr


@asynccontextmanager
async def memo(*extra: str) -> AsyncIterator[str]:
    argv = [sys.executable, "-m", "asyncai_servers.memo", "--http", "127.0.0.1:0", *extra]
    async with running_http_server(argv, ready_timeout=WAIT) as (url, _proc):
        yield url


async def _closed_by_server(stream: anyio.abc.SocketStream) -> bytes:
    answer = b""
    try:
        while True:
            answer += await stream.receive()
    except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
        return answer


def half_open_count() -> int:
    """1,100, or what the fd limit allows this process (the soft limit is raised to the hard one)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        soft = hard if hard != resource.RLIM_INFINITY else max(soft, 4096)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return min(HALF_OPEN, soft - 200)


async def test_half_open_connections_are_closed_and_a_client_is_still_served() -> None:
    """1,100 connections that never finish their headers (slowloris), on the defaults: a client's
    tools/list is still answered, and each held connection is closed by the server (408 at the
    10 s header timeout, or 503 when the connection cap made room for a newer one)."""
    count = half_open_count()
    held: list[anyio.abc.SocketStream] = []
    async with memo() as url:
        host, port = authority(url).rsplit(":", 1)
        try:
            with anyio.fail_after(WAIT):
                for _ in range(count):
                    stream = await anyio.connect_tcp(host, int(port))
                    await stream.send(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finished
                    held.append(stream)
            with anyio.fail_after(WAIT):
                async with local_client(url) as client:
                    assert (await client.list_tools()).tools
            answers: list[bytes] = []
            with anyio.fail_after(WAIT):
                async with anyio.create_task_group() as tg:

                    async def closed(stream: anyio.abc.SocketStream) -> None:
                        answers.append(await _closed_by_server(stream))

                    for stream in held:
                        tg.start_soon(closed, stream)
        finally:
            for stream in held:
                await stream.aclose()
    assert len(answers) == count
    timed_out = sum(b" 408 " in a and b"--header-timeout" in a for a in answers)
    evicted = sum(b" 503 " in a and b"--max-connections" in a for a in answers)
    assert timed_out + evicted == count, [a for a in answers if b"408" not in a and b"503" not in a][:3]
    assert timed_out >= 1


async def test_the_connection_cap_closes_the_oldest_waiting_connection_for_a_new_one() -> None:
    async with memo("--max-connections", "20", "--header-timeout", "120") as url:
        host, port = authority(url).rsplit(":", 1)
        held = [await anyio.connect_tcp(host, int(port)) for _ in range(20)]
        try:
            with anyio.fail_after(WAIT):
                async with local_client(url) as client:
                    assert (await client.list_tools()).tools
                first = await _closed_by_server(held[0])
        finally:
            for stream in held:
                await stream.aclose()
    assert b" 503 " in first
    assert b"--max-connections 20" in first


async def test_one_client_flooding_sessions_is_capped_and_others_are_served() -> None:
    """On the defaults (64 sessions per client): 100 attempts from 127.0.0.2."""
    async with memo() as url:
        codes = [(await initialize(url, {}, source="127.0.0.2")).status_code for _ in range(100)]
        assert codes.count(200) == 64
        refused = await initialize(url, {}, source="127.0.0.2")
        assert refused.status_code == 503
        assert "--max-sessions-per-client" in refused.json()["error"]["message"]
        assert (await initialize(url, {}, source="127.0.0.3")).status_code == 200
        assert (await initialize(url, {})).status_code == 200


async def test_the_total_session_cap_names_its_option() -> None:
    async with memo("--max-sessions", "3") as url:
        for source in ("127.0.0.2", "127.0.0.3", "127.0.0.4"):
            assert (await initialize(url, {}, source=source)).status_code == 200
        refused = await initialize(url, {})
        assert refused.status_code == 503
        assert "--max-sessions)" in refused.json()["error"]["message"]


async def test_listens_are_capped_per_client() -> None:
    """On the defaults (16 per client): the 17th listen of one client is refused."""
    async with memo() as url, local_client(url) as client, contextlib.AsyncExitStack() as stack:
        for i in range(16):
            await stack.enter_async_context(client.listen(resource_subscriptions=[f"memo://notes/k{i}"]))
        with anyio.fail_after(WAIT), pytest.raises(MCPError, match="--max-listens-per-client"):
            async with client.listen(resource_subscriptions=["memo://notes/one-too-many"]):
                pass


async def test_uri_subscriptions_are_capped_in_total() -> None:
    async with memo("--max-total-uris", "1000") as url, local_client(url) as client:
        uris = [f"memo://notes/k{i}" for i in range(1001)]
        with anyio.fail_after(WAIT), pytest.raises(MCPError, match="--max-total-uris"):
            async with client.listen(resource_subscriptions=uris):
                pass
        async with client.listen(resource_subscriptions=uris[:1000]) as sub:
            assert len(sub.honored.resource_subscriptions or ()) == 1000


async def test_a_busy_session_evicts_only_its_own_replay_events() -> None:
    """A 2025-era client resumes its stream (Last-Event-ID) after another session sent 5,000 events."""
    buffer = EventBuffer()  # the defaults streamable_http_app uses
    quiet, busy = buffer.session(), buffer.session()
    note = JSONRPCNotification(jsonrpc="2.0", method="notifications/message", params={"n": 1})
    priming = await quiet.store_event("_GET_stream", None)
    await quiet.store_event("_GET_stream", note)
    for _ in range(5000):
        await busy.store_event("_GET_stream", note)
    replayed: list[EventMessage] = []

    async def send(event: EventMessage) -> None:
        replayed.append(event)

    assert await quiet.replay_events_after(priming, send) == "_GET_stream"
    assert [e.message for e in replayed] == [note]


INTROSPECTED: list[str] = []
"""The tokens the endpoint below was asked about, in order."""
BRIEF_EXP = 2_000_000_000
"""``brief``'s ``exp`` (epoch seconds)."""


async def introspect(request: Request) -> JSONResponse:
    """A tiny RFC 7662 endpoint: ``good`` is active with scope memo, ``narrow`` lacks it, ``brief``
    expires at :data:`BRIEF_EXP`."""
    token = urllib.parse.parse_qs((await request.body()).decode()).get("token", [""])[0]
    INTROSPECTED.append(token)
    answers = {
        "good": {"active": True, "client_id": "agent-1", "scope": "memo", "sub": "alice"},
        "narrow": {"active": True, "client_id": "agent-2", "scope": "other"},
        "brief": {"active": True, "client_id": "agent-3", "scope": "memo", "exp": BRIEF_EXP},
    }
    return JSONResponse(answers.get(token, {"active": False}))


@asynccontextmanager
async def introspection_endpoint() -> AsyncIterator[str]:
    app = Starlette(routes=[Route("/introspect", introspect, methods=["POST"])])
    ready, stop, urls = anyio.Event(), anyio.Event(), []

    def on_ready(url: str) -> None:
        urls.append(url)
        ready.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(
            functools.partial(
                serve_http,
                app,
                "127.0.0.1",
                0,
                path="/introspect",
                ready=io.StringIO(),
                on_ready=on_ready,
                stop=stop,
                policy=HttpPolicy(insecure_no_auth=True),  # an authorization server's own endpoint
            )
        )
        with anyio.fail_after(WAIT):
            await ready.wait()
        try:
            yield urls[0]
        finally:
            stop.set()


async def test_oauth_access_tokens_are_checked_at_the_introspection_endpoint() -> None:
    async with introspection_endpoint() as endpoint:
        issuer = "http://127.0.0.1:9/"  # only published, never called
        flags = ["--oauth-introspect", endpoint, "--oauth-issuer", issuer, "--oauth-scope", "memo"]
        async with memo(*flags) as url:
            refused = await initialize(url, {"Authorization": "Bearer unknown"})
            assert refused.status_code == 401
            challenge = refused.headers["www-authenticate"]
            assert "resource_metadata=" in challenge
            metadata_url = challenge.split('resource_metadata="', 1)[1].split('"', 1)[0]
            async with httpx2.AsyncClient(timeout=WAIT) as client:
                metadata = (await client.get(metadata_url)).json()
            assert metadata["authorization_servers"] == [issuer]
            assert (await initialize(url, {"Authorization": "Bearer narrow"})).status_code == 403
            assert (await initialize(url, {"Authorization": "Bearer good"})).status_code == 200


async def test_the_switchboard_caps_listens_per_client_too(tmp_path: Path) -> None:
    argv, env, headers = command("switchboard", tmp_path, "127.0.0.1:0")
    async with (
        running_http_server([*argv, "--max-listens-per-client", "1"], env=env, ready_timeout=WAIT) as (
            url,
            _proc,
        ),
        create_mcp_http_client(headers=headers) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
        client.listen(resource_subscriptions=["switchboard://queues/ops/events"]),
    ):
        with anyio.fail_after(WAIT), pytest.raises(MCPError, match="--max-listens-per-client"):
            async with client.listen(resource_subscriptions=["switchboard://queues/dev/events"]):
                pass


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--allow-origin", "evil.example"], "--allow-origin expects SCHEME://HOST[:PORT]"),
        (["--allow-host", "a b"], "--allow-host expects HOST or HOST:PORT"),
        (["--header-timeout", "0"], "--header-timeout must be > 0"),
        (["--token-file", "/nonexistent/token"], "--token-file: cannot read '/nonexistent/token'"),
        (["--token-file", "/dev/zero"], "is not a regular file"),
        (["--oauth-scope", "memo"], "--oauth-issuer and --oauth-scope need --oauth-introspect URL"),
    ],
)
def test_a_bad_policy_option_is_one_line_naming_what_is_accepted(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from asyncai_servers.memo.__main__ import main as memo_main

    with pytest.raises(SystemExit) as caught:
        memo_main(["--http", "127.0.0.1:0", *argv])
    assert caught.value.code == 2
    assert says in capsys.readouterr().err


async def test_a_trickled_request_body_is_cut_after_the_body_timeout() -> None:
    """Headers sent, then the body trickles (a byte, then nothing): the server answers 408 naming
    --body-timeout and closes, while a client is still served."""
    async with memo("--body-timeout", "2") as url:
        host, port = authority(url).rsplit(":", 1)
        auth = local_auth(url)["Authorization"]
        stream = await anyio.connect_tcp(host, int(port))
        try:
            head = (
                f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: {auth}\r\n"
                "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
                f"Content-Length: {len(INITIALIZE)}\r\n\r\n"
            )
            await stream.send(head.encode() + INITIALIZE[:1])  # the rest never comes
            with anyio.fail_after(WAIT):
                answer = await _closed_by_server(stream)
                assert (await initialize(url, {})).status_code == 200
        finally:
            await stream.aclose()
    assert b" 408 " in answer
    assert b"--body-timeout" in answer


async def test_introspection_answers_are_cached_until_the_ttl_or_the_token_expires() -> None:
    """Each request does not ask the authorization server: an active answer is reused for the cache's
    TTL, and never past the token's ``exp``; an inactive one is asked again."""
    now = [1_000.0]
    cache = IntrospectionCache(ttl=60.0, clock=lambda: now[0], entries=2)
    async with introspection_endpoint() as endpoint:
        verifier = IntrospectionVerifier(endpoint, cache=cache)
        INTROSPECTED.clear()
        for _ in range(5):
            assert (await verifier.verify_token("good")) is not None
        assert INTROSPECTED == ["good"]
        now[0] += 61  # past the TTL: asked again
        assert (await verifier.verify_token("good")) is not None
        assert INTROSPECTED == ["good", "good"]
        assert (await verifier.verify_token("unknown")) is None
        assert (await verifier.verify_token("unknown")) is None
        assert INTROSPECTED[2:] == ["unknown", "unknown"]  # refusals are not cached
        now[0] = BRIEF_EXP - 10.0  # exp is sooner than the TTL: it bounds the entry
        assert (await verifier.verify_token("brief")) is not None
        now[0] = BRIEF_EXP - 5.0
        assert (await verifier.verify_token("brief")) is not None
        assert INTROSPECTED.count("brief") == 1
        now[0] = BRIEF_EXP + 1.0
        await verifier.verify_token("brief")
        assert INTROSPECTED.count("brief") == 2
        # Bounded: a third token pushes out the least recently used one.
        now[0] = 5_000.0
        INTROSPECTED.clear()
        for token in ("good", "narrow", "good", "brief", "narrow"):
            await verifier.verify_token(token)
        assert INTROSPECTED == ["good", "narrow", "brief", "narrow"]
