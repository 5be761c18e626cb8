"""``--server SPEC``: an MCP server named on a command line, as a command or an http(s) URL.

Shared by ``asyncai-watch watch`` / ``resources`` (:mod:`asyncai_watch.cli`) and ``asyncai-watch
serve`` (:mod:`asyncai_watch.serve.config`).
"""

from __future__ import annotations

import os
import re
import urllib.parse

import attrs

from asyncai_watch.http_auth import HttpAuth
from asyncai_watch.mcp.body_cap import DEFAULT_MAX_MESSAGE_BYTES
from asyncai_watch.mcp.client import McpResourceSource

__all__ = ["ServerSpec", "parse_server"]


@attrs.frozen
class ServerSpec:
    """One ``--server`` argument: an optional ``NAME=`` and a command line or an http(s) URL."""

    target: str
    name: str | None = None

    @property
    def is_http(self) -> bool:
        return urllib.parse.urlsplit(self.target).scheme in ("http", "https")

    def source(
        self, auth: HttpAuth | None = None, *, max_message_bytes: int | None = DEFAULT_MAX_MESSAGE_BYTES
    ) -> McpResourceSource:
        """The (not yet connected) source; raises ``ValueError`` for a malformed command or URL.

        A stdio server gets this process's environment, as a command started from a shell would;
        an http(s) one is authenticated as ``auth`` says (``--token-file``, ``--auth``).
        """
        if self.is_http:
            auth = auth if auth is not None else HttpAuth()
            return McpResourceSource.http(
                self.target,
                name=self.name,
                headers=auth.headers,
                auth=auth.auth_for(self.target),
                connect_timeout=auth.connect_timeout,
                max_message_bytes=max_message_bytes,
            )
        return McpResourceSource.stdio(
            self.target, name=self.name, env=dict(os.environ), max_message_bytes=max_message_bytes
        )


def parse_server(text: str) -> ServerSpec:
    """``[NAME=]COMMAND`` or ``[NAME=]URL``; raises ``ValueError`` saying what is accepted.

    ``NAME=`` counts only when NAME is a plain identifier, so ``--server "env X=1 cmd"`` stays a
    command line.
    """
    text = text.strip()
    name: str | None = None
    head, sep, rest = text.partition("=")
    if sep and head and head.replace("_", "").replace("-", "").isalnum() and " " not in head:
        name, text = head, rest.strip()
    if not text:
        raise ValueError(
            "--server needs a command line or an http(s) URL, e.g. --server asyncai-mcp-simple "
            "or --server memo=http://127.0.0.1:8765/mcp"
        )
    if _SCHEMELESS_URL.match(text):
        # Run as a command, it would fail as "cannot start MCP server command '127.0.0.1:8765/mcp'".
        raise ValueError(
            f"did you mean --server http://{text} (a URL with its scheme)? {text!r} reads as a command "
            "line; a Streamable HTTP server is named by its whole URL, e.g. http://127.0.0.1:8765/mcp"
        )
    return ServerSpec(target=text, name=name)


# HOST:PORT[/PATH] (or [v6]:PORT): a URL without its scheme, which no command line looks like.
_SCHEMELESS_URL = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):\d{1,5}(/\S*)?$")
