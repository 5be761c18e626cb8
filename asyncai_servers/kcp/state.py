"""The watcher's knowledge of the cluster and the events it derives (sans-IO).

``WatchState`` holds the known objects (uid -> last object, managedFields
stripped). It turns an API watch event into the ring events to publish
(suppressing an ADDED for an object already known at the same resourceVersion,
as a watch without a resourceVersion sends for the current state, and attaching
``old`` to MODIFIED), and a re-list (after ``410 Gone``) into the synthetic
ADDED / MODIFIED / DELETED events for whatever changed in the history the
watch could not replay. Each outcome carries the event's resourceVersion
(BOOKMARKs too), which the watcher resumes from, and whether an ``ERROR`` event
failed the watch (and whether its resourceVersion is too large to resume from). resourceVersions are compared
only for equality (they are opaque, per the Kubernetes API contract).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

__all__ = [
    "WatchOutcome",
    "WatchState",
    "apply_events",
    "is_too_large_resource_version",
    "object_key",
    "reconcile",
    "resource_version",
    "strip_managed_fields",
]


def strip_managed_fields(obj: Any) -> Any:
    """A copy of ``obj`` without ``metadata.managedFields`` (noise for a model; can be kilobytes)."""
    if not isinstance(obj, dict):
        return obj
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or "managedFields" not in meta:
        return obj
    out = dict(obj)
    out["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return out


def object_key(obj: Any) -> str | None:
    """``metadata.uid``, else ``namespace/name`` (objects without a uid are not API objects, but be lenient)."""
    if not isinstance(obj, dict):
        return None
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return None
    uid = meta.get("uid")
    if isinstance(uid, str) and uid:
        return uid
    name = meta.get("name")
    if isinstance(name, str) and name:
        ns = meta.get("namespace")
        return f"{ns}/{name}" if isinstance(ns, str) and ns else name
    return None


def resource_version(obj: Any) -> str | None:
    if isinstance(obj, dict):
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            rv = meta.get("resourceVersion")
            if isinstance(rv, str):
                return rv
    return None


def reconcile(known: Mapping[str, Any], listed: Iterable[Any]) -> list[dict[str, Any]]:
    """Synthetic events that take ``known`` to ``listed``: ADDED, MODIFIED (with ``old``), DELETED.

    An object listed at the resourceVersion already known produces nothing.
    DELETED carries the last known object, as a Kubernetes DELETED event does.
    """
    events: list[dict[str, Any]] = []
    seen: set[str] = set()
    for raw in listed:
        obj = strip_managed_fields(raw)
        key = object_key(obj)
        if key is None or key in seen:
            continue
        seen.add(key)
        old = known.get(key)
        if old is None:
            events.append({"type": "ADDED", "object": obj, "synthetic": True})
        elif resource_version(old) != resource_version(obj):
            events.append({"type": "MODIFIED", "object": obj, "old": old, "synthetic": True})
    for key, old in known.items():
        if key not in seen:
            events.append({"type": "DELETED", "object": old, "synthetic": True})
    return events


@attrs.frozen
class WatchOutcome:
    """What one kubectl watch event means for the ring."""

    events: list[dict[str, Any]]
    expired: bool = False
    """The API server answered 410 Gone: the watch's resourceVersion is too old; re-list from scratch."""
    resource_version: str | None = None
    """The event's ``object.metadata.resourceVersion`` (also a BOOKMARK's): where a re-watch resumes."""
    failed: bool = False
    """Another in-stream ``ERROR`` Status (500, 504, ...): the API server ends the stream after it, so
    this watch attempt failed (the backoff grows) even though kubectl exits 0."""
    too_large: bool = False
    """The ERROR is ``Too large resource version`` (the API server is behind the RV, e.g. after an
    etcd restore): no resume from that RV can succeed; re-list."""


