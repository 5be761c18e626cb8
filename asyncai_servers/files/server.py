"""The files reference server: ``file://`` state and ``dir-events://`` event logs over inotify.

Who listens to what: the SDK's ``ListenHandler`` keeps its listeners private,
so :meth:`FilesServer._on_listen` wraps it and counts, per watched target, the
URIs its open ``subscriptions/listen`` streams asked for. The first listener of
a target starts one watcher (one set of inotify watches); the last one leaving
stops it. A watcher publishes ``ResourceUpdated`` for every URI string its
listeners used, since the bus matches URIs as exact strings.

Updates are level-triggered: after one ``ResourceUpdated`` the watcher stays
quiet until a read of the target starts (see :meth:`_Watcher.publish`).

The first read of a watched URI waits for the watcher's inotify watches to
exist (an event, not a poll), so the client's baseline read is always covered.
"""

from __future__ import annotations

import difflib
import os
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Final, TypeVar

import anyio
import anyio.abc
import attrs
import mcp_types as types
from mcp import MCPError, UriTemplate
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourceUpdated

from asyncai_servers._eventlog import EventRing
from asyncai_servers.files.change_source import (
    ChangeSource,
    ChangeSourceError,
    InotifyUnavailable,
    NotifyTiming,
)
from asyncai_servers.files.content import (
    DEFAULT_MAX_BYTES,
    FileMissing,
    FileState,
    NotAFile,
    error_body,
    read_state,
)
from asyncai_servers.files.dirlog import DirSpec, FileObject, observe, reconcile, scan
from asyncai_servers.files.paths import PathRefused, Roots
from asyncai_watch.events import EVENTS_MIME_TYPE

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


def _bool_param(name: str, value: object, uri: str) -> bool:
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise UriError(f"{uri}: {name}={value!r} is not a boolean; use {name}=true or {name}=false")


