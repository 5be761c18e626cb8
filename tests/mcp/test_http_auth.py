"""asyncai_watch.http_auth without a server: the token file, the loopback callback, the options."""

from __future__ import annotations

import argparse
import json
import os
import socket
import stat
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp.client.auth import OAuthFlowError
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from asyncai_watch.http_auth import (
    FileTokenStorage,
    LoopbackAuthorization,
    add_http_auth_arguments,
    http_auth_from_args,
    refresh_first,
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.anyio
async def test_a_token_file_keeps_each_server_apart_and_survives_a_new_process(tmp_path: Path) -> None:
    path = tmp_path / "dir" / "tokens.json"
    a, b = FileTokenStorage(path, "https://a/mcp"), FileTokenStorage(path, "https://b/mcp")
    assert await a.get_tokens() is None
    await a.set_tokens(OAuthToken(access_token="at-a", refresh_token="rt-a", expires_in=60))
    await b.set_client_info(OAuthClientInformationFull(client_id="client-b"))
    again = FileTokenStorage(path, "https://a/mcp")  # as a later run would open it
    tokens = await again.get_tokens()
    assert tokens is not None
    assert (tokens.access_token, tokens.refresh_token) == ("at-a", "rt-a")
    assert await again.get_client_info() is None
    info = await FileTokenStorage(path, "https://b/mcp").get_client_info()
    assert info is not None
    assert info.client_id == "client-b"
    assert path.stat().st_mode & 0o777 == 0o600
    assert set(json.loads(path.read_text())) == {"https://a/mcp", "https://b/mcp"}


@pytest.mark.anyio
async def test_a_stale_world_readable_part_file_does_not_leak_its_mode_into_the_store(tmp_path: Path) -> None:
    # A run killed mid-write left tokens.json.part at 0644: the refresh token must still end at 0600.
    path = tmp_path / "tokens.json"
    part = tmp_path / "tokens.json.part"
    part.write_text("{}")
    part.chmod(0o644)
    await FileTokenStorage(path, "https://a/mcp").set_tokens(
        OAuthToken(access_token="at", refresh_token="rt")
    )
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not part.exists()
    tokens = await FileTokenStorage(path, "https://a/mcp").get_tokens()
    assert tokens is not None
    assert tokens.refresh_token == "rt"


@pytest.mark.anyio
async def test_a_part_file_that_is_a_symlink_is_removed_not_followed(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    target = tmp_path / "elsewhere"
    target.write_text("precious\n")
    target.chmod(0o644)
    (tmp_path / "tokens.json.part").symlink_to(target)
    await FileTokenStorage(path, "https://a/mcp").set_tokens(
        OAuthToken(access_token="at", refresh_token="rt")
    )
    assert target.read_text() == "precious\n"  # no token written through the link
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert not (tmp_path / "tokens.json.part").is_symlink()
    assert not path.is_symlink()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "rt" in path.read_text()


@pytest.mark.anyio
async def test_a_token_store_directory_it_creates_is_private(tmp_path: Path) -> None:
    path = tmp_path / "new" / "tokens.json"
    await FileTokenStorage(path, "https://a/mcp").set_tokens(OAuthToken(access_token="at"))
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.anyio
async def test_a_token_file_that_is_not_json_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text("{not json")
    with pytest.raises(OAuthFlowError, match=r"tokens\.json' is not valid JSON"):
        await FileTokenStorage(path, "https://a/mcp").get_tokens()


@pytest.mark.anyio
async def test_the_loopback_answers_the_browser_and_returns_the_code() -> None:
    shown: list[str] = []
    loopback = LoopbackAuthorization(free_port(), show=shown.append, timeout=30)
    await loopback.redirect("https://as.example/authorize?x=1")
    assert shown == ["https://as.example/authorize?x=1"]
    got: list[object] = []

    async def wait_for_callback() -> None:
        got.append(await loopback.callback())

    async with anyio.create_task_group() as tg, httpx2.AsyncClient(timeout=30) as browser:
        tg.start_soon(wait_for_callback)
        favicon = await browser.get(f"http://127.0.0.1:{loopback.port}/favicon.ico")
        assert favicon.status_code == 404  # not the callback: keep waiting
        done = await browser.get(f"{loopback.redirect_uri}?code=abc&state=s1&iss=https://as.example")
        assert done.status_code == 200
        assert "Authorized" in done.text
    (result,) = got
    assert (result.code, result.state, result.iss) == ("abc", "s1", "https://as.example")  # type: ignore[attr-defined]
    with pytest.raises(httpx2.ConnectError):  # the port is closed again
        async with httpx2.AsyncClient() as browser:
            await browser.get(loopback.redirect_uri)


@pytest.mark.anyio
async def test_a_refused_authorization_is_an_error_naming_the_reason() -> None:
    loopback = LoopbackAuthorization(free_port(), show=lambda _url: None, timeout=30)
    await loopback.redirect("https://as.example/authorize")
    errors: list[BaseException] = []

    async def wait_for_callback() -> None:
        try:
            await loopback.callback()
        except OAuthFlowError as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg, httpx2.AsyncClient(timeout=30) as browser:
        tg.start_soon(wait_for_callback)
        denied = await browser.get(f"{loopback.redirect_uri}?error=access_denied&error_description=no+thanks")
        assert denied.status_code == 400
    assert [str(e) for e in errors] == ["the authorization server refused: access_denied no thanks"]


def test_a_taken_redirect_port_is_a_clear_error() -> None:
    async def main() -> None:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            loopback = LoopbackAuthorization(taken.getsockname()[1], show=lambda _url: None)
            with pytest.raises(OAuthFlowError, match="choose another port with --oauth-redirect-port"):
                await loopback.redirect("https://as.example/authorize")
            # The turn was given back: the next authorization may try again.
            with pytest.raises(OAuthFlowError):
                await loopback.redirect("https://as.example/authorize")

    anyio.run(main)


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_http_auth_arguments(parser)
    return parser.parse_args(argv)


def test_options_build_a_bearer_header_or_a_provider_per_server(tmp_path: Path) -> None:
    token = tmp_path / "t"
    token.write_text("s3cret\n")
    bearer = http_auth_from_args(parse("--token-file", str(token)))
    assert bearer.headers == {"Authorization": "Bearer s3cret"}
    assert bearer.auth_for("https://a/mcp") is None

    oauth = http_auth_from_args(parse("--auth", "oauth", "--oauth-store", str(tmp_path / "s.json")))
    first, second = oauth.auth_for("https://a/mcp"), oauth.auth_for("https://b/mcp")
    assert first is not None
    assert first is not second
    assert oauth.connect_timeout is not None
    assert oauth.connect_timeout > 300  # a person signs in within the first connect

    secret = tmp_path / "secret"
    secret.write_text("cs")
    cc = http_auth_from_args(
        parse(
            "--auth",
            "client-credentials",
            "--oauth-client-id",
            "me",
            "--oauth-client-secret-file",
            str(secret),
            "--oauth-issuer",
            "https://as.example",
        )
    )
    assert cc.auth_for("https://a/mcp") is not None
    assert cc.connect_timeout is None


def test_refresh_first_wraps_only_oauth_providers() -> None:
    basic = httpx2.BasicAuth("u", "p")
    assert refresh_first(basic) is basic


# -- --token-file ------------------------------------------------------------------------------------

SECRET = "s3cret-TOKEN-value"


def token_auth(path: Path, warnings: list[str] | None = None) -> dict[str, str] | None:
    seen = warnings if warnings is not None else []
    return http_auth_from_args(parse("--token-file", str(path)), warn=seen.append).headers


def test_a_private_token_file_gives_a_bearer_header_without_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "t"
    path.write_text(f"  {SECRET}\r\n")
    path.chmod(0o600)
    warnings: list[str] = []
    assert token_auth(path, warnings) == {"Authorization": f"Bearer {SECRET}"}
    assert warnings == []


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644])
def test_a_token_file_others_can_read_is_used_with_a_warning(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "t"
    path.write_text(SECRET)
    path.chmod(mode)
    warnings: list[str] = []
    assert token_auth(path, warnings) == {"Authorization": f"Bearer {SECRET}"}
    (warning,) = warnings
    assert str(path) in warning
    assert f"{mode:04o}" in warning
    assert "chmod 600" in warning
    assert SECRET not in warning


@pytest.mark.parametrize(
    ("content", "what"),
    [
        (f"{SECRET}\nsecond-line", "a line break"),
        (f"{SECRET}\rmore", "a line break"),
        (f"{SECRET}\x00more", "a NUL"),
        (f"{SECRET}\x07more", "a control character"),
    ],
)
def test_a_token_with_a_line_break_or_nul_is_refused_without_echoing_it(
    tmp_path: Path, content: str, what: str
) -> None:
    path = tmp_path / "t"
    path.write_text(content)
    path.chmod(0o600)
    with pytest.raises(ValueError, match="inside the secret") as info:
        token_auth(path)
    message = str(info.value)
    assert message.startswith(f"--token-file: {str(path)!r} ")
    assert what in message
    assert len(message.splitlines()) == 1
    assert SECRET not in message
    assert "more" not in message
    assert "second" not in message


def test_a_fifo_is_refused_at_once_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # nobody writes: reading it would block for good
    with pytest.raises(ValueError, match=r"is not a regular file \(a FIFO\)"):
        token_auth(fifo)


def test_a_device_is_refused_without_reading_it() -> None:
    with pytest.raises(ValueError, match=r"'/dev/zero' is not a regular file \(a character device\)"):
        token_auth(Path("/dev/zero"))


def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"is not a regular file \(a directory\)"):
        token_auth(tmp_path)


