"""``asyncai-watch serve`` as a subprocess over stdio, with the helpers that call its tools."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp.client import ClientExtension, NotificationBinding
from pydantic import BaseModel, ConfigDict

SERVE = [sys.executable, "-m", "asyncai_watch", "serve"]
MEMO = [sys.executable, "-m", "asyncai_servers.memo"]
FILES = [sys.executable, "-m", "asyncai_servers.files"]
WAIT = 30.0  # seconds: the bound on any one awaited push (generous: CI machines are shared)


class ChannelParams(BaseModel):
    model_config = ConfigDict(extra="allow")
    content: str
    meta: dict[str, Any] | None = None


class Channel(ClientExtension):
    """The ``claude/channel`` extension, as a Channels host declares it; pushes go to a stream."""

    identifier = "claude/channel"

    def __init__(self) -> None:
        self._send, self._recv = anyio.create_memory_object_stream[ChannelParams](1000)

    def notifications(self) -> list[NotificationBinding[Any]]:
        return [
            NotificationBinding(
                method="notifications/claude/channel", params_type=ChannelParams, handler=self._handle
            )
        ]

    async def _handle(self, params: ChannelParams) -> None:
        self._send.send_nowait(params)

    def pending(self) -> int:
        """Pushes received and not yet taken."""
        return self._recv.statistics().current_buffer_used

    async def next(self) -> ChannelParams:
        with anyio.fail_after(WAIT):
            return await self._recv.receive()

    async def next_for(self, watch: str) -> ChannelParams:
        """The next push of ``watch`` (pushes of other watches in between are skipped)."""
        with anyio.fail_after(WAIT):
            while True:
                push = await self._recv.receive()
                if (push.meta or {}).get("watch") == watch:
                    return push


def serve(*args: str) -> StdioServerParameters:
    return StdioServerParameters(command=SERVE[0], args=[*SERVE[1:], *args])


def files_arg(root: Path) -> str:
    return "files=" + shlex.join([*FILES, str(root)])


def file_uri(path: Path) -> str:
    return f"file://{path}"


def write(path: Path, text: str) -> None:
    """Replace ``path`` atomically (write a temp file, rename), as editors do."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


async def call(client: Client, tool: str, **args: Any) -> Any:
    result = await client.call_tool(tool, args)
    text = getattr(result.content[0], "text", "")
    assert not result.is_error, text
    return json.loads(text)


async def tool_error(client: Client, tool: str, **args: Any) -> str:
    result = await client.call_tool(tool, args)
    text: str = getattr(result.content[0], "text", "")
    assert result.is_error, f"{tool}({args}) did not fail: {text}"
    return text
