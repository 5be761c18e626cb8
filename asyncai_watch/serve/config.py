"""Which upstream servers ``asyncai-watch serve`` connects to: ``--server`` and ``--config``.

Pure: text in, :class:`Upstream` values out, and :class:`ConfigError` (one line, naming the
entry and what is accepted) for anything malformed. ``--config`` reads the ``mcpServers``
object of a ``.mcp.json``-style file, the format Claude Code and other hosts use::

    {"mcpServers": {
        "files": {"command": "asyncai-mcp-files", "args": ["/srv/app"], "env": {"K": "v"}},
        "memo": {"type": "http", "url": "http://127.0.0.1:8765/mcp",
                 "headers": {"Authorization": "Bearer ${MEMO_TOKEN}"}}}}

``${VAR}`` and ``${VAR:-default}`` are expanded in ``command``, ``args``, ``env``, ``url`` and
``headers``, as Claude Code does, so one file serves both. Keys this reader does not use are
ignored (hosts add their own); known keys with a wrong type are errors. An entry that runs
``asyncai-watch serve`` itself is left out (the host's file usually lists it), so pointing
serve at the host's own config never makes it start itself.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs

from asyncai_watch.echo import clip, quoted, redact_url
from asyncai_watch.errors import WatchError
from asyncai_watch.mcp.server_spec import parse_server

__all__ = [
    "ConfigError",
    "Upstream",
    "expand_vars",
    "from_server_args",
    "is_serve_itself",
    "load_config",
    "parse_config",
    "select",
]

_VAR: Final = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_NAME: Final = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}$")
_TYPES: Final = ("stdio", "http", "streamable-http")


class ConfigError(WatchError, ValueError):
    """A ``--server`` or ``--config`` value that cannot be used; the message says what is accepted."""


@attrs.frozen(kw_only=True)
class Upstream:
    """One upstream MCP server: a command spoken to over stdio, or a Streamable HTTP URL."""

    name: str | None
    """The name the user gave (``NAME=`` or the config key); ``None``: see :attr:`link_name`."""
    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = attrs.field(factory=dict, hash=False)
    url: str | None = None
    headers: Mapping[str, str] = attrs.field(factory=dict, hash=False)
    origin: str = ""
    """Where it came from, for errors: ``--server ...`` or ``FILE: mcpServers.NAME``."""

    @property
    def is_http(self) -> bool:
        return self.url is not None

    @property
    def link_name(self) -> str:
        """The name serve uses: the one given, else the URL's host, the module of ``python -m
        MODULE``, or the program's file name. Fixed before connecting: tools, routing and the
        state file refer to an upstream by it while the server is still away."""
        if self.name is not None:
            return self.name
        if self.url is not None:
            return urllib.parse.urlsplit(self.url).hostname or self.url
        program = os.path.basename(self.argv[0]) if self.argv else ""
        rest = list(self.argv[1:])
        if program.startswith("python") and "-m" in rest and rest.index("-m") + 1 < len(rest):
            return rest[rest.index("-m") + 1]
        return program or "server"


def expand_vars(text: str, env: Mapping[str, str], where: str) -> str:
    """``${VAR}`` and ``${VAR:-default}`` replaced from ``env``; an unset VAR without a default
    is an error naming it (the host would refuse the entry too)."""

    def repl(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        value = env.get(name)
        if value is None or (value == "" and default is not None):
            if default is None:
                raise ConfigError(
                    f"{where}: environment variable {name} is not set; set it or write ${{{name}:-default}}"
                )
            return default
        return value

    return _VAR.sub(repl, text)


def is_serve_itself(argv: Sequence[str]) -> bool:
    """``asyncai-watch serve ...`` or ``python -m asyncai_watch serve ...``: this very command."""
    if not argv:
        return False
    program = os.path.basename(argv[0])
    rest = list(argv[1:])
    if program in ("asyncai-watch", "asyncai-watch.exe"):
        return "serve" in rest
    if program.startswith("python") and "-m" in rest:
        i = rest.index("-m")
        return rest[i + 1 : i + 2] == ["asyncai_watch"] and "serve" in rest[i + 2 :]
    if program in ("uvx", "pipx") or program.startswith("uv"):
        return "asyncai-watch" in rest and "serve" in rest
    return False


def from_server_args(values: Sequence[str]) -> list[Upstream]:
    """``--server [NAME=]COMMAND`` / ``--server [NAME=]URL`` values (see :func:`asyncai_watch.mcp.server_spec.parse_server`)."""
    out = []
    for value in values:
        try:
            spec = parse_server(value)
            origin = f"--server {clip(value)}"
            if spec.is_http:
                out.append(Upstream(name=spec.name, url=spec.target, origin=origin))
                continue
            argv = tuple(shlex.split(spec.target))
        except ValueError as exc:
            raise ConfigError(f"--server {quoted(value)}: {exc}") from None
        if is_serve_itself(argv):
            raise ConfigError(
                f"--server {quoted(value)} runs asyncai-watch serve itself; name the servers to watch"
            )
        out.append(Upstream(name=spec.name, argv=argv, origin=origin))
    return out


def load_config(path: Path, env: Mapping[str, str] | None = None) -> list[Upstream]:
    """Read and parse a ``.mcp.json``-style file; :class:`ConfigError` for an unreadable or bad one."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"--config {str(path)!r}: cannot read it: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"--config {str(path)!r}: not UTF-8 text ({exc.reason})") from None
    return parse_config(text, str(path), os.environ if env is None else env)


