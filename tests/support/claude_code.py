"""Run the real Claude Code CLI against a scripted model, for tests/serve/test_claude_code.py.

- :func:`claude_binary`: the pinned CLI from ``scripts/fetch_claude_code.py`` (npm, cached in
  ``.tools/``). It must be there: a test that needs it fails, never skips.
- :class:`FakeMessagesApi`: the Anthropic Messages API on loopback (h11 over an anyio
  listener), streaming SSE. Every request body is recorded; each main-loop request (one with
  tools) waits until the test answers it (:meth:`Turn.reply`), so the test plays the model one
  turn at a time and asserts what the model was shown. Side requests (no tools) get "ok".
- :class:`Home`: a private ``HOME`` with Claude Code's config (onboarding done, the project
  trusted, the dummy API key approved), and the environment that points the CLI at the fake
  API with no network and no telemetry.
- :class:`Terminal`: an interactive session in a pseudo-terminal; a reader task keeps the
  screen text, and :meth:`Terminal.expect` waits for a string to appear on it.

Test-only setting: interactive channels are behind a host-side feature gate
(``tengu_harbor``) that Claude Code reads from its cached feature values in ``~/.claude.json``
(``cachedGrowthBookFeatures``) when ``CLAUDE_CODE_GB_DISK_CACHE_WHEN_TELEMETRY_OFF`` is set.
:class:`Home` turns it on there, in the private home only, so the channel path can be tested.
"""

from __future__ import annotations

import codecs
import fcntl
import itertools
import json
import os
import re
import struct
import subprocess
import termios
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.abc
import attrs
import h11

from tests.support.script_module import load_script

ROOT: Final = Path(__file__).resolve().parents[2]
WAIT: Final = 60.0
"""Seconds any one awaited step may take (generous: the CLI starts in about a second when idle)."""

API_KEY: Final = "sk-ant-api03-test-only-not-a-key-0123456789abcdefghij"


def claude_binary() -> Path:
    """The pinned Claude Code binary (installed from npm into ``.tools/`` if it is not there)."""
    binary: Path = load_script("scripts/fetch_claude_code.py", "fetch_claude_code").fetch()
    return binary


# -- the model ------------------------------------------------------------------------------------


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "name": name, "input": dict(arguments)}


@attrs.define(eq=False)
class Turn:
    """One main-loop request: what the model is shown, and the answer the test gives."""

    body: dict[str, Any]
    _answer: anyio.Event = attrs.field(factory=anyio.Event)
    blocks: list[dict[str, Any]] = attrs.field(factory=list)

    @property
    def tool_names(self) -> list[str]:
        return [t["name"] for t in self.body.get("tools", [])]

    def tool(self, name: str) -> dict[str, Any]:
        return next(t for t in self.body.get("tools", []) if t["name"] == name)

    @property
    def last_user(self) -> list[dict[str, Any]]:
        """The content blocks of the last user message (tool results, channel tags, prompts)."""
        users = [m for m in self.body["messages"] if m["role"] == "user"]
        content = users[-1]["content"]
        return [text(content)] if isinstance(content, str) else list(content)

    def tool_result(self) -> str:
        """The text of the (one) tool result in the last user message."""
        results = [b for b in self.last_user if b.get("type") == "tool_result"]
        assert len(results) == 1, self.last_user
        content = results[0].get("content", "")
        if isinstance(content, list):
            return "\n".join(c.get("text", "") for c in content)
        return str(content)

    def texts(self) -> str:
        """Every text block the model was shown in this request, joined (system and messages)."""
        out: list[str] = []

        def walk(value: Any) -> None:
            if isinstance(value, dict):
                if isinstance(value.get("text"), str):
                    out.append(value["text"])
                for v in value.values():
                    walk(v)
            elif isinstance(value, list):
                for v in value:
                    walk(v)

        walk(self.body.get("system"))
        walk(self.body.get("messages"))
        return "\n".join(out)

    def reply(self, *blocks: dict[str, Any]) -> None:
        self.blocks = list(blocks)
        self._answer.set()


