"""The files reference server: ``file://`` state and ``dir-events://`` event logs over inotify.

Who listens to what: one :class:`~asyncai_watch.server.SubscriptionRegistry`
holds the subscriptions of both protocol eras (``subscriptions/listen``, and
``resources/subscribe`` from 2025-era clients). It tells the server when a URI
string gains its first listener or loses its last; the first URI of a target
joins or starts its watcher, the last one leaving stops it. A ``dir-events``
target has a watcher of its own (:class:`_DirWatcher`); the watched files of one
directory share one (:class:`_FileGroup`: one watch of the directory, and a
change costs a look at the files it names). Every watcher's inotify watches are
in the server's one inotify instance (:class:`~asyncai_servers.files.inotify.Inotify`),
where watchers of the same directory share its watch descriptor. A target's
update goes to every URI string its listeners used, since subscriptions match
URIs as exact strings. A URI this server does not serve (or a path it refuses)
is refused at the subscription, with the same error a read gets.

Updates are level-triggered: after one ``ResourceUpdated`` a target stays quiet
until a read of it starts (see :meth:`_FileGroup.publish`).

A listen is acknowledged (a ``resources/subscribe`` answered) only once the
inotify watches of its targets exist (the registry's ``ready`` hook waits on each
watcher's ``ready`` event), so a change made after the ack is always seen. A read of a watched URI
waits the same way, so the client's baseline read is covered too. A read of a
``dir-events://`` URI that nobody watches takes stock itself, so each URI has one
log (one ``log_id``) and a later read or watch reports what changed since.

A watched directory that is deleted or moved away is reported in-band, and the
watcher then waits on the nearest existing ancestor for it to come back (see
:class:`_Watcher`).
"""

from __future__ import annotations

import difflib
import os
import stat
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final, Protocol, TypeVar

import anyio
import anyio.abc
import anyio.lowlevel
import attrs
import mcp_types as types
from mcp import MCPError, UriTemplate
from mcp.server import Server
from mcp.server.context import ServerRequestContext

from asyncai_servers.files.change_source import Batch, ChangeSource, NotifyTiming
from asyncai_servers.files.content import (
    DEFAULT_MAX_BYTES,
    FileMissing,
    FileState,
    NotAFile,
    Unreadable,
    error_body,
    read_state,
)
from asyncai_servers.files.dirlog import DirSpec, FileObject, observe, reconcile, scan
from asyncai_servers.files.inotify import ChangeSourceError, Inotify, InotifyUnavailable
from asyncai_servers.files.paths import PathRefused, Roots
from asyncai_watch import EVENTS_MIME_TYPE
from asyncai_watch.clock import Clock, SystemClock
from asyncai_watch.server.errors import resource_error, unknown_tool
from asyncai_watch.server.eventlog import EventRing
from asyncai_watch.server.schemas import input_schemas
from asyncai_watch.server.subscriptions import DEFAULT_MAX_URIS, SubscriptionRegistry

__all__ = ["DIR_TEMPLATE", "FILE_TEMPLATE", "FilesServer", "UriError"]

FILE_TEMPLATE: Final = "file://{+path}"
DIR_TEMPLATE: Final = "dir-events://{+path}{?recursive,glob}"
_FILE = UriTemplate.parse(FILE_TEMPLATE)
_DIR = UriTemplate.parse(DIR_TEMPLATE)

READY_TIMEOUT: Final = 30.0
"""How long a read waits for a watcher's inotify watches (a huge recursive tree is slow)."""
MAX_RESTARTS: Final = 3
"""Consecutive watcher failures tolerated before a watch gives up."""

T = TypeVar("T")

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off", ""}


async def _run(fn: Callable[..., T], *args: Any) -> T:
    """File-system calls off the event loop (a slow mount must not stall other listeners)."""
    return await anyio.to_thread.run_sync(fn, *args)


class UriError(ValueError):
    """A URI this server does not serve; the message says what is accepted."""


@attrs.frozen
class FileTarget:
    path: str  # real path of the file


@attrs.frozen
class DirTarget:
    spec: DirSpec


Target = FileTarget | DirTarget