def parse_config(text: str, where: str, env: Mapping[str, str]) -> list[Upstream]:
    """The ``mcpServers`` entries of a ``.mcp.json`` text, in file order, without serve itself."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{where}: not valid JSON ({exc})") from None
    servers = doc.get("mcpServers") if isinstance(doc, dict) else None
    if not isinstance(servers, dict):
        raise ConfigError(
            f'{where}: expected a JSON object with "mcpServers": {{"NAME": {{"command": ..., "args": [...]}} '
            'or {"type": "http", "url": ...}}'
        )
    out = []
    for name, entry in servers.items():
        upstream = _entry(name, entry, f"{where}: mcpServers.{name}", env)
        if upstream is not None:
            out.append(upstream)
    if not out:
        raise ConfigError(
            f"{where}: mcpServers lists no server to watch (asyncai-watch serve itself is skipped)"
        )
    return out


def select(upstreams: Sequence[Upstream], only: Sequence[str]) -> list[Upstream]:
    """The upstreams named in ``only`` (``--only NAME``), all when empty; an unknown name is an error."""
    if not only:
        return list(upstreams)
    known = {u.name: u for u in upstreams if u.name is not None}
    unknown = [n for n in only if n not in known]
    if unknown:
        raise ConfigError(
            f"--only: unknown server name(s) {', '.join(map(repr, unknown))}; "
            f"the config has: {', '.join(known) or 'none'}"
        )
    return [known[n] for n in dict.fromkeys(only)]


def _entry(name: str, entry: Any, where: str, env: Mapping[str, str]) -> Upstream | None:
    if not _NAME.match(name):
        raise ConfigError(f"{where}: a server name must be 1-64 of letters, digits, '_', '.', '-'")
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: expected an object with command/args/env or type/url/headers")
    kind = entry.get("type")
    if kind is not None and kind not in _TYPES:
        raise ConfigError(
            f'{where}: type {quoted(kind)} is not supported; use "stdio" (command) or "http" (Streamable HTTP url)'
        )
    has_command, has_url = "command" in entry, "url" in entry
    if has_command == has_url:
        raise ConfigError(
            f'{where}: give either "command" (stdio) or "url" (http), not {"both" if has_url else "neither"}'
        )
    if (kind == "stdio" and has_url) or (kind in ("http", "streamable-http") and has_command):
        raise ConfigError(f"{where}: type {quoted(kind)} does not go with {'url' if has_url else 'command'}")

    def text(key: str, value: Any) -> str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}.{key} must be a string, got {quoted(value)}")
        return expand_vars(value, env, f"{where}.{key}")

    def strings(key: str, kind_: Callable[[], Any]) -> Any:
        value = entry.get(key, kind_())
        if kind_ is list:
            if not isinstance(value, list):
                raise ConfigError(f"{where}.{key} must be a list of strings")
            return tuple(text(f"{key}[{i}]", v) for i, v in enumerate(value))
        if not isinstance(value, dict):
            raise ConfigError(f"{where}.{key} must be an object of string values")
        return {str(k): text(f"{key}.{k}", v) for k, v in value.items()}

    if has_url:
        url = text("url", entry["url"])
        if not url.startswith(("http://", "https://")):
            raise ConfigError(
                f"{where}.url must be an http(s) URL such as http://127.0.0.1:8765/mcp, got {quoted(redact_url(url))}"
            )
        return Upstream(name=name, url=url, headers=strings("headers", dict), origin=where)
    command = text("command", entry["command"])
    if not command.strip():
        raise ConfigError(f"{where}.command is empty; it must name a program")
    argv = (command, *strings("args", list))
    if is_serve_itself(argv):
        return None
    return Upstream(name=name, argv=argv, env=strings("env", dict), origin=where)