class FakeMessagesApi:
    """The Messages API on ``127.0.0.1``; see the module docstring. Use :meth:`serving`."""

    def __init__(self) -> None:
        self.url = ""
        self.requests: list[dict[str, Any]] = []
        self._turns_in, self._turns = anyio.create_memory_object_stream[Turn](100)
        self._ids = itertools.count(1)

    @classmethod
    @asynccontextmanager
    async def serving(cls) -> AsyncIterator[FakeMessagesApi]:
        api = cls()
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        api.url = f"http://127.0.0.1:{port}"
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, api._connection)
            yield api
            tg.cancel_scope.cancel()

    async def turn(self) -> Turn:
        """The next main-loop request (bounded wait)."""
        with anyio.fail_after(WAIT):
            return await self._turns.receive()

    async def _connection(self, stream: anyio.abc.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        async with stream:
            while True:
                request, body = await self._read_request(conn, stream)
                if request is None:
                    return
                status, headers, payload = await self._answer(request, body)
                out = conn.send(
                    h11.Response(
                        status_code=status, headers=[*headers, ("content-length", str(len(payload)))]
                    )
                )
                out += conn.send(h11.Data(data=payload)) + conn.send(h11.EndOfMessage())
                await stream.send(out)
                if conn.our_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()

    async def _read_request(
        self, conn: h11.Connection, stream: anyio.abc.SocketStream
    ) -> tuple[h11.Request | None, bytes]:
        request: h11.Request | None = None
        body = b""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                try:
                    conn.receive_data(await stream.receive())
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    conn.receive_data(b"")
                continue
            if isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                return request, body
            elif isinstance(event, h11.ConnectionClosed):
                return None, b""

    async def _answer(self, request: h11.Request, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        path = request.target.decode()
        if request.method != b"POST" or not path.startswith("/v1/messages"):
            return 404, [("content-type", "application/json")], b'{"type": "error"}'
        if path.startswith("/v1/messages/count_tokens"):
            return 200, [("content-type", "application/json")], b'{"input_tokens": 10}'
        payload = json.loads(body)
        self.requests.append(payload)
        if payload.get("tools"):
            turn = Turn(payload)
            await self._turns_in.send(turn)
            await turn._answer.wait()
            blocks = turn.blocks
        else:
            blocks = [text("ok")]
        return 200, [("content-type", "text/event-stream")], self._stream(payload, blocks)

    def _stream(self, request: dict[str, Any], blocks: list[dict[str, Any]]) -> bytes:
        """The SSE events of one streamed message made of ``blocks``."""
        events: list[tuple[str, dict[str, Any]]] = []
        message = {
            "id": f"msg_{next(self._ids)}",
            "type": "message",
            "role": "assistant",
            "model": request.get("model", "claude"),
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
        events.append(("message_start", {"type": "message_start", "message": message}))
        for i, block in enumerate(blocks):
            if block["type"] == "text":
                start = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": block["text"]}
            else:
                start = {
                    "type": "tool_use",
                    "id": f"toolu_{next(self._ids)}",
                    "name": block["name"],
                    "input": {},
                }
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            events.append(
                ("content_block_start", {"type": "content_block_start", "index": i, "content_block": start})
            )
            events.append(
                ("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta})
            )
            events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
        stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
        events.append(
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": 1},
                },
            )
        )
        events.append(("message_stop", {"type": "message_stop"}))
        return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()


# -- the host -------------------------------------------------------------------------------------


@attrs.frozen
class Home:
    """A private home for Claude Code: config, settings, and the environment to run it in."""

    path: Path
    project: Path

    @classmethod
    def make(
        cls, root: Path, project: Path, *, channels: bool = False, settings: Mapping[str, Any] | None = None
    ) -> Home:
        home = root / "home"
        (home / ".claude").mkdir(parents=True)
        config: dict[str, Any] = {
            "hasCompletedOnboarding": True,
            "customApiKeyResponses": {"approved": [API_KEY[-20:]], "rejected": []},
            "projects": {str(project): {"hasTrustDialogAccepted": True}},
        }
        if channels:
            # Test-only: the host-side feature gate of interactive channels (see the module docstring).
            config["cachedGrowthBookFeatures"] = {"tengu_harbor": True}
        (home / ".claude.json").write_text(json.dumps(config))
        # The project's .mcp.json servers approved (the user's answer to Claude Code's question).
        (home / ".claude" / "settings.json").write_text(
            json.dumps({"enableAllProjectMcpServers": True, **(settings or {})})
        )
        return cls(home, project)

    def env(self, api: FakeMessagesApi, **extra: str) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.path),
            "TERM": "xterm-256color",
            "LANG": "C.UTF-8",
            "ANTHROPIC_BASE_URL": api.url,
            "ANTHROPIC_API_KEY": API_KEY,
            "DISABLE_TELEMETRY": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_GB_DISK_CACHE_WHEN_TELEMETRY_OFF": "1",
            # How long Claude Code waits for an alwaysLoad server before the first turn (default 5 s):
            # a busy CI machine can take longer than that to start Python.
            "MCP_CONNECT_TIMEOUT_MS": "60000",
        }
        env.update(extra)
        return env


_ANSI = re.compile(
    r"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\x1b[=>78]"
)