@attrs.define
class DirState:
    """What outlives a directory watcher: its ring (so seqs never go back) and last known objects."""

    ring: EventRing = attrs.field(factory=EventRing)
    known: dict[str, FileObject] = attrs.field(factory=dict)
    seeded: bool = False
    present: bool = False  # the directory existed when last looked at (its loss is reported once)
    # Held while a scan or batch is turned into events: a read (with no watcher) and a
    # starting watcher may both take stock, and an older scan must not land after a newer one.
    lock: anyio.Lock = attrs.field(factory=anyio.Lock)

    async def take_stock(self, spec: DirSpec) -> bool:
        """Scan the directory; the first time that is the baseline, later ones append what changed.

        True when events were appended. Call with :attr:`lock` held.
        """
        found = await anyio.to_thread.run_sync(scan, spec)
        self.present = True
        if not self.seeded:
            self.known = found
            self.seeded = True  # the ring's last_seq (0 here) gives baselines a seq to measure GAPs from
            return False
        observed: dict[str, FileObject | None] = dict.fromkeys(self.known)
        observed.update(found)
        events = reconcile(self.known, observed)
        for event in events:
            self.ring.append(event)
        return bool(events)


def _bool_param(name: str, value: object, uri: str) -> bool:
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise UriError(f"{uri}: {name}={value!r} is not a boolean; use {name}=true or {name}=false")


DirIdentity = tuple[int, int]


def _dir_identity(path: str) -> DirIdentity | None:
    """``(st_dev, st_ino)`` of the directory at ``path`` (not following a symlink), ``None`` if there is none.

    A directory moved away and another made in its place has a new identity: the old
    inotify watches follow the moved inode, so they must be replaced.
    """
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


def _nearest_directory(path: str) -> tuple[str, DirIdentity | None, str]:
    """``path`` or its closest ancestor that is a directory now, its identity, and its child on the way to ``path``."""
    step = path
    while True:
        identity = _dir_identity(path)
        parent = os.path.dirname(path)
        if identity is not None or parent == path:
            return path, identity, step
        step, path = path, parent


