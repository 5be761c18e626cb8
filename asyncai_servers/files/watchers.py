"""The files server's watchers: the inotify watch of one directory, its loss reported in-band and found again.

A ``dir-events`` target has a watcher of its own (:class:`DirWatcher`); the watched files of one
directory share one (:class:`FileGroup`: one watch of the directory, and a change costs a look
at the files it names). Every watcher's inotify watches are in its host's one inotify instance
(:class:`~asyncai_servers.files.inotify.Inotify`), where watchers of the same directory share
its watch descriptor. The host (:class:`~asyncai_servers.files.server.FilesServer`) decides who
watches what; a watcher only tells it when it ended (:meth:`WatcherHost.forget`).

Updates are level-triggered: after one ``ResourceUpdated`` a target stays quiet until a read of
it starts (see :func:`signal_once`).
"""

from __future__ import annotations

import os
import stat
from collections import Counter
from collections.abc import Callable
from typing import Any, Final, Protocol, TypeVar

import anyio
import attrs

from asyncai_servers.files.change_source import Batch, ChangeSource, NotifyTiming
from asyncai_servers.files.dirlog import DirSpec, FileObject, observe, reconcile, scan
from asyncai_servers.files.inotify import ChangeSourceError, Inotify, InotifyUnavailable
from asyncai_servers.files.uri import DirTarget
from asyncai_watch.clock import Clock
from asyncai_watch.server.eventlog import EventRing
from asyncai_watch.server.subscriptions import SubscriptionRegistry

__all__ = [
    "MAX_RESTARTS",
    "DirIdentity",
    "DirState",
    "DirWatcher",
    "FileGroup",
    "FileMember",
    "Watcher",
    "WatcherHost",
    "dir_identity",
    "in_thread",
    "nearest_directory",
]

MAX_RESTARTS: Final = 3
"""Consecutive watcher failures tolerated before a watch gives up."""

T = TypeVar("T")


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    """File-system calls off the event loop (a slow mount must not stall other listeners)."""
    return await anyio.to_thread.run_sync(fn, *args)


class WatcherHost(Protocol):
    """What a watcher needs of the server that owns it."""

    inotify: Inotify
    timing: NotifyTiming
    clock: Clock
    subscriptions: SubscriptionRegistry

    def dir_state(self, spec: DirSpec) -> DirState:
        """The state of ``spec``'s log, which outlives its watchers."""
        ...

    def forget(self, watcher: Watcher) -> None:
        """``watcher`` ended: drop it unless it was replaced or still has listeners."""
        ...


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


DirIdentity = tuple[int, int]


def dir_identity(path: str) -> DirIdentity | None:
    """``(st_dev, st_ino)`` of the directory at ``path`` (not following a symlink), ``None`` if there is none.

    A directory moved away and another made in its place has a new identity: the old
    inotify watches follow the moved inode, so they must be replaced.
    """
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


def nearest_directory(path: str) -> tuple[str, DirIdentity | None, str]:
    """``path`` or its closest ancestor that is a directory now, its identity, and its child on the way to ``path``."""
    step = path
    while True:
        identity = dir_identity(path)
        parent = os.path.dirname(path)
        if identity is not None or parent == path:
            return path, identity, step
        step, path = path, parent


class Watcher:
    """The inotify watch of one directory, and its loss reported in-band and found again.

    The directory (a ``dir-events`` directory, or the directory of one or more watched
    files) may be deleted or moved away. Its loss is then reported in-band and the watcher
    waits, watching the nearest existing ancestor, for a directory to appear at that path
    again; it then watches that one and reports what it holds. What a batch, a loss or a
    restart means for the watcher's targets is its subclass's business.
    """

    def __init__(
        self, owner: WatcherHost, path: str, *, recursive: bool, skip: Callable[[str], bool] | None = None
    ) -> None:
        self.owner = owner
        self.path = path
        self.recursive = recursive
        self.skip = skip  # directories below ``path`` that need no inotify watch
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
            self.owner.inotify,
            path,
            recursive=recursive,
            timing=self.owner.timing,
            clock=self.owner.clock,
            skip=self.skip,
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
            self.owner.forget(self)

    async def _watch(self) -> None:
        path, recursive = self.path, self.recursive
        while not self._stopping:
            identity = await in_thread(dir_identity, path)
            if identity is None:
                await self._on_gone()
                if not await self._await_directory(path):
                    return
                continue
            try:
                source = await self._open(path, recursive)
            except (ChangeSourceError, InotifyUnavailable) as exc:
                if await in_thread(dir_identity, path) != identity:
                    continue  # it went (or was replaced) while the watches were set up: look again
                await self._give_up(str(exc))
                return
            try:
                if await in_thread(dir_identity, path) != identity:
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
            found = await in_thread(nearest_directory, path)
            ancestor, _identity, step = found
            if ancestor == path:
                return True
            try:
                source = await self._open(ancestor, False)
            except (ChangeSourceError, InotifyUnavailable) as exc:
                if await in_thread(nearest_directory, path) != found:
                    continue  # e.g. the ancestor went too, mid-way through a recursive delete
                await self._give_up(f"{exc} (waiting there for {path} to be recreated)")
                return False
            try:
                if await in_thread(nearest_directory, path) != found:
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


