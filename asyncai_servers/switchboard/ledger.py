"""The durable todo ledger: the delivery of record. A doorbell only says "look here".

:class:`Ledger` is the interface both backends implement:
:class:`~asyncai_servers.switchboard.ledger_sqlite.SqliteLedger` (embedded,
one file, WAL) and :class:`~asyncai_servers.switchboard.ledger_pg.PostgresLedger`
(several replicas; ``FOR UPDATE SKIP LOCKED`` claims; ``LISTEN/NOTIFY``).

States: ``open`` -> ``claimed`` (with a lease) -> ``done``; a released or
expired lease puts the todo back to ``open``. Only the holder of the current
lease can complete or release. Every time is the caller's ``now`` (the
server's clock), so tests drive expiry without waiting.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Final, Literal, Protocol

import attrs

__all__ = [
    "COLUMNS",
    "STATUSES",
    "Change",
    "Creator",
    "LeaseError",
    "Ledger",
    "LedgerError",
    "Mark",
    "NotFoundError",
    "OutcomeUnknownError",
    "RemoteChange",
    "Todo",
    "UnavailableError",
]

Status = Literal["open", "claimed", "done"]
STATUSES: Final = ("open", "claimed", "done")
Transition = Literal["create", "assign", "claim", "complete", "release", "expire", "resync"]
"""``resync``: the replica (re)started listening; anything may have changed meanwhile."""

COLUMNS: Final = (
    "id",
    "queue",
    "kind",
    "summary",
    "payload",
    "status",
    "creator",
    "creator_attribution",
    "creator_verified",
    "push",
    "idempotency_key",
    "assignee",
    "claimant",
    "lease",
    "lease_until",
    "attempts",
    "result",
    "created_at",
    "updated_at",
)


class LedgerError(Exception):
    """A verb cannot be applied; the message says why and what would be accepted."""


class NotFoundError(LedgerError):
    pass


class UnavailableError(LedgerError):
    """The database cannot be reached now: nothing was changed, and the same call can succeed once
    it is back. Never fatal to the server: the verb that met it fails, the next one tries again."""


class OutcomeUnknownError(UnavailableError):
    """The connection was lost while committing: the change may or may not have been applied."""


class LeaseError(LedgerError):
    """The lease given is not the todo's current lease (expired, released, or someone else's)."""


@attrs.frozen(kw_only=True)
class Creator:
    name: str
    attribution: str
    verified: bool
    push: bool


@attrs.frozen(kw_only=True)
class Todo:
    id: str
    queue: str
    kind: str
    summary: str
    payload: Any
    status: Status
    creator: str
    creator_attribution: str
    creator_verified: bool
    push: bool
    idempotency_key: str | None
    assignee: str | None
    claimant: str | None
    lease: str | None = attrs.field(repr=False)
    lease_until: float | None
    attempts: int
    result: Any
    created_at: float
    updated_at: float

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Todo:
        d = dict(zip(COLUMNS, row, strict=True))
        d["id"] = str(d["id"])
        d["payload"] = json.loads(d["payload"])
        d["result"] = None if d["result"] is None else json.loads(d["result"])
        d["creator_verified"] = bool(d["creator_verified"])
        d["push"] = bool(d["push"])
        return cls(**d)

    def public(self) -> dict[str, Any]:
        """What callers and the event log see: everything but the lease token."""
        out = attrs.asdict(self)
        del out["lease"]
        if self.status != "claimed":
            out["lease_until"] = None
        return out


@attrs.frozen(kw_only=True)
class Change:
    """One committed transition, as the server fans it out (event log, doorbell, lease timer)."""

    transition: Transition
    todo: Todo
    old: Todo | None = None
    actor_pushes: bool = False
    omitted: tuple[str, ...] = ()
    """Fields of ``todo`` left out (set to null) because they did not fit in the notification."""


@attrs.frozen(kw_only=True)
class RemoteChange:
    """A transition committed by another replica, announced over ``LISTEN/NOTIFY``."""

    transition: Transition
    todo_id: str
    actor_pushes: bool
    todo: Todo | None = None
    """The todo as committed, when the notification carried it (None: fetch it by id)."""
    omitted: tuple[str, ...] = ()
    """Fields of ``todo`` the notification left out (too big); fetch the todo if they matter."""


@attrs.frozen
class Mark:
    """A replica's own checkpoint NOTIFY (see ``PostgresLedger``): everything committed before it was heard."""

    token: str