class _Watcher:
    """The inotify watch of one directory, and its loss reported in-band and found again.

    The directory (a ``dir-events`` directory, or the directory of one or more watched
    files) may be deleted or moved away. Its loss is then reported in-band and the watcher
    waits, watching the nearest existing ancestor, for a directory to appear at that path
    again; it then watches that one and reports what it holds. What a batch, a loss or a
    restart means for the watcher's targets is its subclass's business.
    """

    def __init__(self, owner: FilesServer, path: str, *, recursive: bool) -> None:
        self.owner = owner
        self.path = path
        self.recursive = recursive
        self.ready = anyio.Event()
        self.start_error: str | None = None
        self.alive = True
        self._stopping = False
        self._source: ChangeSource | None = None
        self._failures = 0  # consecutive watcher failures with no good batch between them

    # -- what it means for the targets (subclasses) -------------------------------------------

    async def _publish_all(self) -> None:
        """Signal every target of this watcher (its state may have changed in any way)."""
        raise NotImplementedError

    async def _on_gone(self) -> None:
        """The watched directory is missing: say so in-band, once per disappearance."""
        raise NotImplementedError

    async def _seed(self) -> bool:
        """Take stock after (re)opening the watches; True when a reader would see something new."""
        raise NotImplementedError

    async def _on_batch(self, batch: Batch, identity: DirIdentity) -> bool:
        """Turn a batch into updates; False (and nothing done) when the directory is no longer ``identity``."""
        raise NotImplementedError

    def _report(self, message: str) -> None:
        """Note ``message`` in the targets' logs, where they have one."""

    # -- the loop ------------------------------------------------------------------------------

    def stop(self) -> None:
        self._stopping = True
        if self._source is not None:
            self._source.close()  # its watches go now (a shared one stays for its other holders)

    async def _open(self, path: str, recursive: bool) -> ChangeSource:
        source = ChangeSource(
            self.owner.inotify, path, recursive=recursive, timing=self.owner.timing, clock=self.owner.clock
        )
        self._source = source
        if self._stopping:
            source.stop()
        await source.open()
        return source

    async def run(self) -> None:
        try:
            await self._watch()
        except OSError as exc:
            # A file system surprise (a permission change mid-scan, say) ends this watch in-band;
            # it must not take the server and every other watch down with it.
            await self._give_up(f"watching {self.path} failed: {exc}")
        finally:
            self.alive = False
            self.ready.set()  # a reader waiting for a watcher that ended must not hang
            if self._source is not None:
                self._source.close()
            self.owner._forget(self)

    async def _watch(self) -> None:
        path, recursive = self.path, self.recursive
        while not self._stopping:
            identity = await _run(_dir_identity, path)
            if identity is None:
                await self._on_gone()
                if not await self._await_directory(path):
                    return
                continue
            try:
                source = await self._open(path, recursive)
            except (ChangeSourceError, InotifyUnavailable) as exc:
                if await _run(_dir_identity, path) != identity:
                    continue  # it went (or was replaced) while the watches were set up: look again
                await self._give_up(str(exc))
                return
            try:
                if await _run(_dir_identity, path) != identity:
                    continue  # replaced while the watches were set up: watch the new one
                # Seeded before ready: the baseline read then reflects the scan, and
                # anything that changed while nobody watched is already in the ring.
                news = await self._seed()
                if self.ready.is_set() and news:
                    await self._publish_all()  # back after a restart, or the directory is back
                self.ready.set()
                try:
                    if not await self._serve(source, identity):
                        return
                except ChangeSourceError as exc:
                    if not await self._failed(exc):
                        return
            finally:
                source.close()

    async def _serve(self, source: ChangeSource, identity: DirIdentity) -> bool:
        """Handle batches until stopped (False) or the watched directory is gone or replaced (True)."""
        while True:
            batch = await source.next_batch()
            if batch is None:
                return False
            self._failures = 0
            # A deleted or moved directory reports itself as gone. The inode check is
            # not enough there: a directory made at once in its place may reuse the freed
            # inode number. A moved ancestor reports nothing, but the path then names
            # another directory (or none) while the watches follow the moved inode and
            # name its changes by the old path: one lstat per batch catches that.
            if batch.gone or not await self._on_batch(batch, identity):
                return True

    async def _await_directory(self, path: str) -> bool:
        """Watch the nearest existing ancestor until ``path`` is a directory; False once stopped."""
        while not self._stopping:
            found = await _run(_nearest_directory, path)
            ancestor, _identity, step = found
            if ancestor == path:
                return True
            try:
                source = await self._open(ancestor, False)
            except (ChangeSourceError, InotifyUnavailable) as exc:
                if await _run(_nearest_directory, path) != found:
                    continue  # e.g. the ancestor went too, mid-way through a recursive delete
                await self._give_up(f"{exc} (waiting there for {path} to be recreated)")
                return False
            try:
                if await _run(_nearest_directory, path) != found:
                    continue  # changed while the watch was set up: look again
                self.ready.set()
                while True:
                    try:
                        batch = await source.next_batch()
                    except ChangeSourceError as exc:
                        if not await self._failed(exc):
                            return False
                        break
                    if batch is None:
                        return False
                    self._failures = 0
                    # Only the next step down (created) or the ancestor itself (gone) matters.
                    if batch.gone or batch.overflow or step in batch.paths or ancestor in batch.paths:
                        break
            finally:
                source.close()
        return False

    async def _give_up(self, message: str) -> None:
        """Watching cannot go on: fail the first read, or tell the listeners in-band."""
        if not self.ready.is_set():
            self.start_error = message
            self._report(message)
            return
        self._report(f"{message}; watch this URI again once it can be watched")
        await self._publish_all()

    async def _failed(self, exc: ChangeSourceError) -> bool:
        """Report a watcher failure; True to restart it, False after too many in a row."""
        self._failures += 1
        if self._failures > MAX_RESTARTS:
            self._report(f"{exc}; gave up after {MAX_RESTARTS} restarts, watch this URI again")
            await self._publish_all()
            return False
        self._report(f"{exc}; restarting the watch (attempt {self._failures} of {MAX_RESTARTS})")
        await self._publish_all()
        return True


