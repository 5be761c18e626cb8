"""``asyncai-watch watch`` says so when its server goes away and comes back (issue 33: "a reconnect
prints nothing in plain mode"): a real memo server over HTTP, killed mid-watch and started again
on the same port. On a pipe each change of state is a line to keep; on a terminal (a pty) it is
the status line, rewritten in place. Every line is awaited (``anyio.fail_after``), nothing sleeps;
the watch resubscribes after its default backoff (1 s, then 2 s, ...; 5 attempts, 31 s in all)."""

from __future__ import annotations

import os
import signal
import subprocess
import urllib.parse

import anyio
import anyio.abc
import pytest

from tests.support.cli import CLI, WAIT, Lines, cli
from tests.support.memo import memo_http_server, memo_set

pytestmark = pytest.mark.anyio

PREFIX = "asyncai-watch: "


def _port(url: str) -> int:
    port = urllib.parse.urlsplit(url).port
    assert port is not None, url
    return port


async def test_on_a_pipe_a_restart_prints_the_loss_the_retry_and_the_resubscribe_as_lines() -> None:
    async with memo_http_server() as (url, first):
        address = f"127.0.0.1:{_port(url)}"
        async with cli("watch", "memo://notes", "--server", url, "--debounce", "0") as (proc, out):
            assert proc.stderr is not None
            err = Lines(proc.stderr)
            assert await err.next() == f"{PREFIX}watching memo://notes on memo (state); Ctrl-C stops"
            first.kill()
            lost = await err.next()
            assert lost.startswith(f"{PREFIX}memo://notes: subscription lost ("), lost
            assert lost.endswith("; reconnecting in 1 s (attempt 1)"), lost
            async with memo_http_server(address=address) as (again, _):
                assert again == url  # the same port: the watch's URL serves again
                # It may have tried (and failed) again before the server was up: one line each.
                retries = []
                while not (line := await err.next()).endswith(": subscribed again; watching"):
                    retries.append(line)
                assert line == f"{PREFIX}memo://notes: subscribed again; watching"
                for n, retry in enumerate(retries, 2):
                    assert retry.startswith(f"{PREFIX}memo://notes: subscription lost ("), retry
                    assert retry.endswith(f"s (attempt {n})"), retry
                # Watching the new server: its change prints.
                await memo_set(again, "todo", "milk")
                assert await out.next() == "ADDED todo"
            proc.send_signal(signal.SIGINT)
            with anyio.fail_after(WAIT):
                assert await proc.wait() == 0
            rest = b""
            with anyio.fail_after(WAIT):
                async for chunk in proc.stderr:
                    rest += chunk
    assert b"\x1b[" not in rest, rest  # a pipe gets no terminal control
    assert b"Traceback" not in rest, rest


class Terminal:
    """The CLI's stderr as a terminal: the pty's main side, read as it is written."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.seen = b""

    async def until(self, wanted: bytes) -> bytes:
        """Await ``wanted`` in what the CLI wrote after the last call; return that stretch."""
        with anyio.fail_after(WAIT):
            while wanted not in self.seen:
                await anyio.wait_readable(self.fd)
                try:
                    self.seen += os.read(self.fd, 65536)
                except OSError:  # EIO: the CLI closed its side
                    break
        assert wanted in self.seen, self.seen
        upto = self.seen.index(wanted) + len(wanted)
        found, self.seen = self.seen[:upto], self.seen[upto:]
        return found


async def test_on_a_terminal_a_restart_is_the_status_line_rewritten_in_place() -> None:
    import pty

    main, sub = pty.openpty()
    try:
        async with memo_http_server() as (url, first):
            address = f"127.0.0.1:{_port(url)}"
            async with await anyio.open_process(
                [*CLI, "watch", "memo://notes", "--server", url, "--debounce", "0"],
                stderr=sub,
                stdout=subprocess.PIPE,
            ) as proc:
                assert proc.stdout is not None
                out = Lines(proc.stdout)
                tty = Terminal(main)
                await tty.until(b"watching memo://notes on memo (state); Ctrl-C stops\r\n")
                first.kill()
                lost = await tty.until(b"(attempt 1)")
                # The status line: cleared and rewritten, no newline (it is replaced in place).
                assert lost.startswith(
                    b"\r\x1b[K" + PREFIX.encode() + b"memo://notes: subscription lost ("
                ), lost
                assert b"; reconnecting in 1 s (attempt 1)" in lost, lost
                assert b"\n" not in lost, lost
                async with memo_http_server(address=address) as (again, _):
                    back = await tty.until(b"subscribed again; watching")
                    assert back.endswith(
                        b"\r\x1b[K" + PREFIX.encode() + b"memo://notes: subscribed again; watching"
                    )
                    assert b"\n" not in back, back
                    await memo_set(again, "todo", "milk")
                    assert await out.next() == "ADDED todo"
                proc.send_signal(signal.SIGINT)
                with anyio.fail_after(WAIT):
                    assert await proc.wait() == 0
    finally:
        os.close(main)
        os.close(sub)