class _Watcher:
    """One target's inotify watches, shared by every listener of that target."""

    def __init__(self, owner: FilesServer, target: Target) -> None:
        self.owner = owner
        self.target = target
        self.uris: Counter[str] = Counter()
        self.ready = anyio.Event()
        self.start_error: str | None = None
        self.existed = False
        self.alive = True
        self.pending = False  # an update went out and no read has started since
        self._stopping = False
        self._source: ChangeSource | None = None

    def stop(self) -> None:
        self._stopping = True
        if self._source is not None:
            self._source.stop()

    async def publish(self) -> None:
        # Notify once until someone reads: a reader always sees the latest file,
        # so further changes before that read need no signal of their own. A burst
        # of writes then costs one update per read the client makes, not per write.
        if self.pending:
            return
        self.pending = True
        for uri in list(self.uris):
            await self.owner.bus.publish(ResourceUpdated(uri=uri))

    def _watch_path(self) -> tuple[str, bool]:
        if isinstance(self.target, FileTarget):
            # The parent, not the file: an inotify watch on the file itself would
            # stay on the old inode after a write-then-rename replaced it.
            return os.path.dirname(self.target.path), False
        return self.target.spec.path, self.target.spec.recursive

    async def _open(self) -> ChangeSource:
        path, recursive = self._watch_path()
        source = ChangeSource(path, recursive=recursive, timing=self.owner.timing)
        self._source = source
        if self._stopping:
            source.stop()
        await source.open()
        return source

    async def run(self) -> None:
        try:
            try:
                source = await self._open()
                # Seeded before ready: the baseline read then reflects the scan, and
                # anything that changed while nobody watched is already in the ring.
                await self._seed()
            except (ChangeSourceError, InotifyUnavailable) as exc:
                self.start_error = str(exc)
                if isinstance(self.target, DirTarget):
                    self.owner.dir_state(self.target.spec).ring.error(self.start_error)
                return
            finally:
                self.ready.set()
            await self._serve(source)
        finally:
            self.alive = False
            if self._source is not None:
                self._source.close()
            self.owner._forget(self)

    async def _serve(self, source: ChangeSource) -> None:
        failures = 0
        while True:
            try:
                batch = await source.next_batch()
            except ChangeSourceError as exc:
                failures += 1
                source.close()
                message = f"{exc}; restarting the watch (attempt {failures} of {MAX_RESTARTS})"
                if failures > MAX_RESTARTS:
                    message = f"{exc}; gave up after {MAX_RESTARTS} restarts, watch this URI again"
                self._report(message)
                await self.publish()
                if failures > MAX_RESTARTS:
                    return
                try:
                    source = await self._open()
                except (ChangeSourceError, InotifyUnavailable) as reopen:
                    self._report(f"{reopen}; watch this URI again once it can be watched")
                    await self.publish()
                    return
                await self._seed()  # changes during the restart come out as events
                await self.publish()
                continue
            if batch is None:
                return
            failures = 0
            paths = {path for _change, path in batch}
            if not await self._on_batch(paths):
                return

    def _report(self, message: str) -> None:
        if isinstance(self.target, DirTarget):
            self.owner.dir_state(self.target.spec).ring.error(message)

    async def _seed(self) -> None:
        if isinstance(self.target, FileTarget):
            self.existed = self.existed or await _run(os.path.lexists, self.target.path)
            return
        spec = self.target.spec
        state = self.owner.dir_state(spec)
        found = await anyio.to_thread.run_sync(scan, spec)
        if not state.seeded:
            state.known = found
            state.seeded = True  # the ring's last_seq (0 here) gives baselines a seq to measure GAPs from
            return
        # Restarted (or a watch of this URI ran before): report what changed meanwhile.
        observed: dict[str, FileObject | None] = dict.fromkeys(state.known)
        observed.update(found)
        for event in reconcile(state.known, observed):
            state.ring.append(event)

    async def _on_batch(self, paths: set[str]) -> bool:
        """Handle one batch; False when the watched directory itself is gone."""
        watched, _recursive = self._watch_path()
        gone = watched in paths and not await _run(os.path.isdir, watched)
        if isinstance(self.target, FileTarget):
            if self.target.path in paths or gone:
                self.existed = self.existed or await _run(os.path.lexists, self.target.path)
                await self.publish()
            return not gone
        spec = self.target.spec
        state = self.owner.dir_state(spec)
        observed = await anyio.to_thread.run_sync(observe, spec, paths, tuple(state.known))
        events = reconcile(state.known, observed)
        if gone:
            for path in [p for p in state.known if p.startswith(spec.path + "/")]:
                events.append({"type": "DELETED", "object": state.known.pop(path)})
        for event in events:
            state.ring.append(event)
        if gone:
            state.ring.error(
                f"directory {spec.path} was deleted; no more events. Watch it again once it exists"
            )
        if events or gone:
            await self.publish()
        return not gone