class _Signalled(Protocol):
    """A target's listeners: the URI strings they used, and whether an update is unread."""

    uris: Counter[str]
    pending: bool  # an update went out and no read has started since


async def _signal_once(target: _Signalled, subscriptions: SubscriptionRegistry) -> None:
    """Notify ``target``'s listeners, once until someone reads: a reader always sees the latest
    file or log, so further changes before that read need no signal of their own. A burst of
    writes then costs one update per read the client makes, not per write."""
    if target.pending:
        return
    target.pending = True
    for uri in list(target.uris):
        await subscriptions.publish(uri)


class _DirWatcher(_Watcher):
    """One ``dir-events`` target's watch, shared by every listener of that target."""

    def __init__(self, owner: FilesServer, target: DirTarget) -> None:
        super().__init__(owner, target.spec.path, recursive=target.spec.recursive)
        self.target = target
        self.uris: Counter[str] = Counter()
        self.pending = False  # an update went out and no read has started since

    async def publish(self) -> None:
        await _signal_once(self, self.owner.subscriptions)

    async def _publish_all(self) -> None:
        await self.publish()

    def _report(self, message: str) -> None:
        self.owner.dir_state(self.target.spec).ring.error(message)

    async def _on_gone(self) -> None:
        spec = self.target.spec
        state = self.owner.dir_state(spec)
        async with state.lock:
            if not (state.seeded and state.present):
                return  # never seen (a read says it does not exist) or already reported
            state.present = False
            for path in sorted(state.known):
                state.ring.append({"type": "DELETED", "object": state.known.pop(path)})
            state.ring.error(
                f"directory {spec.path} was deleted or moved away; its entries are reported DELETED. "
                f"The watch goes on: once {spec.path} exists again, its entries are reported ADDED"
            )
        await self.publish()

    async def _seed(self) -> bool:
        # Restarted, recreated, read or watched before: the scan reports what changed meanwhile.
        state = self.owner.dir_state(self.target.spec)
        async with state.lock:
            return await state.take_stock(self.target.spec)

    async def _on_batch(self, batch: Batch, identity: DirIdentity) -> bool:
        # The identity check and the look at the changed paths share one worker-thread
        # call: each thread hop is two wake-ups on the way from a write to its notice.
        spec, watched = self.target.spec, self.path
        state = self.owner.dir_state(spec)
        async with state.lock:
            if batch.overflow:
                # The kernel dropped events: which paths changed is unknown, so look at all of them.
                if await _run(_dir_identity, watched) != identity:
                    return False
                news = await state.take_stock(spec)
            else:
                known = tuple(state.known)
                now, observed = await _run(
                    lambda: (_dir_identity(watched), observe(spec, batch.paths, known))
                )
                if now != identity:
                    return False
                events = reconcile(state.known, observed)
                for event in events:
                    state.ring.append(event)
                news = bool(events)
        if news:
            await self.publish()
        return True


@attrs.define(eq=False)
class _FileMember:
    """One watched file of a :class:`_FileGroup`, with the URI strings its listeners used."""

    path: str
    uris: Counter[str] = attrs.field(factory=Counter)
    pending: bool = False  # an update went out and no read has started since
    existed: bool = False  # it existed at some point while watched (its deletion is then in-band)