class Signalled(Protocol):
    """A target's listeners: the URI strings they used, and whether an update is unread."""

    uris: Counter[str]
    pending: bool  # an update went out and no read has started since


async def signal_once(target: Signalled, subscriptions: SubscriptionRegistry) -> None:
    """Notify ``target``'s listeners, once until someone reads: a reader always sees the latest
    file or log, so further changes before that read need no signal of their own. A burst of
    writes then costs one update per read the client makes, not per write."""
    if target.pending:
        return
    target.pending = True
    for uri in list(target.uris):
        await subscriptions.publish(uri)


class DirWatcher(Watcher):
    """One ``dir-events`` target's watch, shared by every listener of that target."""

    def __init__(self, owner: WatcherHost, target: DirTarget) -> None:
        spec = target.spec
        # An excluded directory gets no watch: its changes are never reported, so need not be seen.
        super().__init__(
            owner, spec.path, recursive=spec.recursive, skip=spec.excluded if spec.exclude else None
        )
        self.target = target
        self.uris: Counter[str] = Counter()
        self.pending = False  # an update went out and no read has started since

    async def publish(self) -> None:
        await signal_once(self, self.owner.subscriptions)

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
                if await in_thread(dir_identity, watched) != identity:
                    return False
                news = await state.take_stock(spec)
            else:
                known = tuple(state.known)
                now, observed = await in_thread(
                    lambda: (dir_identity(watched), observe(spec, batch.paths, known))
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
class FileMember:
    """One watched file of a :class:`FileGroup`, with the URI strings its listeners used."""

    path: str
    uris: Counter[str] = attrs.field(factory=Counter)
    pending: bool = False  # an update went out and no read has started since
    existed: bool = False  # it existed at some point while watched (its deletion is then in-band)


class FileGroup(Watcher):
    """The watched files of one directory, under one watch of that directory.

    The directory, not each file: an inotify watch on a file would stay on the old inode
    after a write-then-rename replaced it. However many files of the directory are watched,
    it is one watch, one task and one identity check per batch, and a batch costs a look
    at the files it names only.
    """

    def __init__(self, owner: WatcherHost, directory: str) -> None:
        super().__init__(owner, directory, recursive=False)
        self.members: dict[str, FileMember] = {}
        self._unknown: set[FileMember] = set()  # joined since the last look at whether they exist
        self._admitting: anyio.Event | None = None  # a look at joiners is under way

    def join(self, path: str, uri: str) -> FileMember:
        member = self.members.get(path)
        if member is None:
            member = self.members[path] = FileMember(path)
            self._unknown.add(member)
        member.uris[uri] += 1
        return member

    def adopt(self, ended: FileGroup) -> None:
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

    async def publish(self, member: FileMember) -> None:
        await signal_once(member, self.owner.subscriptions)

    async def _publish_all(self) -> None:
        for member in list(self.members.values()):
            await self.publish(member)

    async def _look(self, members: list[FileMember]) -> None:
        found = await in_thread(lambda: [os.path.lexists(m.path) for m in members])
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
        now, found = await in_thread(
            lambda: (dir_identity(watched), [os.path.lexists(m.path) for m in named])
        )
        if now != identity:
            return False
        for member, exists in zip(named, found, strict=True):
            member.existed = member.existed or exists
            await self.publish(member)
        return True