class FilesServer:
    """The MCP server object plus the watchers it owns (``async with`` runs them)."""

    def __init__(
        self,
        roots: Roots,
        *,
        timing: NotifyTiming | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.roots = roots
        self.timing = timing if timing is not None else NotifyTiming()
        self.max_bytes = max_bytes
        self.bus = InMemorySubscriptionBus()
        self._listen = ListenHandler(self.bus)
        self._watchers: dict[Target, _Watcher] = {}
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
            on_subscriptions_listen=self._on_listen,
        )

    # -- lifecycle -------------------------------------------------------

    @asynccontextmanager
    async def running(self) -> AsyncIterator[FilesServer]:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                yield self
            finally:
                # Stop, don't cancel: each watcher's thread sees its stop event
                # within one step and the task returns by itself.
                for watcher in list(self._watchers.values()):
                    watcher.stop()
                self._tg = None

    def dir_state(self, spec: DirSpec) -> DirState:
        state = self._dir_states.get(spec)
        if state is None:
            state = self._dir_states[spec] = DirState()
        return state

    def _forget(self, watcher: _Watcher) -> None:
        if self._watchers.get(watcher.target) is watcher and not watcher.uris:
            del self._watchers[watcher.target]

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
        watcher = self._watchers.get(target)
        if watcher is None or not watcher.alive:
            if self._tg is None:
                raise RuntimeError("FilesServer.running() is not active")
            watcher = self._watchers[target] = _Watcher(self, target)
            self._tg.start_soon(watcher.run)
        watcher.uris[uri] += 1

    def _release(self, target: Target, uri: str) -> None:
        watcher = self._watchers.get(target)
        if watcher is None:
            return
        watcher.uris[uri] -= 1
        if watcher.uris[uri] <= 0:
            del watcher.uris[uri]
        if not watcher.uris:
            watcher.stop()
            del self._watchers[target]

    async def _on_listen(
        self, ctx: ServerRequestContext[Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        acquired: list[tuple[Target, str]] = []
        for uri in params.notifications.resource_subscriptions or ():
            try:
                target = self.parse(uri)
            except (UriError, PathRefused):
                continue  # the listen is honoured; the (baseline) read reports what is wrong
            self._acquire(target, uri)
            acquired.append((target, uri))
        try:
            return await self._listen(ctx, params)
        finally:
            for target, uri in acquired:
                self._release(target, uri)

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

    async def _wait_ready(self, watcher: _Watcher | None) -> None:
        if watcher is None:
            return
        with anyio.move_on_after(READY_TIMEOUT) as scope:
            await watcher.ready.wait()
        if scope.cancelled_caught:
            raise MCPError(
                types.INTERNAL_ERROR,
                f"the inotify watches for {watcher._watch_path()[0]} took over {READY_TIMEOUT:.0f} s to set up",
            )
        if watcher.start_error is not None:
            raise MCPError(types.INVALID_PARAMS, watcher.start_error)

    def _missing(self, target: FileTarget, uri: str) -> MCPError:
        parent, name = os.path.split(target.path)
        if not os.path.isdir(parent):
            return MCPError(types.INVALID_PARAMS, f"{uri}: directory {parent} does not exist")
        try:
            siblings = os.listdir(parent)
        except OSError:
            siblings = []
        close = difflib.get_close_matches(name, siblings, n=3)
        hint = f"; did you mean: {', '.join(close)}" if close else ""
        return MCPError(
            types.INVALID_PARAMS,
            f"{uri}: {target.path} does not exist{hint}. "
            "To wait for a file to appear, watch its directory: "
            f"dir-events://{parent}?glob={name or '*'}",
        )

    async def _read_file(self, target: FileTarget, uri: str) -> FileState:
        watcher = self._watchers.get(target)
        await self._wait_ready(watcher)
        if watcher is not None:
            watcher.pending = False  # before the read: a change from now on is signalled again
        try:
            return await anyio.to_thread.run_sync(
                lambda: read_state(target.path, self.roots, shown=target.path, max_bytes=self.max_bytes)
            )
        except FileMissing as exc:
            if watcher is not None and watcher.existed:
                # Deleted while watched: in-band, so the watch lives on and sees it come back.
                return error_body(f"{exc}; it was deleted. The watch reports it again when it is recreated")
            raise await _run(self._missing, target, uri) from exc
        except (PathRefused, NotAFile) as exc:
            raise MCPError(types.INVALID_PARAMS, str(exc)) from exc

    async def _read_dir(self, target: DirTarget, uri: str) -> str:
        spec = target.spec
        watcher = self._watchers.get(target)
        await self._wait_ready(watcher)
        if watcher is not None:
            watcher.pending = False
        if not await _run(os.path.isdir, spec.path):
            if await _run(os.path.lexists, spec.path):
                raise MCPError(
                    types.INVALID_PARAMS,
                    f"{uri}: {spec.path} is not a directory; watch a file with file://{spec.path}",
                )
            state = self._dir_states.get(spec)
            if state is not None and state.seeded:
                return state.ring.text()  # ends with the "directory was deleted" ERROR
            raise MCPError(types.INVALID_PARAMS, f"{uri}: {spec.path} is not an existing directory")
        state = self._dir_states.get(spec)
        return state.ring.text() if state is not None else EventRing().text()

    async def _on_read(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = params.uri
        try:
            target = self.parse(uri)
        except (UriError, PathRefused) as exc:
            raise MCPError(types.INVALID_PARAMS, str(exc)) from exc
        if isinstance(target, FileTarget):
            state = await self._read_file(target, uri)
            text, mime = state.text, state.mime_type
        else:
            text, mime = await self._read_dir(target, uri), EVENTS_MIME_TYPE
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type=mime, text=text)]
        )
