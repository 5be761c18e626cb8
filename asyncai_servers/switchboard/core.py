"""The switchboard: durable verbs over a ledger, plus the doorbell fan-out and the lease timer.

Transport-free: the MCP server (``server.py``) resolves the caller's
credential and calls these methods; tests can drive them directly with a
manual clock. Order of effects for every verb: commit to the ledger first,
then fan out (event log, ``resources/updated``, doorbell). A doorbell is never
rung for something the ledger does not hold.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import Any, Final

import anyio
import anyio.abc
import attrs

from asyncai_watch import Backoff
from asyncai_watch.clock import Clock, WallClock
from asyncai_watch.server.eventlog import EventRing

from .config import Credential, Credentials, validate_name
from .doorbell import make_doorbell
from .hub import DEFAULT_BUFFER, Hub
from .ledger import STATUSES, Change, Creator, Ledger, LedgerError, RemoteChange, Todo

__all__ = ["DEFAULT_LEASE_SECONDS", "Switchboard", "queue_uri"]

log = logging.getLogger(__name__)
_LEASE_RETRY: Final = Backoff(initial=1.0, cap=30.0, attempts=None)  # a failed expiry: 1, 2, 4 .. 30 s

DEFAULT_LEASE_SECONDS: Final = 300.0
SUMMARY_MAX: Final = 2000
PAYLOAD_MAX: Final = 64 * 1024
KEY_MAX: Final = 200
LIST_MAX: Final = 200
DOORBELL_TRANSITIONS: Final = frozenset({"create", "assign", "expire"})


def queue_uri(queue: str) -> str:
    return f"switchboard://queues/{queue}/events"


class Switchboard:
    def __init__(
        self,
        ledger: Ledger,
        credentials: Credentials,
        *,
        clock: Clock | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        buffer: int = DEFAULT_BUFFER,
        source: str = "switchboard",
    ) -> None:
        if lease_seconds <= 0:
            raise ValueError(f"lease_seconds must be > 0, got {lease_seconds}")
        self.ledger = ledger
        self.credentials = credentials
        # Unix time: lease deadlines are stored in the ledger and compared by every replica.
        self.clock: Clock = clock or WallClock()
        self.lease_seconds = lease_seconds
        self.hub = Hub(buffer=buffer)
        self.source = validate_name("source", source)
        self.rings: dict[str, EventRing] = {}
        self.listening = anyio.Event()  # set once other replicas' transitions can be heard
        self.expired = 0
        self._lease_changed = anyio.Event()
        self._tg: anyio.abc.TaskGroup | None = None

    # -- lifecycle ---------------------------------------------------------
    async def __aenter__(self) -> Switchboard:
        await self.ledger.open()
        self._tg = await anyio.create_task_group().__aenter__()
        self._tg.start_soon(self.hub.run)
        self._tg.start_soon(self._lease_timer)
        remote = self.ledger.remote_changes()
        if remote is None:
            self.listening.set()
        else:
            self._tg.start_soon(self._hear, remote)
            with anyio.fail_after(30):
                await self.listening.wait()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.hub.close()
        tg, self._tg = self._tg, None
        try:
            if tg is not None:
                tg.cancel_scope.cancel()
                await tg.__aexit__(None, None, None)
        finally:
            with anyio.CancelScope(shield=True):
                await self.ledger.aclose()

    # -- fan-out -----------------------------------------------------------
    def _ring_for(self, queue: str) -> EventRing:
        ring = self.rings.get(queue)
        if ring is None:
            ring = self.rings[queue] = EventRing()
        return ring

    def _restart_rings(self) -> None:
        """Start every queue's event log over, so its readers see a ``reset`` GAP.

        Other replicas' transitions while the LISTEN connection was down never reached the
        rings (the catch-up only re-rings open push creates). A new ``log_id`` tells each reader
        that its log lost events and to re-read the ledger, instead of missing them silently.
        ``start_seq`` keeps seqs monotonic for readers that compare them.
        """
        for queue, ring in list(self.rings.items()):
            self.rings[queue] = EventRing(start_seq=ring.last_seq)
            self.hub.updated(queue_uri(queue))

    def _apply(self, change: Change) -> None:
        todo = change.todo
        event: dict[str, Any] = {
            "type": "ADDED" if change.transition == "create" else "MODIFIED",
            "transition": change.transition,
            "todo_id": todo.id,
            "object": todo.public(),
        }
        if change.old is not None and change.transition != "create":
            event["old"] = change.old.public()
        if change.omitted:
            event["omitted"] = list(change.omitted)
        self._ring_for(todo.queue).append(event)
        self.hub.updated(queue_uri(todo.queue))
        if (
            change.transition in DOORBELL_TRANSITIONS
            and todo.push
            and change.actor_pushes
            and todo.status == "open"
        ):
            bell = make_doorbell(
                todo_id=todo.id, queue=todo.queue, kind=todo.kind, source=self.source, summary=todo.summary
            )
            self.hub.ring(bell, todo.queue, todo.assignee)
        if change.transition in ("claim", "release", "complete", "expire"):
            self._lease_changed.set()

    async def _hear(self, remote: AsyncIterator[RemoteChange]) -> None:
        async with contextlib.aclosing(remote):  # type: ignore[type-var]
            async for rc in remote:
                if rc.transition == "resync":
                    if self.listening.is_set():  # listening restarted after a drop
                        self._restart_rings()
                    self.listening.set()
                    self._lease_changed.set()
                    continue
                todo, omitted = rc.todo, rc.omitted
                # The notification carries the todo, so hearing costs no query. A todo too big for
                # it comes without payload and result: fetched only when a session here can see
                # its queue (a doorbell or an event-log listener); otherwise the event log entry
                # says what it omits.
                if todo is None or (omitted and self.hub.in_scope(todo.queue)):
                    try:
                        todo = await self.ledger.get(rc.todo_id)
                    except LedgerError as exc:
                        log.warning("cannot fetch todo %s announced by another replica: %s", rc.todo_id, exc)
                        continue
                    omitted = ()
                if todo is not None:
                    self._apply(
                        Change(
                            transition=rc.transition, todo=todo, actor_pushes=rc.actor_pushes, omitted=omitted
                        )
                    )

    async def _lease_timer(self) -> None:
        """Sleep until the earliest lease deadline (or a lease change), then expire what is due."""
        failures = 0  # failed reads or expiries in a row
        while True:
            self._lease_changed = anyio.Event()
            changed = self._lease_changed
            try:
                deadline = await self.ledger.next_lease_deadline()
                if deadline is not None:
                    await self._first_of(deadline, changed)
                    changes = (
                        await self.ledger.expire(self.clock.now()) if self.clock.now() >= deadline else []
                    )
            except LedgerError as exc:
                # A read or an expiry the ledger refused (the database is away): retrying at once
                # would spin, and waiting for a lease change could wait forever. Back off on the clock.
                retry = _LEASE_RETRY.delay(failures)
                assert retry is not None  # attempts=None
                failures += 1
                log.warning("lease timer cannot reach the ledger (%s); retrying in %.0f s", exc, retry)
                await self._first_of(self.clock.now() + retry, changed)
                continue
            failures = 0
            if deadline is None:
                await changed.wait()
                continue
            self.expired += len(changes)
            for change in changes:
                self._apply(change)

    async def _first_of(self, deadline: float, changed: anyio.Event) -> None:
        """Return when the clock reaches ``deadline`` or ``changed`` is set, whichever is first."""
        async with anyio.create_task_group() as race:

            async def sleep() -> None:
                await self.clock.sleep_until(deadline)
                race.cancel_scope.cancel()

            async def wait_changed() -> None:
                await changed.wait()
                race.cancel_scope.cancel()

            race.start_soon(sleep)
            race.start_soon(wait_changed)

    # -- verbs -------------------------------------------------------------
    def _visible(self, cred: Credential, todo: Todo | None, todo_id: str) -> Todo:
        if todo is None or not cred.can_see(todo.queue):
            raise LedgerError(f"no todo with todo_id {todo_id!r} in the queues of credential {cred.name!r}")
        return todo

    async def create(
        self,
        cred: Credential,
        *,
        queue: str,
        kind: str,
        summary: str,
        payload: Any = None,
        idempotency_key: str | None = None,
    ) -> tuple[Todo, bool]:
        cred.scope(queue)
        validate_name("kind", kind)
        if not isinstance(summary, str) or not summary.strip():
            raise ValueError("summary must be a non-empty string")
        if len(summary) > SUMMARY_MAX:
            raise ValueError(f"summary must be at most {SUMMARY_MAX} characters, got {len(summary)}")
        if idempotency_key is not None and (
            not isinstance(idempotency_key, str) or not 1 <= len(idempotency_key) <= KEY_MAX
        ):
            raise ValueError(f"idempotency_key must be a string of 1-{KEY_MAX} characters")
        from .ledger import encode_json  # local: keeps the size check next to its use

        if len(encode_json(payload, "payload").encode()) > PAYLOAD_MAX:
            raise ValueError(f"payload must encode to at most {PAYLOAD_MAX} bytes of JSON")
        creator = Creator(
            name=cred.name, attribution=cred.attribution, verified=cred.verified, push=cred.pushes
        )
        todo, created = await self.ledger.create(
            queue=queue,
            kind=kind,
            summary=summary,
            payload=payload,
            creator=creator,
            idempotency_key=idempotency_key,
            now=self.clock.now(),
        )
        if created:  # a replayed key rings nothing: the first create already did
            self._apply(Change(transition="create", todo=todo, actor_pushes=cred.pushes))
        return todo, created

    async def assign(self, cred: Credential, todo_id: str, assignee: str | None) -> Todo:
        self._visible(cred, await self.ledger.get(todo_id), todo_id)
        target = None
        if assignee is not None:
            target = self.credentials.by_name(assignee)
            if target is None:
                known = sorted(c.name for c in self.credentials)
                raise ValueError(f"unknown assignee {assignee!r}; known credential names: {', '.join(known)}")
        change = await self.ledger.assign(todo_id, assignee, actor_pushes=cred.pushes, now=self.clock.now())
        if target is not None and not target.can_see(change.todo.queue):
            log.warning(
                "todo %s assigned to %s, who cannot see queue %s", todo_id, assignee, change.todo.queue
            )
        self._apply(change)
        return change.todo

    async def claim(self, cred: Credential, queue: str | None = None) -> tuple[Todo | None, bool]:
        queues = cred.scope(queue)
        todo, new = await self.ledger.claim(
            queues,
            cred.name,
            lease=secrets.token_urlsafe(18),
            lease_seconds=self.lease_seconds,
            now=self.clock.now(),
        )
        if todo is not None and new:
            # A claim always starts from open; rebuild that state for the event log's ``old``.
            before = attrs.evolve(
                todo, status="open", claimant=None, lease=None, lease_until=None, attempts=todo.attempts - 1
            )
            self._apply(Change(transition="claim", todo=todo, old=before))
        return todo, new

    async def complete(self, cred: Credential, todo_id: str, lease: str, result: Any = None) -> Todo:
        self._visible(cred, await self.ledger.get(todo_id), todo_id)
        change = await self.ledger.complete(todo_id, lease, result, now=self.clock.now())
        if change.old is not None and change.old.status != "done":
            self._apply(change)
        return change.todo

    async def release(self, cred: Credential, todo_id: str, lease: str) -> Todo:
        self._visible(cred, await self.ledger.get(todo_id), todo_id)
        change = await self.ledger.release(todo_id, lease, now=self.clock.now())
        self._apply(change)
        return change.todo

    async def list_todos(
        self,
        cred: Credential,
        *,
        queue: str | None = None,
        status: str | None = None,
        after: str | None = None,
        limit: int = 50,
        claimable: bool = False,
    ) -> list[Todo]:
        queues = cred.scope(queue)
        if status is not None and status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
        if after is not None and (not isinstance(after, str) or not after.isdigit()):
            raise ValueError(f"after must be a todo_id (digits), got {after!r}")
        if not isinstance(limit, int) or not 1 <= limit <= LIST_MAX:
            raise ValueError(f"limit must be an integer from 1 to {LIST_MAX}, got {limit!r}")
        return await self.ledger.list_todos(
            queues, status=status, after=after, limit=limit, claimable_by=cred.name if claimable else None
        )

    def read_events(self, cred: Credential, queue: str) -> str:
        cred.scope(queue)
        return self._ring_for(queue).text()

    def known_queues(self, cred: Credential) -> Sequence[str]:
        names = set(self.rings) | {q for q in cred.queues if q != "*"}
        return sorted(q for q in names if cred.can_see(q))