class Ledger(Protocol):
    """The durable verbs. ``queues=None`` means every queue; otherwise the list in scope."""

    name: str

    async def open(self) -> None: ...

    async def aclose(self) -> None: ...

    async def create(
        self,
        *,
        queue: str,
        kind: str,
        summary: str,
        payload: Any,
        creator: Creator,
        idempotency_key: str | None,
        now: float,
    ) -> tuple[Todo, bool]:
        """Insert a todo; with a known ``(creator, idempotency_key)`` return the existing one and False."""
        ...

    async def get(self, todo_id: str) -> Todo | None: ...

    async def assign(
        self, todo_id: str, assignee: str | None, *, actor_pushes: bool, now: float
    ) -> Change: ...

    async def claim(
        self, queues: Sequence[str] | None, claimant: str, *, lease: str, lease_seconds: float, now: float
    ) -> tuple[Todo | None, bool]:
        """Return the claimant's live claim in scope (False), else claim the oldest open todo (True)."""
        ...

    async def complete(self, todo_id: str, lease: str, result: Any, *, now: float) -> Change: ...

    async def release(self, todo_id: str, lease: str, *, now: float) -> Change: ...

    async def list_todos(
        self,
        queues: Sequence[str] | None,
        *,
        status: str | None = None,
        after: str | None = None,
        limit: int = 50,
        claimable_by: str | None = None,
    ) -> list[Todo]: ...

    async def expire(self, now: float) -> list[Change]:
        """Put every todo whose lease has run out back to ``open``."""
        ...

    async def next_lease_deadline(self) -> float | None:
        """The earliest ``lease_until`` among claimed todos, or None."""
        ...

    def remote_changes(self) -> AsyncIterator[RemoteChange] | None:
        """Transitions from other replicas (PostgreSQL), or None for a single-process backend."""
        ...


def encode_json(value: Any, what: str) -> str:
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise LedgerError(f"{what} must be JSON-serializable: {exc}") from None


def not_claimable(todo: Todo | None, todo_id: str, lease_expired: bool = False) -> LedgerError:
    if todo is None:
        return NotFoundError(f"no todo with todo_id {todo_id!r}")
    if todo.status == "done":
        return LeaseError(f"todo {todo_id} is already done")
    if todo.status == "open":
        return LeaseError(
            f"todo {todo_id} is not claimed (its lease expired or was released); claim it again with todo_claim"
        )
    if lease_expired:
        return LeaseError(f"the lease on todo {todo_id} has expired; claim it again with todo_claim")
    return LeaseError(f"that lease is not the current lease of todo {todo_id}; only the claimant can do this")


NOTIFY_MAX: Final = 7999
"""PostgreSQL refuses a NOTIFY payload of 8000 bytes or more."""
BIG_FIELDS: Final = ("payload", "result")


def encode_notify(replica: str, transition: str, todo: Todo, actor_pushes: bool) -> str:
    """The NOTIFY payload of a transition: the todo itself, so other replicas need no query.

    Too big (a large payload or result), it carries the todo without those two fields and says
    so; still too big (a long summary in a wide script), only the id, and receivers fetch.
    """
    head = {"r": replica, "t": transition, "id": todo.id, "p": actor_pushes}
    whole = todo.public()
    text = json.dumps({**head, "todo": whole}, separators=(",", ":"), ensure_ascii=False)
    if len(text.encode()) <= NOTIFY_MAX:
        return text
    trimmed = {**whole, **dict.fromkeys(BIG_FIELDS)}
    text = json.dumps({**head, "todo": trimmed, "x": BIG_FIELDS}, separators=(",", ":"), ensure_ascii=False)
    if len(text.encode()) <= NOTIFY_MAX:
        return text
    return json.dumps(head, separators=(",", ":"))


def encode_mark(replica: str, token: str) -> str:
    return json.dumps({"r": replica, "t": "mark", "m": token}, separators=(",", ":"))


def _todo_of(d: Mapping[str, Any]) -> Todo | None:
    view = d.get("todo")
    if not isinstance(view, dict):
        return None
    try:
        return Todo(**view, lease=None)
    except TypeError:  # another version's shape: fetch instead
        return None


def decode_notify(payload: str) -> tuple[str, RemoteChange | Mark] | None:
    try:
        d: Mapping[str, Any] = json.loads(payload)
        if d["t"] == "mark":
            return str(d["r"]), Mark(str(d["m"]))
        todo = _todo_of(d)
        omitted = tuple(str(f) for f in d.get("x", ())) if todo is not None else ()
        return str(d["r"]), RemoteChange(
            transition=d["t"],
            todo_id=str(d["id"]),
            actor_pushes=bool(d.get("p", False)),
            todo=todo,
            omitted=omitted,
        )
    except (ValueError, KeyError, TypeError):
        return None
