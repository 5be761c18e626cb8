"""The files reference server: ``file://`` state and ``dir-events://`` event logs over inotify.

Who listens to what: one :class:`~asyncai_watch.server.SubscriptionRegistry`
holds the subscriptions of both protocol eras (``subscriptions/listen``, and
``resources/subscribe`` from 2025-era clients). It tells the server when a URI
string gains its first listener or loses its last; the first URI of a target
joins or starts its watcher, the last one leaving stops it. A ``dir-events``
target has a watcher of its own; the watched files of one directory share one
(:mod:`.watchers`). What a URI names is parsed in :mod:`.uri`. A target's
update goes to every URI string its listeners used, since subscriptions match
URIs as exact strings. A URI this server does not serve (or a path it refuses)
is refused at the subscription, with the same error a read gets.

Updates are level-triggered: after one ``ResourceUpdated`` a target stays quiet
until a read of it starts (see :func:`.watchers.signal_once`).

A listen is acknowledged (a ``resources/subscribe`` answered) only once the
inotify watches of its targets exist (the registry's ``ready`` hook waits on each
watcher's ``ready`` event), so a change made after the ack is always seen. A read of a watched URI
waits the same way, so the client's baseline read is covered too. A read of a
``dir-events://`` URI that nobody watches takes stock itself, so each URI has one
log (one ``log_id``) and a later read or watch reports what changed since.

A watched directory that is deleted or moved away is reported in-band, and the
watcher then waits on the nearest existing ancestor for it to come back (see
:class:`.watchers.Watcher`).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio
import anyio.abc
import anyio.lowlevel
import mcp_types as types
from mcp import MCPError
from mcp.server import Server
from mcp.server.context import ServerRequestContext

from asyncai_servers.files.change_source import NotifyTiming
from asyncai_servers.files.content import (
    DEFAULT_MAX_BYTES,
    FileMissing,
    FileState,
    NotAFile,
    Unreadable,
    error_body,
    read_state,
)
from asyncai_servers.files.dirlog import DirSpec
from asyncai_servers.files.inotify import Inotify
from asyncai_servers.files.paths import PathRefused, Roots
from asyncai_servers.files.uri import (
    DIR_TEMPLATE,
    FILE_TEMPLATE,
    DirTarget,
    FileTarget,
    Target,
    UriError,
    parse_uri,
)
from asyncai_servers.files.watchers import (
    DirState,
    DirWatcher,
    FileGroup,
    FileMember,
    Watcher,
    in_thread,
)
from asyncai_watch import EVENTS_MIME_TYPE
from asyncai_watch.clock import Clock, SystemClock
from asyncai_watch.server.errors import resource_error
from asyncai_watch.server.subscriptions import DEFAULT_MAX_URIS, SubscriptionRegistry
from asyncai_watch.server.tool_dispatch import tool_handlers

__all__ = ["DIR_TEMPLATE", "FILE_TEMPLATE", "FilesServer", "UriError"]

READY_TIMEOUT: Final = 30.0
"""How long a read waits for a watcher's inotify watches (a huge recursive tree is slow)."""


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
        self._dir_watchers: dict[DirTarget, DirWatcher] = {}
        self._file_groups: dict[str, FileGroup] = {}  # by directory
        self._dir_states: dict[DirSpec, DirState] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self.server: Server[Any] = Server(
            "asyncai-mcp-files",
            version="0.1.0",
            instructions=(
                f"Files under {roots.describe()}, watchable without polling (inotify). "
                "file://{+path} is a file's current text (JSON parsed for *.json); "
                "dir-events://{+path}{?recursive,glob,exclude} is an event log of ADDED/MODIFIED/DELETED entries."
            ),
            on_list_resources=self._on_list_resources,
            on_list_resource_templates=self._on_list_templates,
            on_read_resource=self._on_read,
            # Resources only (writes stay outside this server): no tools, but the capability.
            **tool_handlers("asyncai-mcp-files", (), {}),
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

    def forget(self, watcher: Watcher) -> None:
        """A watcher ended: drop it unless it was replaced or still has listeners."""
        if isinstance(watcher, DirWatcher):
            if self._dir_watchers.get(watcher.target) is watcher and not watcher.uris:
                del self._dir_watchers[watcher.target]
        elif (
            isinstance(watcher, FileGroup)
            and self._file_groups.get(watcher.path) is watcher
            and not watcher.members
        ):
            del self._file_groups[watcher.path]

    def _file_member(self, target: FileTarget) -> tuple[FileGroup, FileMember] | None:
        group = self._file_groups.get(os.path.dirname(target.path))
        member = group.members.get(target.path) if group is not None else None
        return None if group is None or member is None else (group, member)

    # -- URIs --------------------------------------------------------------

    def parse(self, uri: str) -> Target:
        """The target a URI names, or raise :class:`UriError` / :class:`PathRefused`."""
        return parse_uri(uri, self.roots)

    # -- listeners ---------------------------------------------------------

    def _acquire(self, target: Target, uri: str) -> None:
        if self._tg is None:
            raise RuntimeError("FilesServer.running() is not active")
        if isinstance(target, FileTarget):
            directory = os.path.dirname(target.path)
            group = self._file_groups.get(directory)
            if group is None or not group.alive:
                fresh = self._file_groups[directory] = FileGroup(self, directory)
                if group is not None:
                    fresh.adopt(group)
                group = fresh
                self._tg.start_soon(group.run)
            group.join(target.path, uri)
            return
        watcher = self._dir_watchers.get(target)
        if watcher is None or not watcher.alive:
            watcher = self._dir_watchers[target] = DirWatcher(self, target)
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
        dirs: set[DirWatcher] = set()
        files: dict[FileGroup, list[FileMember]] = {}
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
                        "object {path, name, size, mtime (ISO 8601 UTC), type}, `old` on MODIFIED; a rename "
                        "is DELETED + ADDED. recursive=true includes subdirectories; glob (e.g. *.json) "
                        "keeps matching names, right-anchored; exclude (e.g. .git,node_modules,*.tmp) "
                        "leaves out matching entries and everything below them.\n"
                        f'Example: await watch_start(name="json", uri="dir-events://{root}?recursive=true&glob=*.json")'
                    ),
                    mime_type=EVENTS_MIME_TYPE,
                ),
            ]
        )

    async def _wait_ready(self, watcher: Watcher | None) -> None:
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
        member: FileMember | None = None
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
                if await in_thread(os.path.isdir, parent):
                    why = "it was deleted"
                else:
                    why = f"its directory {parent} was deleted or moved away"
                return error_body(f"{exc}; {why}. The watch reports it again when it is recreated")
            raise await in_thread(self._missing, target, uri) from exc
        except (PathRefused, NotAFile, Unreadable) as exc:
            raise resource_error(uri, str(exc)) from exc

    async def _read_dir(self, target: DirTarget, uri: str) -> str:
        spec = target.spec
        watcher = self._dir_watchers.get(target)
        await self._wait_ready(watcher)
        if watcher is not None:
            watcher.pending = False
        state = self._dir_states.get(spec)
        if not await in_thread(os.path.isdir, spec.path):
            if state is not None and state.seeded:
                return state.ring.text()  # watched before: its loss is in the log ("was deleted" ERROR)
            if await in_thread(os.path.lexists, spec.path):
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