class _FileGroup(_Watcher):
    """The watched files of one directory, under one watch of that directory.

    The directory, not each file: an inotify watch on a file would stay on the old inode
    after a write-then-rename replaced it. However many files of the directory are watched,
    it is one watch, one task and one identity check per batch, and a batch costs a look
    at the files it names only.
    """

    def __init__(self, owner: FilesServer, directory: str) -> None:
        super().__init__(owner, directory, recursive=False)
        self.members: dict[str, _FileMember] = {}
        self._unknown: set[_FileMember] = set()  # joined since the last look at whether they exist
        self._admitting: anyio.Event | None = None  # a look at joiners is under way

    def join(self, path: str, uri: str) -> _FileMember:
        member = self.members.get(path)
        if member is None:
            member = self.members[path] = _FileMember(path)
            self._unknown.add(member)
        member.uris[uri] += 1
        return member

    def adopt(self, ended: _FileGroup) -> None:
        """Take over the members of a group whose watch ended (it gave up): this one watches them anew."""
        for path, member in ended.members.items():
            self.members.setdefault(path, member)
            self._unknown.add(self.members[path])

    def leave(self, path: str, uri: str) -> bool:
        """``uri`` has no listener left; True when the group has no member left."""
        member = self.members.get(path)
        if member is not None:
            member.uris[uri] -= 1
            if member.uris[uri] <= 0:
                del member.uris[uri]
            if not member.uris:
                del self.members[path]
                self._unknown.discard(member)
        return not self.members

    async def publish(self, member: _FileMember) -> None:
        await _signal_once(member, self.owner.subscriptions)

    async def _publish_all(self) -> None:
        for member in list(self.members.values()):
            await self.publish(member)

    async def _look(self, members: list[_FileMember]) -> None:
        found = await _run(lambda: [os.path.lexists(m.path) for m in members])
        for member, exists in zip(members, found, strict=True):
            member.existed = member.existed or exists

    async def admit(self) -> None:
        """Look whether the files that joined since the last look exist (once the watch is up).

        Returns once every member has been looked at, also by a look another caller started.
        """
        while self._unknown or self._admitting is not None:
            if self._admitting is not None:
                await self._admitting.wait()
                continue
            members = list(self._unknown)
            self._unknown.clear()
            self._admitting = done = anyio.Event()
            try:
                await self._look(members)
            except BaseException:
                self._unknown.update(members)  # cancelled (a ready timeout): the next caller looks
                raise
            finally:
                self._admitting = None
                done.set()

    async def _on_gone(self) -> None:
        if self.ready.is_set():
            await self._publish_all()  # the files now read as an in-band error

    async def _seed(self) -> bool:
        members = list(self.members.values())
        self._unknown.difference_update(members)
        await self._look(members)
        return True  # only matters on a restart: the files may have changed meanwhile

    async def _on_batch(self, batch: Batch, identity: DirIdentity) -> bool:
        if batch.overflow:
            named = list(self.members.values())
        else:
            named = [m for path in batch.paths if (m := self.members.get(path)) is not None]
        watched = self.path
        now, found = await _run(lambda: (_dir_identity(watched), [os.path.lexists(m.path) for m in named]))
        if now != identity:
            return False
        for member, exists in zip(named, found, strict=True):
            member.existed = member.existed or exists
            await self.publish(member)
        return True


