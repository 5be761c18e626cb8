"""Where the SDK's OAuth client keeps tokens and its client registration (its ``TokenStorage``)."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from pathlib import Path
from typing import Any, TypeVar

import anyio
from mcp.client.auth import OAuthFlowError, TokenStorage
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import BaseModel, ValidationError

__all__ = ["FileTokenStorage", "MemoryTokenStorage", "make_private_dirs"]


class MemoryTokenStorage(TokenStorage):
    """Tokens and the client registration in memory: they last as long as the process."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


_file_locks: dict[str, threading.Lock] = {}
_file_locks_guard = threading.Lock()


def _lock_for(path: Path) -> threading.Lock:
    with _file_locks_guard:
        return _file_locks.setdefault(str(path), threading.Lock())


class FileTokenStorage(TokenStorage):
    """Tokens and the client registration of one server in a JSON file (mode 0600).

    One file can hold several servers (keyed by server URL), so one ``--oauth-store``
    serves every ``--mcp-http``. Writes replace the file atomically. The file holds
    secrets (refresh tokens): keep it private.
    """

    def __init__(self, path: str | os.PathLike[str], server_url: str) -> None:
        self.path = Path(path).expanduser()
        self.server_url = server_url

    def _load_all(self) -> dict[str, Any]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise OAuthFlowError(f"OAuth token store {str(self.path)!r} is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise OAuthFlowError(f"OAuth token store {str(self.path)!r} must hold a JSON object")
        return data

    def _entry(self) -> dict[str, Any]:
        with _lock_for(self.path):
            entry = self._load_all().get(self.server_url)
        return entry if isinstance(entry, dict) else {}

    def _update(self, key: str, value: dict[str, Any]) -> None:
        with _lock_for(self.path):
            data = self._load_all()
            entry = data.get(self.server_url)
            entry = dict(entry) if isinstance(entry, dict) else {}
            entry[key] = value
            data[self.server_url] = entry
            make_private_dirs(self.path.parent)
            part = self.path.with_name(self.path.name + ".part")
            fd = _create_private(part)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as out:
                    json.dump(data, out, indent=1, sort_keys=True)
                    out.flush()
                    os.fsync(out.fileno())
                part.replace(self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    part.unlink()
                raise

    async def get_tokens(self) -> OAuthToken | None:
        raw = (await anyio.to_thread.run_sync(self._entry)).get("tokens")
        return _parse(OAuthToken, raw)

    async def set_tokens(self, tokens: OAuthToken) -> None:
        await anyio.to_thread.run_sync(
            self._update, "tokens", tokens.model_dump(mode="json", exclude_none=True)
        )

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        raw = (await anyio.to_thread.run_sync(self._entry)).get("client_info")
        return _parse(OAuthClientInformationFull, raw)

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        value = client_info.model_dump(mode="json", exclude_none=True)
        await anyio.to_thread.run_sync(self._update, "client_info", value)


def make_private_dirs(directory: Path) -> None:
    """Create ``directory`` (and missing parents) 0700; an existing one is left as the user made it."""
    missing = [d for d in (directory, *directory.parents) if not d.exists()]
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            d.mkdir(mode=0o700)
            d.chmod(0o700)  # mkdir's mode is masked by the umask


def _create_private(part: Path) -> int:
    """A new file at ``part``, 0600, written by no one else: whatever is there is removed, never followed.

    A ``.part`` left by a killed run may be 0644 (its tokens would stay readable after the
    rename) or a symlink (writing through it would put the tokens in the link's target).
    ``O_EXCL | O_NOFOLLOW`` refuses both; we remove the leftover (``unlink`` removes a link,
    not its target) and try once more. Something recreating it in between is an error.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(part, flags, 0o600)
    except FileExistsError:
        part.unlink()
        try:
            fd = os.open(part, flags, 0o600)
        except FileExistsError:
            raise OAuthFlowError(
                f"OAuth token store: {str(part)!r} reappeared as soon as it was removed; is another "
                "program writing there? Choose another --oauth-store"
            ) from None
    os.fchmod(fd, 0o600)  # the umask may have taken bits, never added any; be exact
    return fd


_M = TypeVar("_M", bound=BaseModel)


def _parse(model: type[_M], raw: Any) -> _M | None:
    if raw is None:
        return None
    try:
        return model.model_validate(raw)
    except ValidationError:
        return None  # a record this version cannot read: start over (re-register, re-authorize)