def test_a_huge_token_file_is_refused_without_reading_it_whole(tmp_path: Path) -> None:
    path = tmp_path / "t"
    with path.open("wb") as f:
        f.write(b"x" * 100)
        f.truncate(1 << 30)  # a sparse GiB: cheap on disk, a MemoryError if read whole
    path.chmod(0o600)
    with pytest.raises(ValueError, match=r"is larger than 65,536 bytes; a token file holds one token"):
        token_auth(path)


def test_a_token_file_that_is_not_utf8_or_empty_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "t"
    path.write_bytes(b"\xff\xfe" + SECRET.encode())
    path.chmod(0o600)
    with pytest.raises(ValueError, match="is not UTF-8 text") as info:
        token_auth(path)
    assert SECRET not in str(info.value)
    path.write_text(" \n")
    with pytest.raises(ValueError, match="is empty"):
        token_auth(path)
    with pytest.raises(ValueError, match=r"cannot read .*No such file"):
        token_auth(tmp_path / "missing")


def test_the_client_secret_file_follows_the_same_rules(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("cs\nleak")
    with pytest.raises(ValueError, match=r"--oauth-client-secret-file: .* a line break") as info:
        http_auth_from_args(
            parse(
                "--auth",
                "client-credentials",
                "--oauth-client-id",
                "me",
                "--oauth-client-secret-file",
                str(secret),
                "--oauth-issuer",
                "https://as.example",
            ),
            warn=lambda _: None,
        )
    assert "leak" not in str(info.value)
