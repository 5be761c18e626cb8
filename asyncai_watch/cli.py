"""``asyncai-watch`` (and ``python -m asyncai_watch``): watch MCP resources from the shell.

Subcommands:

- ``resources --server SPEC``: list watchable URIs and templates, with their examples;
- ``watch URI --server SPEC [--on-event SRC] [--debounce SECONDS] [--json]``: print each notice;
- ``serve``: an MCP server offering watches to a Channels host (docs/claude-code.md).

Bad input (an unknown URI, an unreachable or non-watchable server, a bad filter) is one line on
stderr and exit 2; Ctrl-C and SIGTERM end a watch with exit 0 and no traceback.
"""

from __future__ import annotations

import argparse
import sys
import urllib.parse
from collections.abc import Sequence
from importlib.metadata import version
from typing import Final

import attrs

from asyncai_watch.mcp_source import McpResourceSource

__all__ = ["PROG", "ServerSpec", "build_parser", "main", "parse_server"]

PROG: Final = "asyncai-watch"


@attrs.frozen
class ServerSpec:
    """One ``--server`` argument: an optional ``NAME=`` and a command line or an http(s) URL."""

    target: str
    name: str | None = None

    @property
    def is_http(self) -> bool:
        return urllib.parse.urlsplit(self.target).scheme in ("http", "https")

    def source(self, **options: object) -> McpResourceSource:
        """The (not yet connected) source; raises ``ValueError`` for a malformed command or URL."""
        if self.is_http:
            return McpResourceSource.http(self.target, name=self.name, **options)  # type: ignore[arg-type]
        return McpResourceSource.stdio(self.target, name=self.name, **options)  # type: ignore[arg-type]


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
    return ServerSpec(target=text, name=name)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="store_true", help="print the installed version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = sub.add_parser("serve", help="serve watches to a Channels host such as Claude Code (MCP, stdio)")
    from asyncai_watch import serve as serve_module

    serve_module.add_arguments(serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        print(f"asyncai-watch {version('asyncai-watch')}")
        return 0
    if args.command == "serve":
        from asyncai_watch import serve as serve_module

        return serve_module.main(args)
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
