"""The files server over real stdio, with real files in tmp_path and real inotify.

Waiting is always on the subscription: read, check, and if the expected change
is not there yet, wait for the next ``ResourceUpdated`` (level-triggered, so a
change between the read and the wait is never missed).
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.subscriptions import ResourceUpdated, Subscription

from asyncai_servers.files.__main__ import main as files_main
from asyncai_watch.core.eventlog import Sequencer
from asyncai_watch.core.events import EVENTS_MIME_TYPE
from asyncai_watch.server.http import running_http_server
from tests.support.local_token import local_client
from tests.support.procfs import child_pid, inotify_watches

pytestmark = pytest.mark.anyio

WAIT = 15.0
PROCESS_WAIT = 90.0  # a fresh interpreter's whole run (start, imports, exit) on a machine kept busy


@asynccontextmanager
async def files_server(*roots: Path, extra: tuple[str, ...] = ()) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "asyncai_servers.files", *map(str, roots), *extra]
    )
    async with Client(params) as client:
        yield client


@asynccontextmanager
async def files_http_server(*roots: Path) -> AsyncIterator[tuple[str, anyio.abc.Process]]:
    """Run ``asyncai_servers.files ROOT... --http 127.0.0.1:0``; yield its URL (from READY) and process."""
    argv = [sys.executable, "-m", "asyncai_servers.files", *map(str, roots), "--http", "127.0.0.1:0"]
    async with running_http_server(argv) as running:
        yield running


def replace_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


async def read(client: Client, uri: str) -> tuple[str, str | None]:
    content = (await client.read_resource(uri)).contents[0]
    text = getattr(content, "text", None)
    assert isinstance(text, str), content
    return text, content.mime_type


async def read_until(
    client: Client, sub: Subscription, uri: str, done: Callable[[str], bool]
) -> tuple[str, str | None]:
    """Re-read ``uri`` after each update until ``done(text)``."""
    with anyio.fail_after(WAIT):
        while True:
            text, mime = await read(client, uri)
            if done(text):
                return text, mime
            await sub.__anext__()


async def events_until(
    client: Client, sub: Subscription, uri: str, after: int, done: Callable[[list[dict[str, Any]]], bool]
) -> list[dict[str, Any]]:
    """The event-log events with seq > ``after``, once ``done(events)`` holds."""
    found: list[dict[str, Any]] = []

    def check(text: str) -> bool:
        found[:] = [e for e in json.loads(text)["events"] if e["seq"] > after]
        return done(found)

    await read_until(client, sub, uri, check)
    return found


def has(events: list[dict[str, Any]], kind: str, name: str) -> bool:
    return any(e["type"] == kind and e["object"]["name"] == name for e in events)


def iso_utc_ns(ns: int) -> str:
    """What a dir-events object's mtime reads as: ISO 8601 UTC, nanoseconds, ``Z``."""
    whole = datetime.datetime.fromtimestamp(ns // 1_000_000_000, datetime.UTC)
    return whole.strftime("%Y-%m-%dT%H:%M:%S") + f".{ns % 1_000_000_000:09d}Z"


def last_seq(text: str) -> int:
    events = json.loads(text)["events"]
    return int(events[-1]["seq"]) if events else 0


async def test_write_notifies_and_read_shows_new_content(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("first\n")
    config = tmp_path / "config.json"
    config.write_text('{"a": 1}')
    uri_text, uri_json = f"file://{notes}", f"file://{config}"
    async with files_server(tmp_path) as client:
        caps = client.server_capabilities
        assert caps is not None
        assert caps.resources is not None
        assert caps.resources.subscribe
        async with client.listen(resource_subscriptions=[uri_text, uri_json]) as sub:
            assert await read(client, uri_text) == ("first\n", "text/plain")
            text, mime = await read(client, uri_json)
            assert (json.loads(text), mime) == ({"a": 1}, "application/json")

            notes.write_text("second\n")
            with anyio.fail_after(WAIT):
                event = await sub.__anext__()
            assert getattr(event, "uri", None) == uri_text
            assert await read(client, uri_text) == ("second\n", "text/plain")

            config.write_text('{"a": 2, "b": [1, 2]}')
            text, _ = await read_until(client, sub, uri_json, lambda t: json.loads(t) != {"a": 1})
            assert json.loads(text) == {"a": 2, "b": [1, 2]}


async def test_write_then_rename_is_seen(tmp_path: Path) -> None:
    """Atomic saves replace the inode; the watch is on the directory so it keeps working."""
    config = tmp_path / "config.json"
    config.write_text('{"v": 0}')
    uri = f"file://{config}"
    async with files_server(tmp_path) as client, client.listen(resource_subscriptions=[uri]) as sub:
        assert json.loads((await read(client, uri))[0]) == {"v": 0}
        for v in (1, 2, 3):
            tmp = tmp_path / f".config.json.{v}.tmp"
            tmp.write_text(json.dumps({"v": v}))
            os.replace(tmp, config)
            want = {"v": v}
            text, _ = await read_until(client, sub, uri, lambda t: json.loads(t) == want)  # noqa: B023
            assert json.loads(text) == want


async def test_torn_json_is_an_in_band_error_and_the_next_good_write_recovers(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text('{"mode": "on"}')
    uri = f"file://{config}"
    async with files_server(tmp_path) as client, client.listen(resource_subscriptions=[uri]) as sub:
        assert json.loads((await read(client, uri))[0]) == {"mode": "on"}
        torn = '{"mode": "of'
        config.write_text(torn)  # what a reader can catch half-way through an in-place rewrite
        text, mime = await read_until(client, sub, uri, lambda t: t != '{"mode": "on"}')
        assert mime == "application/json"
        body = json.loads(text)
        assert list(body) == ["error"]
        assert "not valid JSON" in body["error"]
        assert str(config) in body["error"]
        assert torn not in text

        config.write_text('{"mode": "off"}')
        text, mime = await read_until(client, sub, uri, lambda t: "error" not in json.loads(t))
        assert (json.loads(text), mime) == ({"mode": "off"}, "application/json")


async def test_deleted_file_is_in_band_and_recreation_is_seen(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_text("[1]")
    uri = f"file://{target}"
    async with files_server(tmp_path) as client, client.listen(resource_subscriptions=[uri]) as sub:
        assert json.loads((await read(client, uri))[0]) == [1]
        target.unlink()
        text, _ = await read_until(client, sub, uri, lambda t: t != "[1]")
        assert "deleted" in json.loads(text)["error"]
        target.write_text("[1, 2]")
        text, _ = await read_until(client, sub, uri, lambda t: t == "[1, 2]")


async def test_dir_events_rename_delete_and_create_in_a_subdirectory(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("k")
    (tmp_path / "old-name.txt").write_text("rename me")
    (tmp_path / "doomed.txt").write_text("bye")
    uri = f"dir-events://{tmp_path}?recursive=true"
    async with files_server(tmp_path) as client, client.listen(resource_subscriptions=[uri]) as sub:
        text, mime = await read(client, uri)
        assert mime == EVENTS_MIME_TYPE
        start = last_seq(text)

        (tmp_path / "old-name.txt").rename(tmp_path / "new-name.txt")
        (tmp_path / "doomed.txt").unlink()
        (tmp_path / "sub" / "deeper").mkdir(parents=True)
        (tmp_path / "sub" / "deeper" / "made.txt").write_text("hello")
        (tmp_path / "keep.txt").write_text("kept, longer now")
        made_path = tmp_path / "sub" / "deeper" / "made.txt"
        # The file as it ends up. An event can show it half made (a scan of the new directory may
        # stat it between its creation and its write): the log's last word on it is what counts.
        made_final = {
            "path": str(made_path),
            "name": "sub/deeper/made.txt",
            "size": 5,
            "mtime": iso_utc_ns(made_path.stat().st_mtime_ns),
            "type": "file",
        }

        def complete(evs: list[dict[str, Any]]) -> bool:
            made = [e for e in evs if e["object"]["name"] == "sub/deeper/made.txt"]
            keep = [e for e in evs if e["object"]["name"] == "keep.txt"]
            return (
                has(evs, "DELETED", "old-name.txt")
                and has(evs, "ADDED", "new-name.txt")
                and has(evs, "DELETED", "doomed.txt")
                and has(evs, "ADDED", "sub/deeper/made.txt")
                and has(evs, "MODIFIED", "keep.txt")
                and made[-1]["object"] == made_final
                and keep[-1]["object"]["size"] == len("kept, longer now")
            )

        events = await events_until(client, sub, uri, start, complete)
        seqs = [e["seq"] for e in events]
        assert seqs == sorted(set(seqs))
        assert has(events, "ADDED", "sub")
        assert has(events, "ADDED", "sub/deeper")
        # A rewrite in place can be seen truncated on the way (1 -> 0 -> 16 bytes): from the old
        # object to the final one.
        keep = [e for e in events if e["object"]["name"] == "keep.txt"]
        assert keep[0]["old"]["size"] == 1
        assert keep[-1]["object"]["size"] == len("kept, longer now")
        doomed = next(e for e in events if e["type"] == "DELETED" and e["object"]["name"] == "doomed.txt")
        assert doomed["object"]["size"] == 3  # the last known object
        # Nothing is reported twice or spuriously.
        assert not has(events, "ADDED", "keep.txt")
        assert not has(events, "DELETED", "keep.txt")


async def test_dir_events_non_recursive_and_glob(tmp_path: Path) -> None:
    (tmp_path / "nested").mkdir()
    flat = f"dir-events://{tmp_path}"
    only_json = f"dir-events://{tmp_path}?recursive=true&glob=*.json"
    async with (
        files_server(tmp_path) as client,
        client.listen(resource_subscriptions=[flat, only_json]) as sub,
    ):
        start_flat = last_seq((await read(client, flat))[0])
        start_json = last_seq((await read(client, only_json))[0])
        (tmp_path / "nested" / "deep.json").write_text("{}")
        (tmp_path / "nested" / "deep.txt").write_text("x")
        (tmp_path / "top.txt").write_text("x")

        json_events = await events_until(
            client, sub, only_json, start_json, lambda evs: has(evs, "ADDED", "nested/deep.json")
        )
        assert {e["object"]["name"] for e in json_events} == {"nested/deep.json"}

        flat_events = await events_until(
            client, sub, flat, start_flat, lambda evs: has(evs, "ADDED", "top.txt")
        )
        assert all("/" not in e["object"]["name"] for e in flat_events), flat_events


async def test_dir_events_exclude_leaves_out_matching_entries_and_all_below_them(tmp_path: Path) -> None:
    (tmp_path / ".git" / "objects").mkdir(parents=True)
    (tmp_path / "src").mkdir()
    uri = f"dir-events://{tmp_path}?recursive=true&exclude=.git,node_modules,*.tmp"
    async with files_server(tmp_path) as client, client.listen(resource_subscriptions=[uri]) as sub:
        pid = child_pid("asyncai_servers.files")
        text, _ = await read(client, uri)
        start = last_seq(text)
        # The root and src/ are watched; .git/ and .git/objects/ get no inotify watch.
        assert inotify_watches(pid) == [2]
        (tmp_path / ".git" / "objects" / "ab").write_text("blob")
        (tmp_path / ".git" / "HEAD").write_text("ref")
        (tmp_path / "src" / "node_modules" / "pkg").mkdir(parents=True)
        (tmp_path / "src" / "node_modules" / "pkg" / "index.js").write_text("x")
        (tmp_path / "src" / "draft.tmp").write_text("x")
        (tmp_path / "src" / "main.py").write_text("print()")
        events = await events_until(client, sub, uri, start, lambda evs: has(evs, "ADDED", "src/main.py"))
        assert {e["object"]["name"] for e in events} == {"src/main.py"}
        now = time.time_ns()
        added = events[-1]["object"]
        assert added["mtime"] == iso_utc_ns((tmp_path / "src" / "main.py").stat().st_mtime_ns)
        assert abs(datetime.datetime.fromisoformat(added["mtime"]).timestamp() - now / 1e9) < 3600
        # A directory rename from an excluded name to a kept one is seen, with what it holds.
        (tmp_path / "src" / "node_modules").rename(tmp_path / "src" / "vendor")
        events = await events_until(
            client, sub, uri, start, lambda evs: has(evs, "ADDED", "src/vendor/pkg/index.js")
        )
        assert not any("node_modules" in e["object"]["name"] for e in events), events


async def test_dir_events_exclude_is_validated_and_the_error_says_what_is_accepted(tmp_path: Path) -> None:
    async with files_server(tmp_path) as client:
        for query, problem in [
            ("exclude=", "exclude holds an empty glob"),
            ("exclude=a,,b", "exclude holds an empty glob"),
            ("exclude=/etc", "exclude holds the absolute glob '/etc'"),
            ("exclude=a&exclude=b", "exclude is given more than once"),
            ("exclude=" + ",".join(["x"] * 33), "exclude lists 33 globs"),
            ("exclude=" + "x" * 300, "exclude holds a glob of 300 characters"),
        ]:
            with pytest.raises(MCPError) as caught:
                await client.read_resource(f"dir-events://{tmp_path}?{query}")
            message = str(caught.value)
            assert problem in message, (query, message)
            assert "exclude takes up to 32 globs of at most 256 characters, comma-separated" in message
            assert caught.value.error.code == -32602


async def test_burst_of_writes_coalesces(tmp_path: Path) -> None:
    """1,000 writes to one file while the client has not re-read: one update, not 1,000."""
    target = tmp_path / "counter.txt"
    target.write_text("start")
    uri = f"file://{target}"
    updates = 0
    bumped = {"event": anyio.Event()}

    def burst() -> None:
        for i in range(1000):
            target.write_text(f"n={i}")

    async with files_server(tmp_path) as client, client.listen(resource_subscriptions=[uri]) as sub:
        assert (await read(client, uri))[0] == "start"

        async def count() -> None:
            nonlocal updates
            async for _ in sub:  # consume every update, read nothing
                updates += 1
                bumped["event"].set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(count)
            await anyio.to_thread.run_sync(burst)
            with anyio.fail_after(WAIT):
                await bumped["event"].wait()
            during = updates
            # After a read starts, the next change is signalled again: the write below, or
            # the burst's tail (events the server handles only after the read started).
            bumped["event"] = anyio.Event()
            assert (await read(client, uri))[0] == "n=999"
            target.write_text("after")
            with anyio.fail_after(WAIT):
                await bumped["event"].wait()
            assert (await read(client, uri))[0] == "after"
            tg.cancel_scope.cancel()
    assert during == 1, f"{during} updates for 1000 writes before any re-read"
    assert updates >= 2


TRAVERSALS = {
    "dotdot": "file://{root}/../outside/secret.txt",
    "encoded-dotdot": "file://{root}/%2e%2e/outside/secret.txt",
    "absolute-elsewhere": "file://{outside}/secret.txt",
    "symlinked-dir": "file://{root}/link/secret.txt",
    "symlinked-file": "file://{root}/secret-link.txt",
    "relative": "file://secret.txt",
    "dir-symlink": "dir-events://{root}/link?recursive=true",
    "dir-elsewhere": "dir-events://{outside}",
    "dir-dotdot": "dir-events://{root}/..?recursive=true",
}


async def test_traversal_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP SECRET")
    (root / "link").symlink_to(outside)
    (root / "secret-link.txt").symlink_to(outside / "secret.txt")
    uris = {name: t.format(root=root, outside=outside) for name, t in TRAVERSALS.items()}
    async with files_server(root) as client:
        for name, uri in uris.items():
            # A listen on it is refused before the ack (no watcher starts), with the read's error.
            with anyio.fail_after(WAIT), pytest.raises(MCPError) as refused:
                async with client.listen(resource_subscriptions=[uri]):
                    pass
            with pytest.raises(MCPError) as caught:
                await client.read_resource(uri)
            for message in (str(caught.value), str(refused.value)):
                assert "refused" in message, (name, message)
                assert str(root) in message, (name, message)
                assert "TOP SECRET" not in message
                if "outside" not in uri:  # refused for where a link leads: which place is not said
                    assert str(outside) not in message, (name, message)
            assert refused.value.error.code == -32602
        # Inside the root, a symlink that stays inside is fine.
        (root / "inner.txt").write_text("ok")
        (root / "inner-link.txt").symlink_to(root / "inner.txt")
        assert (await read(client, f"file://{root}/inner-link.txt"))[0] == "ok"


async def test_unknown_and_malformed_uris_say_what_is_served(tmp_path: Path) -> None:
    (tmp_path / "plain.txt").write_text("x")
    async with files_server(tmp_path) as client:
        for uri, expect in [
            ("memo://notes", "file://{+path}"),
            (f"dir-events://{tmp_path}?recursive=maybe", "recursive=true"),
            (f"file://{tmp_path}/missing.json", "does not exist"),
            (f"file://{tmp_path}", "is a directory"),
            (f"dir-events://{tmp_path}/plain.txt", "is not a directory"),
            (f"dir-events://{tmp_path}/nowhere", "not an existing directory"),
        ]:
            with pytest.raises(MCPError) as caught:
                await client.read_resource(uri)
            assert expect in str(caught.value), (uri, str(caught.value))


async def test_lists_templates_with_examples(tmp_path: Path) -> None:
    real = await anyio.to_thread.run_sync(os.path.realpath, tmp_path)
    async with files_server(tmp_path) as client:
        templates = (await client.list_resource_templates()).resource_templates
        by_name = {t.uri_template: t for t in templates}
        assert set(by_name) == {"file://{+path}", "dir-events://{+path}{?recursive,glob,exclude}"}
        for t in templates:
            assert t.description is not None
            last = t.description.strip().splitlines()[-1]
            assert last.startswith("Example: await watch_start(name=")
            assert real in last
        assert by_name["dir-events://{+path}{?recursive,glob,exclude}"].mime_type == EVENTS_MIME_TYPE
        resources = (await client.list_resources()).resources
        assert [r.uri for r in resources] == [f"dir-events://{real}?recursive=true"]


async def test_bad_roots_fail_at_startup(tmp_path: Path) -> None:
    afile = tmp_path / "plain.txt"
    afile.write_text("x")
    for argv, expect in [
        ([str(tmp_path / "missing")], "does not exist"),
        ([str(tmp_path), str(afile)], "not a directory"),
        ([], "ROOT"),
    ]:
        with anyio.fail_after(PROCESS_WAIT):
            done = await anyio.run_process(
                [sys.executable, "-m", "asyncai_servers.files", *argv], check=False
            )
        assert done.returncode == 2, (argv, done)
        err = done.stderr.decode()
        assert expect in err, err
        assert not argv or argv[-1] in err, err


async def test_listeners_share_one_inotify_instance_and_one_watch_per_directory(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a")
    (tmp_path / "b.txt").write_text("b")
    (tmp_path / "sub").mkdir()
    a, b = f"file://{tmp_path}/a.txt", f"file://{tmp_path}/b.txt"
    sub = f"dir-events://{tmp_path}/sub"
    async with files_server(tmp_path) as client:
        pid = child_pid("asyncai_servers.files")
        assert inotify_watches(pid) == []  # nothing is watched until someone listens
        async with (
            client.listen(resource_subscriptions=[a]),
            client.listen(resource_subscriptions=[a]) as second,
        ):
            await read(client, a)  # the first read waits for the watch to exist
            assert inotify_watches(pid) == [1]  # one instance, one watch: the directory
            async with client.listen(resource_subscriptions=[b, sub]):
                await read(client, b)
                await read(client, sub)
                # Still one instance; b.txt shares a.txt's directory watch, sub/ has its own.
                assert inotify_watches(pid) == [2]
            # The watch b.txt shared is still there for a.txt: both listeners get its updates.
            (tmp_path / "a.txt").write_text("a2")
            await read_until(client, second, a, lambda t: t == "a2")


async def test_relisten_continues_the_log_with_what_changed_meanwhile(tmp_path: Path) -> None:
    uri = f"dir-events://{tmp_path}"
    async with files_server(tmp_path) as client:
        async with client.listen(resource_subscriptions=[uri]) as sub:
            start = last_seq((await read(client, uri))[0])
            (tmp_path / "one.txt").write_text("1")
            events = await events_until(client, sub, uri, start, lambda evs: has(evs, "ADDED", "one.txt"))
            seen = events[-1]["seq"]
        (tmp_path / "two.txt").write_text("2")  # nobody listens (or the old watcher is just stopping)
        async with client.listen(resource_subscriptions=[uri]) as sub:
            events = await events_until(client, sub, uri, seen, lambda evs: has(evs, "ADDED", "two.txt"))
        assert [e["seq"] for e in events] == list(range(seen + 1, seen + 1 + len(events)))
        assert not has(events, "ADDED", "one.txt")


async def test_a_reader_that_falls_behind_the_ring_is_told_gap(tmp_path: Path) -> None:
    uri = f"dir-events://{tmp_path}"
    async with files_server(tmp_path) as client, client.listen(resource_subscriptions=[uri]) as sub:
        baseline, _ = await read(client, uri)
        sequencer = Sequencer()
        assert sequencer.prime(baseline) is None
        assert sequencer.last_seq == 0  # the body's last_seq: a seq to measure a gap from, even when empty

        def make_files() -> None:
            for i in range(300):
                (tmp_path / f"f{i:03}").write_text("x")

        await anyio.to_thread.run_sync(make_files)
        text, _ = await read_until(client, sub, uri, lambda t: '"name":"f299"' in t)
        events = json.loads(text)["events"]
        assert len(events) == 256  # the ring's capacity
        fed = sequencer.feed(text)
        gaps = [e for e in fed.events if e.type == "GAP"]
        assert len(gaps) == 1
        assert gaps[0].fields["missed"] == events[0]["seq"] - sequencer_start(baseline) - 1
        assert {e.new["name"] for e in fed.events if e.type == "ADDED"} <= {f"f{i:03}" for i in range(300)}


def sequencer_start(baseline: str) -> int:
    return int(json.loads(baseline)["last_seq"])


async def test_names_that_are_not_utf8_are_skipped_and_the_watch_carries_on(tmp_path: Path) -> None:
    uri = f"dir-events://{tmp_path}"
    async with files_server(tmp_path) as client, client.listen(resource_subscriptions=[uri]) as sub:
        start = last_seq((await read(client, uri))[0])
        fd = os.open(os.path.join(os.fsencode(tmp_path), b"bad-\xff.txt"), os.O_CREAT | os.O_WRONLY)
        os.close(fd)
        (tmp_path / "good.txt").write_text("still watched")
        events = await events_until(client, sub, uri, start, lambda evs: has(evs, "ADDED", "good.txt"))
        assert not any("bad-" in json.dumps(e) for e in events), events  # JSON cannot carry the name
        assert not any(e["type"] == "ERROR" for e in events), events


def _in_user_namespace_with_watch_limit(limit: int) -> list[str] | None:
    """A command prefix that runs a program in a new user namespace allowed ``limit`` inotify
    watches (``user.max_inotify_watches``), or None where user namespaces are not allowed."""
    probe = [
        "unshare",
        "--user",
        "--map-root-user",
        "sh",
        "-c",
        f"echo {limit} > /proc/sys/user/max_inotify_watches",
    ]
    if shutil.which("unshare") is None or subprocess.run(probe, capture_output=True, check=False).returncode:
        return None
    return [
        "unshare",
        "--user",
        "--map-root-user",
        "sh",
        "-c",
        f'echo {limit} > /proc/sys/user/max_inotify_watches && exec "$@"',
        "sh",
    ]


async def test_a_watcher_failure_is_retried_then_reported_in_band(tmp_path: Path) -> None:
    """The inotify watch limit, hit for real (a user namespace allowed 3 watches) by directories
    made under a recursive watch: the watch says so in-band, retries, gives up, and the
    listen, the log and the server stay up."""
    prefix = _in_user_namespace_with_watch_limit(3)
    if prefix is None:
        pytest.skip("user namespaces are not available here (unshare --user)")
    uri = f"dir-events://{tmp_path}?recursive=true"
    argv = [*prefix, sys.executable, "-m", "asyncai_servers.files", str(tmp_path)]
    params = StdioServerParameters(command=argv[0], args=argv[1:])
    async with Client(params) as client, client.listen(resource_subscriptions=[uri]) as sub:
        start = last_seq((await read(client, uri))[0])  # one watch: the root
        for name in ("a", "b", "c", "d"):  # the third new directory is one too many
            (tmp_path / name).mkdir()

        def gave_up(evs: list[dict[str, Any]]) -> bool:
            return any("watch this URI again" in e.get("message", "") for e in evs)

        events = await events_until(client, sub, uri, start, gave_up)
        errors = [e["message"] for e in events if e["type"] == "ERROR"]
        assert "restarting the watch (attempt 1 of 3)" in errors[0], errors
        assert "the inotify watch limit was reached" in errors[-1], errors
        assert "max_user_watches" in errors[-1], errors
        # The log and the connection are still served.
        text, _ = await read(client, uri)
        assert json.loads(text)["events"][-1]["seq"] >= events[-1]["seq"]
        (tmp_path / "f.txt").write_text("x")
        assert (await read(client, f"file://{tmp_path}/f.txt"))[0] == "x"


async def test_http_listen_gets_the_update_for_a_write_and_reads_the_new_content(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text('{"v": 1}')
    uri = f"file://{config}"
    async with files_http_server(tmp_path) as (url, _proc):
        address = url.removeprefix("http://").removesuffix("/mcp")
        host, _, port = address.rpartition(":")
        assert (host, url) == ("127.0.0.1", f"http://{address}/mcp")
        assert int(port) > 0  # the real port, not the 0 asked for
        async with local_client(url) as client:
            assert client.protocol_version == "2026-07-28"
            async with client.listen(resource_subscriptions=[uri]) as sub:
                assert json.loads((await read(client, uri))[0]) == {"v": 1}
                replace_atomically(config, '{"v": 2}')  # one change: the first update's read shows it
                with anyio.fail_after(WAIT):
                    event = await sub.__anext__()
                assert event == ResourceUpdated(uri=uri)
                assert await read(client, uri) == ('{"v": 2}', "application/json")


async def test_http_server_ends_open_listens_and_exits_on_sigterm(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a")
    uri = f"file://{tmp_path}/a.txt"
    async with files_http_server(tmp_path) as (url, proc), local_client(url) as client:
        async with client.listen(resource_subscriptions=[uri]) as sub:
            await read(client, uri)
            proc.terminate()
            with anyio.fail_after(WAIT):
                async for _ in sub:  # the stream ends (gracefully) instead of holding shutdown up
                    pass
                code = await proc.wait()
        assert code == 0, code


async def test_http_port_in_use_fails_with_a_message(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        with anyio.fail_after(PROCESS_WAIT):
            done = await anyio.run_process(
                [sys.executable, "-m", "asyncai_servers.files", str(tmp_path), "--http", address], check=False
            )
    assert done.returncode == 2, done
    err = done.stderr.decode()
    assert f"cannot serve HTTP on {address}: Address already in use" in err, err
    assert "Traceback" not in err, err


@pytest.mark.parametrize("address", ["nonsense", "127.0.0.1:99999", ":8080"])
def test_cli_rejects_a_bad_http_address(
    address: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        files_main([str(tmp_path), "--http", address])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "--http expects HOST:PORT" in err, err
    assert repr(address) in err, err


async def test_deleting_a_watched_files_directory_is_in_band_and_recreating_it_recovers(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    target = root / "a" / "b" / "state.json"
    target.parent.mkdir(parents=True)
    target.write_text('{"v": 1}')
    uri = f"file://{target}"
    async with files_server(root) as client, client.listen(resource_subscriptions=[uri]) as sub:
        assert json.loads((await read(client, uri))[0]) == {"v": 1}
        shutil.rmtree(root / "a")  # the parent and the grandparent go
        text, mime = await read_until(client, sub, uri, lambda t: "error" in json.loads(t))
        assert mime == "application/json"
        error = json.loads(text)["error"]
        assert f"its directory {target.parent} was deleted or moved away" in error, error
        assert "reports it again when it is recreated" in error, error
        # Both levels come back (the watch waits on the nearest existing ancestor, then steps down).
        target.parent.mkdir(parents=True)
        for v in (2, 3, 4):
            # Each write must bring an update: a dead watch could only have left a couple of
            # updates from before the deletion unread, so three in a row prove it is live.
            replace_atomically(target, json.dumps({"v": v}))
            with anyio.fail_after(WAIT):
                await sub.__anext__()
            assert json.loads((await read(client, uri))[0]) == {"v": v}


async def test_deleting_the_watched_root_reports_deleted_and_recreating_it_resumes(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "keep.txt").write_text("k")
    (root / "sub" / "deep.txt").write_text("d")
    dir_uri = f"dir-events://{root}?recursive=true"
    file_uri = f"file://{root}/keep.txt"
    async with (
        files_server(root) as client,
        client.listen(resource_subscriptions=[dir_uri, file_uri]) as sub,
    ):
        start = last_seq((await read(client, dir_uri))[0])
        assert (await read(client, file_uri))[0] == "k"
        shutil.rmtree(root)

        events = await events_until(
            client, sub, dir_uri, start, lambda evs: any(e["type"] == "ERROR" for e in evs)
        )
        for name in ("keep.txt", "sub", "sub/deep.txt"):
            assert has(events, "DELETED", name), (name, events)
        error = next(e for e in events if e["type"] == "ERROR")
        assert f"directory {root} was deleted or moved away" in error["message"], error
        assert f"once {root} exists again, its entries are reported ADDED" in error["message"], error
        text, _ = await read_until(client, sub, file_uri, lambda t: t != "k")
        assert f"its directory {root} was deleted or moved away" in json.loads(text)["error"]

        root.mkdir()
        (root / "keep.txt").write_text("back")
        events = await events_until(
            client, sub, dir_uri, error["seq"], lambda evs: has(evs, "ADDED", "keep.txt")
        )
        assert not any(e["type"] == "ERROR" for e in events), events
        await read_until(client, sub, file_uri, lambda t: t == "back")
        # Watching goes on in the new directory.
        (root / "more.txt").write_text("m")
        await events_until(client, sub, dir_uri, error["seq"], lambda evs: has(evs, "ADDED", "more.txt"))


async def test_moving_the_watched_root_away_and_making_a_new_one(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "keep.txt").write_text("k")
    dir_uri = f"dir-events://{root}"
    file_uri = f"file://{root}/keep.txt"
    async with (
        files_server(root) as client,
        client.listen(resource_subscriptions=[dir_uri, file_uri]) as sub,
    ):
        start = last_seq((await read(client, dir_uri))[0])
        assert (await read(client, file_uri))[0] == "k"
        moved = tmp_path / "root.old"
        root.rename(moved)

        events = await events_until(
            client, sub, dir_uri, start, lambda evs: any(e["type"] == "ERROR" for e in evs)
        )
        assert has(events, "DELETED", "keep.txt"), events
        error = next(e for e in events if e["type"] == "ERROR")
        assert "was deleted or moved away" in error["message"], error
        text, _ = await read_until(client, sub, file_uri, lambda t: t != "k")
        assert "was deleted or moved away" in json.loads(text)["error"]

        # The old inotify watches follow the moved directory; none of its changes may surface.
        (moved / "stray.txt").write_text("x")
        (moved / "keep.txt").write_text("changed elsewhere")
        root.mkdir()
        (root / "keep.txt").write_text("new")
        events = await events_until(
            client, sub, dir_uri, error["seq"], lambda evs: has(evs, "ADDED", "keep.txt")
        )
        assert not any("stray" in json.dumps(e) or "root.old" in json.dumps(e) for e in events), events
        await read_until(client, sub, file_uri, lambda t: t == "new")


async def test_a_moved_ancestor_is_noticed_at_the_next_change_inside_it(tmp_path: Path) -> None:
    """inotify says nothing to a directory whose parent moved; its next event gives it away."""
    target = tmp_path / "a" / "b" / "state.json"
    target.parent.mkdir(parents=True)
    target.write_text('{"v": 1}')
    uri = f"file://{target}"
    async with files_server(tmp_path) as client, client.listen(resource_subscriptions=[uri]) as sub:
        assert json.loads((await read(client, uri))[0]) == {"v": 1}
        (tmp_path / "a").rename(tmp_path / "z")
        (tmp_path / "z" / "b" / "state.json").write_text('{"v": "elsewhere"}')  # reported as our path
        text, _ = await read_until(client, sub, uri, lambda t: "error" in json.loads(t))
        assert f"its directory {target.parent} was deleted or moved away" in json.loads(text)["error"]
        target.parent.mkdir(parents=True)
        for v in (2, 3, 4):  # live again at the old path (see the deletion test for why three)
            replace_atomically(target, json.dumps({"v": v}))
            with anyio.fail_after(WAIT):
                await sub.__anext__()
            assert json.loads((await read(client, uri))[0]) == {"v": v}


@pytest.mark.anyio
async def test_a_socket_or_fifo_inside_the_root_is_a_clear_error_not_an_internal_one(tmp_path: Path) -> None:
    """Issue 28 item 8: a Unix socket inside the root was "Internal server error" with a
    traceback. Each kind is named, with what is served, and a FIFO never blocks the read."""
    os.mkfifo(tmp_path / "fifo")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "sock"))
        async with files_server(tmp_path) as client:
            for name, kind in [("sock", "a socket"), ("fifo", "a FIFO")]:
                with anyio.fail_after(30), pytest.raises(MCPError) as info:
                    await client.read_resource(f"file://{tmp_path / name}")
                assert info.value.message == (
                    f"{tmp_path / name} is {kind}, not a regular file; "
                    "file:// serves regular files, dir-events:// directories"
                )
            (tmp_path / "ok.txt").write_text("fine")
            with anyio.fail_after(30):
                assert await read(client, f"file://{tmp_path / 'ok.txt'}") == ("fine", "text/plain")