def is_too_large_resource_version(status: Any) -> bool:
    """client-go's ``isTooLargeResourceVersionError``: the ``ResourceVersionTooLarge`` cause, or (older
    API servers) a 504 / ``Timeout`` whose message says ``Too large resource version``."""
    if not isinstance(status, dict):
        return False
    details = status.get("details")
    causes = details.get("causes") if isinstance(details, dict) else None
    if isinstance(causes, list) and any(
        isinstance(c, dict) and c.get("reason") == "ResourceVersionTooLarge" for c in causes
    ):
        return True
    timeout = status.get("code") == 504 or status.get("reason") == "Timeout"
    return timeout and "Too large resource version" in str(status.get("message", ""))


def _status_message(status: Any) -> str:
    if isinstance(status, dict):
        message = status.get("message")
        reason = status.get("reason")
        code = status.get("code")
        parts = [str(p) for p in (code, reason) if p]
        text = str(message) if message else "watch error"
        return f"{text} ({' '.join(parts)})" if parts else text
    return f"watch error: {status!r}"


class WatchState:
    def __init__(self) -> None:
        self.known: dict[str, Any] = {}

    def seed(self, listed: Iterable[Any]) -> None:
        """Record the first list: no events, it is the baseline readers start from."""
        self.known = {}
        for raw in listed:
            obj = strip_managed_fields(raw)
            key = object_key(obj)
            if key is not None:
                self.known[key] = obj

    def relist(self, listed: Iterable[Any]) -> list[dict[str, Any]]:
        """Reconcile against a fresh list (after a reconnect) and adopt it as the known state."""
        items = list(listed)
        events = reconcile(self.known, items)
        self.seed(items)
        return events

    def on_event(self, event: Any) -> WatchOutcome:
        """Turn one API watch event ``{"type", "object"}`` into ring events."""
        if not isinstance(event, dict):
            return WatchOutcome(
                [{"type": "ERROR", "message": f"kubectl printed a non-object: {event!r:.200}"}]
            )
        kind = event.get("type")
        raw = event.get("object")
        if kind == "BOOKMARK":
            # Only metadata.resourceVersion is meaningful: "everything up to here was sent".
            return WatchOutcome([], resource_version=resource_version(raw))
        if kind == "ERROR":
            if isinstance(raw, dict) and (raw.get("code") == 410 or raw.get("reason") in ("Gone", "Expired")):
                return WatchOutcome([], expired=True)
            return WatchOutcome(
                [{"type": "ERROR", "message": _status_message(raw)}],
                failed=True,
                too_large=is_too_large_resource_version(raw),
            )
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            return WatchOutcome([{"type": "ERROR", "message": f"unknown watch event type {kind!r}"}])
        obj = strip_managed_fields(raw)
        key = object_key(obj)
        if key is None:
            return WatchOutcome([{"type": "ERROR", "message": f"{kind} event without metadata.uid or name"}])
        old = self.known.get(key)
        rv = resource_version(obj)
        if kind == "DELETED":
            self.known.pop(key, None)
            return WatchOutcome([{"type": "DELETED", "object": obj}], resource_version=rv)
        if old is not None and resource_version(old) == rv:
            # A watch without a resourceVersion starts by sending every current object as ADDED.
            return WatchOutcome([], resource_version=rv)
        self.known[key] = obj
        if old is None:
            return WatchOutcome([{"type": kind, "object": obj}], resource_version=rv)
        # An ADDED for a known uid at a new resourceVersion is a change made while we were not watching.
        return WatchOutcome([{"type": "MODIFIED", "object": obj, "old": old}], resource_version=rv)


def apply_events(state: Mapping[str, Any], events: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Apply ring events to a uid -> object map (what a reader reconstructs); used by tests and benches."""
    out = {k: copy.deepcopy(v) for k, v in state.items()}
    for ev in events:
        key = object_key(ev.get("object"))
        if key is None:
            continue
        if ev.get("type") == "DELETED":
            out.pop(key, None)
        elif ev.get("type") in ("ADDED", "MODIFIED"):
            out[key] = ev["object"]
    return out
