"""Thousands of files of one directory, watched at once through one real files server process.

Each watched target used to cost an inotify instance of its own, and the kernel allows a user
about 128 (``fs.inotify.max_user_instances``, shared with every other process of the user), so
a client failed at about the 128th file. Now the server holds one instance, and the files of
one directory share that directory's one watch. What is asserted is read from ``/proc`` (the
server's inotify instances and the watches in each), and that a change to one file among
5,000 reaches its watcher.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.subscriptions import ResourceUpdated

from asyncai_watch import Limits, McpResourceSource, WatchManager
from tests.support.procfs import child_pid, inotify_watches

pytestmark = pytest.mark.anyio

N = 5_000
WAIT = 60.0  # a listen of 5,000 URIs on a busy 2-core machine


def many_files(root: Path) -> list[str]:
    directory = root / "many"
    directory.mkdir()
    for i in range(N):
        (directory / f"f{i}.txt").write_text("0")
    return [f"file://{directory}/f{i}.txt" for i in range(N)]


async def test_one_listen_of_5000_files_takes_one_instance_and_one_watch(tmp_path: Path) -> None:
    uris = await anyio.to_thread.run_sync(many_files, tmp_path)
    changed = tmp_path / "many" / "f4321.txt"
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "asyncai_servers.files", str(tmp_path)]
    )
    async with Client(params) as client:
        pid = child_pid("asyncai_servers.files")
        assert inotify_watches(pid) == []
        with anyio.fail_after(WAIT):
            async with client.listen(resource_subscriptions=uris) as sub:
                # The ack means "watched": one instance, holding one watch (the directory).
                assert inotify_watches(pid) == [1]
                changed.write_text("changed")
                event = await sub.__anext__()
                assert event == ResourceUpdated(uri=uris[4321])
                content = (await client.read_resource(uris[4321])).contents[0]
                assert getattr(content, "text", None) == "changed"
                assert inotify_watches(pid) == [1]


async def test_5000_watches_through_the_watch_manager_take_one_instance(tmp_path: Path) -> None:
    uris = await anyio.to_thread.run_sync(many_files, tmp_path)
    changed = tmp_path / "many" / "f1234.txt"
    argv = [sys.executable, "-m", "asyncai_servers.files", str(tmp_path)]
    limits = Limits(debounce_quiet=0.2, debounce_max_wait=5.0, max_watches=N)
    async with (
        McpResourceSource.stdio(argv, name="files") as source,
        WatchManager([source], limits=limits) as m,
    ):
        pid = child_pid("asyncai_servers.files")
        with anyio.fail_after(WAIT * 2):
            async with anyio.create_task_group() as tg:  # started at once, as a restore does
                for i, uri in enumerate(uris):
                    tg.start_soon(m.watch_start, f"f{i}", uri)
        assert len(m.watch_list()) == N
        assert inotify_watches(pid) == [1]
        changed.write_text("changed")
        with anyio.fail_after(WAIT):
            notice = await m.notices.receive()
        assert notice.meta["name"] == "f1234", notice
        assert notice.meta["uri"] == uris[1234]
        assert "changed" in notice.text, notice.text
        assert inotify_watches(pid) == [1]