class FilesServer:
    """The MCP server object plus the watchers it owns (``async with`` runs them)."""

    def __init__(
        self,
        roots: Roots,
        *,
        timing: NotifyTiming | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        clock: Clock | None = None,
        max_uris: int = DEFAULT_MAX_URIS,
    ) -> None:
        self.roots = roots
        self.timing = timing if timing is not None else NotifyTiming()
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.max_bytes = max_bytes
        self.subscriptions = SubscriptionRegistry(
            "asyncai-mcp-files",
            refuse=self._refusal,
            on_first=self._on_first,
            on_last=self._on_last,
            ready=self._on_ready,
            max_uris=max_uris,
        )
        # The one inotify instance every watch puts its watches in (made at the first watch).
        self.inotify = Inotify()
        self._targets: dict[str, Target] = {}  # each subscribed URI string's target
        self._dir_watchers: dict[DirTarget, _DirWatcher] = {}
        self._file_groups: dict[str, _FileGroup] = {}  # by directory
        self._dir_states: dict[DirSpec, DirState] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self.server: Server[Any] = Server(
            "asyncai-mcp-files",
            version="0.1.0",
            instructions=(
                f"Files under {roots.describe()}, watchable without polling (inotify). "
                "file://{+path} is a file's current text (JSON parsed for *.json); "
                "dir-events://{+path}{?recursive,glob} is an event log of ADDED/MODIFIED/DELETED entries."
            ),
            on_list_resources=self._on_list_resources,
            on_list_resource_templates=self._on_list_templates,
            on_read_resource=self._on_read,
            on_list_tools=self._on_list_tools,
            on_call_tool=self._on_call_tool,
            get_tool_input_schema=input_schemas(()),
            **self.subscriptions.handlers(),
        )

    # -- lifecycle -------------------------------------------------------

    @asynccontextmanager
    async def running(self) -> AsyncIterator[FilesServer]:
        async with self.inotify.running(), anyio.create_task_group() as tg:
            self._tg = tg
            try:
                yield self
            finally:
                # Stop, don't cancel: each watcher's wait ends and its task lets go of its
                # inotify watches on the way out (then the instance closes).
                for watcher in [*self._dir_watchers.values(), *self._file_groups.values()]:
                    watcher.stop()
                self._tg = None

    def close_listeners(self) -> None:
        """End every open listen stream gracefully (HTTP shutdown would otherwise wait on them)."""
        self.subscriptions.close()

    def dir_state(self, spec: DirSpec) -> DirState:
        state = self._dir_states.get(spec)
        if state is None:
            state = self._dir_states[spec] = DirState()
        return state

    def _forget(self, watcher: _Watcher) -> None:
        if isinstance(watcher, _DirWatcher):
            if self._dir_watchers.get(watcher.target) is watcher and not watcher.uris:
                del self._dir_watchers[watcher.target]
        elif (
            isinstance(watcher, _FileGroup)
            and self._file_groups.get(watcher.path) is watcher
            and not watcher.members
        ):
            del self._file_groups[watcher.path]

    def _file_member(self, target: FileTarget) -> tuple[_FileGroup, _FileMember] | None:
        group = self._file_groups.get(os.path.dirname(target.path))
        member = group.members.get(target.path) if group is not None else None
        return None if group is None or member is None else (group, member)

    # -- URIs --------------------------------------------------------------

    def parse(self, uri: str) -> Target:
        """The target a URI names, or raise :class:`UriError` / :class:`PathRefused`."""
        if uri.startswith("dir-events:"):
            found = _DIR.match(uri)
            if found is None or not isinstance(found.get("path"), str):
                raise UriError(
                    f"{uri!r} does not match {DIR_TEMPLATE}; e.g. dir-events://{self.roots.real[0]}?recursive=true"
                )
            real = self.roots.resolve(str(found["path"]))
            recursive = _bool_param("recursive", found.get("recursive", "false"), uri)
            glob = found.get("glob")
            return DirTarget(DirSpec(real, recursive, str(glob) if glob else None))
        if uri.startswith("file:"):
            found = _FILE.match(uri)
            if found is None or not isinstance(found.get("path"), str):
                raise UriError(
                    f"{uri!r} does not match {FILE_TEMPLATE} (no query part); e.g. file://{self.roots.real[0]}/config.json"
                )
            return FileTarget(self.roots.resolve(str(found["path"])))
        raise UriError(
            f"{uri!r} is not served here: this server serves {FILE_TEMPLATE} and {DIR_TEMPLATE} "
            f"under {self.roots.describe()}"
        )

    # -- listeners ---------------------------------------------------------

    def _acquire(self, target: Target, uri: str) -> None:
        if self._tg is None:
            raise RuntimeError("FilesServer.running() is not active")
        if isinstance(target, FileTarget):
            directory = os.path.dirname(target.path)
            group = self._file_groups.get(directory)
            if group is None or not group.alive:
                fresh = self._file_groups[directory] = _FileGroup(self, directory)
                if group is not None:
                    fresh.adopt(group)
                group = fresh
                self._tg.start_soon(group.run)
            group.join(target.path, uri)
            return
        watcher = self._dir_watchers.get(target)
        if watcher is None or not watcher.alive:
            watcher = self._dir_watchers[target] = _DirWatcher(self, target)
            self._tg.start_soon(watcher.run)
        watcher.uris[uri] += 1

    def _release(self, target: Target, uri: str) -> None:
        if isinstance(target, FileTarget):
            directory = os.path.dirname(target.path)
            group = self._file_groups.get(directory)
            if group is not None and group.leave(target.path, uri):
                group.stop()
                del self._file_groups[directory]
            return
        watcher = self._dir_watchers.get(target)
        if watcher is None:
            return
        watcher.uris[uri] -= 1
        if watcher.uris[uri] <= 0:
            del watcher.uris[uri]
        if not watcher.uris:
            watcher.stop()
            del self._dir_watchers[target]

    def _refusal(self, uri: str) -> str | None:
        try:
            self.parse(uri)
        except (UriError, PathRefused) as exc:
            return str(exc)
        return None

    def _on_first(self, uri: str) -> None:
        target = self.parse(uri)  # refused URIs never get here: the registry asked _refusal first
        self._targets[uri] = target
        self._acquire(target, uri)

    def _on_last(self, uri: str) -> None:
        target = self._targets.pop(uri, None)
        if target is not None:
            self._release(target, uri)

    async def _on_ready(self, uris: Sequence[str]) -> None:
        """Before a listen's ack (or a subscribe's answer): the watchers of ``uris`` are up.

        The ack must mean "watched": a change made once the client has it is then always seen.
        So wait for the inotify watches first, on an event. A watcher that cannot start does
        not hold the ack up; the read that follows says why.
        """
        dirs: set[_DirWatcher] = set()
        files: dict[_FileGroup, list[_FileMember]] = {}
        for i, uri in enumerate(uris):
            if i % 4096 == 4095:
                await anyio.lowlevel.checkpoint()  # a 100,000-URI listen must not hold the loop throughout
            target = self._targets.get(uri)
            if isinstance(target, FileTarget):
                if (found := self._file_member(target)) is not None:
                    files.setdefault(found[0], []).append(found[1])
            elif target is not None and (watcher := self._dir_watchers.get(target)) is not None:
                dirs.add(watcher)
        with anyio.move_on_after(READY_TIMEOUT):
            for each in [*dirs, *files]:
                await each.ready.wait()
            for group in files:
                if group.alive:
                    await group.admit()  # whether each file exists now: its deletion is then in-band
        # This listener had no update yet: the next change must signal it, even if an
        # earlier one is still unread by another listener. The registry subscribed it
        # before this hook ran, so nothing can be published in between.
        for watcher in dirs:
            watcher.pending = False
        for members in files.values():
            for member in members:
                member.pending = False

    # -- handlers ----------------------------------------------------------

    def _example_root(self) -> str:
        return self.roots.real[0]

    async def _on_list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        resources = []
        for root in self.roots.real:
            uri = f"dir-events://{root}?recursive=true"
            resources.append(
                types.Resource(
                    uri=uri,
                    name=f"root {root}",
                    description=(
                        f"Every change under the served root {root}, recursively: an event log of "
                        "ADDED / MODIFIED / DELETED entries with {path, name, size, mtime, type}.\n"
                        f'Example: await watch_start(name="root", uri="{uri}")'
                    ),
                    mime_type=EVENTS_MIME_TYPE,
                )
            )
        return types.ListResourcesResult(resources=resources)

    async def _on_list_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        root = self._example_root()
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    uri_template=FILE_TEMPLATE,
                    name="file",
                    description=(
                        f"A file's current content as state (path absolute, under {self.roots.describe()}). "
                        "*.json files are parsed JSON; a .json file that does not parse (e.g. caught "
                        'mid-write) reads as {"error": "..."} until the next good write; other files are '
                        "text. Changes are pushed through inotify.\n"
                        f'Example: await watch_start(name="cfg", uri="file://{root}/config.json")'
                    ),
                ),
                types.ResourceTemplate(
                    uri_template=DIR_TEMPLATE,
                    name="dir-events",
                    description=(
                        "Changes in a directory as an event log: ADDED / MODIFIED / DELETED per entry, "
                        "object {path, name, size, mtime, type}, `old` on MODIFIED; a rename is DELETED + "
                        "ADDED. recursive=true includes subdirectories; glob (e.g. *.json) filters by "
                        "name, right-anchored.\n"
                        f'Example: await watch_start(name="json", uri="dir-events://{root}?recursive=true&glob=*.json")'
                    ),
                    mime_type=EVENTS_MIME_TYPE,
                ),
            ]
        )

    async def _on_list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[])  # resources only; writes stay outside this server

    async def _on_call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        # The tools capability is advertised (with an empty list) so clients that list every
        # server's tools need no special case; a call is then answered as the spec says.
        raise unknown_tool(self.server.name, params.name, [])

    async def _wait_ready(self, watcher: _Watcher | None) -> None:
        if watcher is None:
            return
        with anyio.move_on_after(READY_TIMEOUT) as scope:
            await watcher.ready.wait()
        if scope.cancelled_caught:
            raise MCPError(
                types.INTERNAL_ERROR,
                f"the inotify watches for {watcher.path} took over {READY_TIMEOUT:.0f} s to set up",
            )
        if watcher.start_error is not None:
            raise MCPError(types.INVALID_PARAMS, watcher.start_error)

    def _missing(self, target: FileTarget, uri: str) -> MCPError:
        parent, name = os.path.split(target.path)
        if not os.path.isdir(parent):
            return resource_error(uri, f"{uri}: directory {parent} does not exist")
        try:
            siblings = os.listdir(parent)
        except OSError:
            siblings = []
        close = difflib.get_close_matches(name, siblings, n=3)
        hint = f"; did you mean: {', '.join(close)}" if close else ""
        return resource_error(
            uri,
            f"{uri}: {target.path} does not exist{hint}. "
            "To wait for a file to appear, watch its directory: "
            f"dir-events://{parent}?glob={name or '*'}",
        )

    async def _read_file(self, target: FileTarget, uri: str) -> FileState:
        found = self._file_member(target)
        member: _FileMember | None = None
        if found is not None:
            group, member = found
            await self._wait_ready(group)
            await group.admit()
            member.pending = False  # before the read: a change from now on is signalled again
        try:
            return await anyio.to_thread.run_sync(
                lambda: read_state(target.path, self.roots, shown=target.path, max_bytes=self.max_bytes)
            )
        except FileMissing as exc:
            if member is not None and member.existed:
                # Deleted while watched: in-band, so the watch lives on and sees it come back.
                parent = os.path.dirname(target.path)
                if await _run(os.path.isdir, parent):
                    why = "it was deleted"
                else:
                    why = f"its directory {parent} was deleted or moved away"
                return error_body(f"{exc}; {why}. The watch reports it again when it is recreated")
            raise await _run(self._missing, target, uri) from exc
        except (PathRefused, NotAFile, Unreadable) as exc:
            raise resource_error(uri, str(exc)) from exc

    async def _read_dir(self, target: DirTarget, uri: str) -> str:
        spec = target.spec
        watcher = self._dir_watchers.get(target)
        await self._wait_ready(watcher)
        if watcher is not None:
            watcher.pending = False
        state = self._dir_states.get(spec)
        if not await _run(os.path.isdir, spec.path):
            if state is not None and state.seeded:
                return state.ring.text()  # watched before: its loss is in the log ("was deleted" ERROR)
            if await _run(os.path.lexists, spec.path):
                raise resource_error(
                    uri, f"{uri}: {spec.path} is not a directory; watch a file with file://{spec.path}"
                )
            raise resource_error(uri, f"{uri}: {spec.path} is not an existing directory")
        state = self.dir_state(spec)
        if watcher is None or not watcher.alive:
            # Nobody watches: this read takes stock itself. The log is then one log per URI
            # (one log_id), the first read is its baseline, and a later read or watch
            # reports what changed since as events, so a read before a listen loses nothing.
            # With a watcher, its events are the log; a read adds none (other listeners
            # would not be told of them).
            async with state.lock:
                await state.take_stock(spec)
        return state.ring.text()

    async def _on_read(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = params.uri
        try:
            target = self.parse(uri)
        except (UriError, PathRefused) as exc:
            raise resource_error(uri, str(exc)) from exc
        if isinstance(target, FileTarget):
            state = await self._read_file(target, uri)
            text, mime = state.text, state.mime_type
        else:
            text, mime = await self._read_dir(target, uri), EVENTS_MIME_TYPE
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type=mime, text=text)]
        )