class Terminal:
    """An interactive CLI in a pseudo-terminal (200 columns, so lines rarely wrap)."""

    def __init__(self, proc: anyio.abc.Process, master: int) -> None:
        self.proc = proc
        self._master = master
        self.screen = ""
        """Everything written so far, escape sequences removed."""
        self._seen = 0
        self._changed = anyio.Event()
        self._closed = False

    @classmethod
    @asynccontextmanager
    async def running(cls, argv: list[str], *, env: Mapping[str, str], cwd: Path) -> AsyncIterator[Terminal]:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 60, 200, 0, 0))
        try:
            proc = await anyio.open_process(
                argv, stdin=slave, stdout=slave, stderr=slave, env=dict(env), cwd=cwd, start_new_session=True
            )
        finally:
            os.close(slave)
        os.set_blocking(master, False)
        terminal = cls(proc, master)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(terminal._read)
                try:
                    yield terminal
                finally:
                    await terminal.stop()
                    tg.cancel_scope.cancel()
        finally:
            os.close(master)

    async def _read(self) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        while True:
            await anyio.wait_readable(self._master)
            try:
                data = os.read(self._master, 65536)
            except BlockingIOError:
                continue
            except OSError:  # EIO: the other side is gone
                data = b""
            if not data:
                self._closed = True
                self._changed.set()
                return
            self.screen += _ANSI.sub(" ", decoder.decode(data))
            self._changed.set()
            self._changed = anyio.Event()

    async def expect(self, wanted: str) -> None:
        """Wait until ``wanted`` appears on the screen after what earlier expects consumed."""
        with anyio.fail_after(WAIT):
            while True:
                found = self.screen.find(wanted, self._seen)
                if found >= 0:
                    self._seen = found + len(wanted)
                    return
                if self._closed:
                    raise AssertionError(
                        f"the CLI exited before showing {wanted!r}; screen:\n{self.screen[-3000:]}"
                    )
                await self._changed.wait()

    async def type(self, keys: str) -> None:
        os.write(self._master, keys.encode())

    async def stop(self) -> int:
        """End the CLI (SIGTERM: it shuts down and stops its MCP servers; a Ctrl-C in the REPL
        would only ask for a second one), and return its exit code."""
        if self.proc.returncode is None:
            with anyio.move_on_after(WAIT / 2):
                self.proc.terminate()
                await self.proc.wait()
            if self.proc.returncode is None:
                self.proc.kill()
        with anyio.fail_after(WAIT):
            return await self.proc.wait()


async def print_mode(
    binary: Path, home: Home, api: FakeMessagesApi, prompt: str, *args: str, **env: str
) -> subprocess.CompletedProcess[bytes]:
    """``claude -p PROMPT`` in the project, run to its end."""
    argv = [str(binary), "-p", prompt, *args]
    with anyio.fail_after(WAIT * 2):
        return await anyio.run_process(
            argv, env=home.env(api, **env), cwd=home.project, check=False, stdin=subprocess.DEVNULL
        )


class LogPipe:
    """A named pipe to give ``serve --log-file``: the test awaits serve's NDJSON events as they
    are written (no file to re-read). The test holds a write end too, so the pipe never reads
    EOF between writers."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd
        self.records: list[dict[str, Any]] = []
        self.lines: list[str] = []
        self._seen = 0
        self._changed = anyio.Event()

    @classmethod
    @asynccontextmanager
    async def opened(cls, path: Path) -> AsyncIterator[LogPipe]:
        os.mkfifo(path)
        read_end = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        write_end = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        pipe = cls(path, read_end)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(pipe._read)
                yield pipe
                tg.cancel_scope.cancel()
        finally:
            os.close(write_end)
            os.close(read_end)

    async def _read(self) -> None:
        pending = b""
        while True:
            await anyio.wait_readable(self._fd)
            try:
                pending += os.read(self._fd, 65536)
            except BlockingIOError:
                continue
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                line = raw.decode("utf-8", "replace")
                self.lines.append(line)
                if line.startswith("{"):
                    self.records.append(json.loads(line))
            self._changed.set()
            self._changed = anyio.Event()

    async def line(self, prefix: str) -> str:
        """The first line (of any writer: serve, or an upstream's stderr) that starts with ``prefix``."""
        with anyio.fail_after(WAIT):
            while True:
                for line in self.lines:
                    if line.startswith(prefix):
                        return line
                await self._changed.wait()

    async def event(self, name: str, **fields: Any) -> dict[str, Any]:
        """The next record of event ``name`` with these field values (after the one the last call
        returned), waiting for it if need be."""
        with anyio.fail_after(WAIT):
            while True:
                for i in range(self._seen, len(self.records)):
                    record = self.records[i]
                    if record.get("event") == name and all(record.get(k) == v for k, v in fields.items()):
                        self._seen = i + 1
                        return record
                await self._changed.wait()
