"""A small fake Kubernetes API server (with kcp's ``/clusters/<workspace>`` prefix) for the REAL kubectl.

Loopback only, in the test's event loop (uvicorn on a socket bound to
127.0.0.1:0). It answers what kubectl v1.33 asks for ``get``, ``get -w``,
``create``, ``patch``, ``delete`` and ``api-resources`` on configmaps and
namespaces:

- discovery: ``/version``, ``/api``, ``/api/v1``, ``/apis`` (legacy discovery;
  kubectl asks for aggregated discovery first and falls back when it gets a
  plain ``APIVersions``);
- list with ``metadata.resourceVersion``; ``labelSelector`` / ``fieldSelector``
  (a malformed selector is ``400 BadRequest`` with the API server's text);
- ``?watch=true``: a chunked stream of ``{"type", "object"}`` lines, replaying
  the history after the given resourceVersion first (none, or ``0``: the
  current objects as ``ADDED``); a resourceVersion older than the compaction
  floor gets the API server's in-stream ``ERROR`` with a ``410 Expired``
  Status (the watch cache answers 200 and ends the stream after it);
  ``allowWatchBookmarks=true`` watches get :meth:`FakeApiServer.bookmark`'s
  ``BOOKMARK`` events;
- JSON as the API server's encoder writes it: compact, a newline after every
  document (a response, each watch event);
  under a selector, a change that makes an object stop matching is ``DELETED``
  and one that makes it start matching is ``ADDED`` (see :meth:`_Watch.event`);
- an unknown workspace answers ``404`` everywhere, as an unknown path does.

Tests change the cluster through :class:`FakeApiServer` methods or kubectl
itself; :meth:`FakeApiServer.drop_watches` ends every open watch stream,
:meth:`FakeApiServer.compact` drops the history (older watches get 410),
:meth:`FakeApiServer.expire_next_watch` makes the next watch too old, and
``after_next_list`` runs a change right after a list is answered.
"""

from __future__ import annotations

import copy
import json
import socket
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import uvicorn
from anyio.streams.memory import MemoryObjectSendStream
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

RESOURCES: dict[str, dict[str, Any]] = {
    "configmaps": {
        "kind": "ConfigMap",
        "singularName": "configmap",
        "namespaced": True,
        "shortNames": ["cm"],
    },
    "namespaces": {
        "kind": "Namespace",
        "singularName": "namespace",
        "namespaced": False,
        "shortNames": ["ns"],
    },
}
VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


class ApiJSON(JSONResponse):
    """The API server's JSON (Go's json.Encoder): compact, then a newline."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        out["details"] = details
    return out


class SelectorError(ValueError):
    pass


def parse_selector(text: str) -> list[tuple[str, str, str | None]]:
    reqs: list[tuple[str, str, str | None]] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        for op in ("==", "!=", "="):
            if op in part:
                key, _, value = part.partition(op)
                key, value = key.strip(), value.strip()
                if not key or " " in key or " " in value:
                    raise SelectorError(
                        f"unable to parse requirement: found '{part}', expected: ',' or 'end of string'"
                    )
                reqs.append((key, "!=" if op == "!=" else "=", value))
                break
        else:
            if " " in part:
                bad = part.split()[1]
                raise SelectorError(
                    f"unable to parse requirement: found '{bad}', expected: in, notin, =, ==, !=, gt, lt"
                )
            reqs.append((part.lstrip("!"), "!" if part.startswith("!") else "exists", None))
    return reqs


def selected(obj: dict[str, Any], labels: list[Any], fields: list[Any]) -> bool:
    meta = obj["metadata"]
    have = meta.get("labels", {})
    for key, op, value in labels:
        if (op == "=" and have.get(key) != value) or (op == "!=" and have.get(key) == value):
            return False
        if (op == "exists" and key not in have) or (op == "!" and key in have):
            return False
    for key, op, value in fields:
        actual = {"metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace")}.get(key)
        if (op == "=" and actual != value) or (op == "!=" and actual == value):
            return False
    return True


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


class _Watch:
    def __init__(
        self,
        ws: str,
        resource: str,
        ns: str | None,
        labels: list[Any],
        fields: list[Any],
        bookmarks: bool = False,
    ) -> None:
        self.ws, self.resource, self.ns, self.labels, self.fields = ws, resource, ns, labels, fields
        self.bookmarks = bookmarks
        self.send: MemoryObjectSendStream[dict[str, Any] | None]
        self.send, self.recv = anyio.create_memory_object_stream[dict[str, Any] | None](10_000)

    def wants(self, ws: str, resource: str, obj: dict[str, Any]) -> bool:
        if (ws, resource) != (self.ws, self.resource):
            return False
        if self.ns is not None and obj["metadata"].get("namespace") != self.ns:
            return False
        return selected(obj, self.labels, self.fields)

    def event(
        self, ws: str, resource: str, kind: str, obj: dict[str, Any], prev: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        """What this watch is sent for one change, as k8s.io/apiserver's cacheWatcher.convertToWatchEvent.

        Both the new and the previous object are matched against the selectors: a change that makes
        the object start matching is ADDED, one that makes it stop matching is DELETED carrying the
        *previous* object at the change's resourceVersion (etcd3's watcher does the same).
        """
        passes = kind != "DELETED" and self.wants(ws, resource, obj)
        passed = prev is not None and self.wants(ws, resource, prev)
        if passes:
            return {"type": "MODIFIED" if passed else "ADDED", "object": obj}
        if passed:
            assert prev is not None
            gone = copy.deepcopy(prev)
            gone["metadata"]["resourceVersion"] = obj["metadata"]["resourceVersion"]
            return {"type": "DELETED", "object": gone}
        return None


class FakeApiServer:
    def __init__(self, workspaces: tuple[str, ...] = ("root:app",)) -> None:
        self.rv = 1000
        self.objects: dict[str, dict[tuple[str, str | None, str], dict[str, Any]]] = {
            ws: {} for ws in workspaces
        }
        # (rv, ws, resource, type, obj, previous obj or None), what the watch cache keeps per event
        self.history: list[tuple[int, str, str, str, dict[str, Any], dict[str, Any] | None]] = []
        self.compacted = 0  # watches from an RV below this get 410 Expired
        self.watches: set[_Watch] = set()
        self.watch_started = anyio.Event()
        self.watch_requests = 0
        self.list_requests = 0
        self.watch_rvs: list[str] = []  # the resourceVersion= of every watch request, in order
        self.after_next_list: Callable[[], object] | None = None
        """Run once right after the next list is computed: a change between a list and its watch."""
        self._expire_next = False
        self.url = ""
        for ws in workspaces:
            self.put(ws, "namespaces", None, {"metadata": {"name": "default"}}, emit=False)

    # --- test controls ---------------------------------------------------------------------------

    def drop_watches(self) -> None:
        """End every open watch stream, as an API server timeout or a network drop does."""
        for w in list(self.watches):
            w.send.send_nowait(None)

    def expire_next_watch(self) -> None:
        """Compact history so the next watch's resourceVersion is too old (410 Expired)."""
        self._expire_next = True

    def compact(self) -> None:
        """Drop the history up to now, as etcd compaction and the watch cache's window do."""
        self.compacted = self.rv

    def bookmark(self) -> None:
        """Send a BOOKMARK at the current resourceVersion to every watch that allowed them."""
        for w in list(self.watches):
            if w.bookmarks:
                meta = {"resourceVersion": str(self.rv), "creationTimestamp": None}
                kind = RESOURCES[w.resource]["kind"]
                w.send.send_nowait(
                    {"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": "v1", "metadata": meta}}
                )

    def next_watch_started(self) -> anyio.Event:
        self.watch_started = anyio.Event()
        return self.watch_started

    def put(
        self, ws: str, resource: str, ns: str | None, obj: dict[str, Any], *, emit: bool = True
    ) -> dict[str, Any]:
        """Create or replace an object (bumping resourceVersion) and stream the event."""
        key = (resource, ns, obj["metadata"]["name"])
        store = self.objects[ws]
        old = store.get(key)
        self.rv += 1
        new = copy.deepcopy(obj)
        meta = new.setdefault("metadata", {})
        meta["resourceVersion"] = str(self.rv)
        meta["uid"] = old["metadata"]["uid"] if old else str(uuid.uuid4())
        meta.setdefault("creationTimestamp", "2026-12-02T14:00:00Z")
        if ns is not None:
            meta["namespace"] = ns
        new["apiVersion"] = "v1"
        new["kind"] = RESOURCES[resource]["kind"]
        meta["managedFields"] = [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1"}]
        store[key] = new
        if emit:
            self._emit(ws, resource, "MODIFIED" if old else "ADDED", new, old)
        return new

    def remove(
        self, ws: str, resource: str, ns: str | None, name: str, *, emit: bool = True
    ) -> dict[str, Any] | None:
        obj = self.objects[ws].pop((resource, ns, name), None)
        if obj is not None and emit:
            self.rv += 1
            gone = copy.deepcopy(obj)
            gone["metadata"]["resourceVersion"] = str(self.rv)
            self._emit(ws, resource, "DELETED", gone, obj)
        return obj

    def _emit(
        self, ws: str, resource: str, kind: str, obj: dict[str, Any], prev: dict[str, Any] | None
    ) -> None:
        self.history.append((self.rv, ws, resource, kind, obj, prev))
        for w in list(self.watches):
            if (event := w.event(ws, resource, kind, obj, prev)) is not None:
                w.send.send_nowait(event)

    # --- HTTP ------------------------------------------------------------------------------------

    def app(self) -> Starlette:
        return Starlette(
            routes=[Route("/{path:path}", self.handle, methods=["GET", "POST", "PATCH", "PUT", "DELETE"])]
        )

    async def handle(self, request: Request) -> Response:
        path = "/" + request.path_params["path"]
        ws = "root"
        if path.startswith("/clusters/"):
            _, _, rest = path.partition("/clusters/")
            ws, _, tail = rest.partition("/")
            path = "/" + tail
        if path == "/version":
            return ApiJSON(
                {"major": "1", "minor": "33", "gitVersion": "v1.33.0+kcp-fake", "platform": "linux/amd64"}
            )
        if ws not in self.objects:
            return ApiJSON(status(404, "NotFound", "the server could not find the requested resource"), 404)
        if path == "/api":
            return ApiJSON(
                {
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
                }
            )
        if path == "/apis":
            return ApiJSON({"kind": "APIGroupList", "apiVersion": "v1", "groups": []})
        if path == "/api/v1":
            return ApiJSON(
                {
                    "kind": "APIResourceList",
                    "groupVersion": "v1",
                    "resources": [
                        {
                            "name": name,
                            "namespaced": info["namespaced"],
                            "kind": info["kind"],
                            "verbs": VERBS,
                            "singularName": info["singularName"],
                            "shortNames": info["shortNames"],
                        }
                        for name, info in RESOURCES.items()
                    ],
                }
            )
        parts = path.strip("/").split("/")
        if parts[:2] != ["api", "v1"]:
            return ApiJSON(status(404, "NotFound", "the server could not find the requested resource"), 404)
        parts = parts[2:]
        ns: str | None = None
        if len(parts) >= 3 and parts[0] == "namespaces" and parts[2] in RESOURCES:
            ns, parts = parts[1], parts[2:]
        resource = parts[0] if parts else ""
        if resource not in RESOURCES:
            return ApiJSON(status(404, "NotFound", "the server could not find the requested resource"), 404)
        name = parts[1] if len(parts) > 1 else None
        query = dict(urllib.parse.parse_qsl(request.url.query))
        if request.method == "GET" and name is None:
            try:
                labels = parse_selector(query.get("labelSelector", ""))
                fields = parse_selector(query.get("fieldSelector", ""))
            except SelectorError as exc:
                return ApiJSON(status(400, "BadRequest", str(exc)), 400)
            if query.get("watch") in ("1", "true"):
                return self._watch(
                    ws,
                    resource,
                    ns,
                    labels,
                    fields,
                    query.get("resourceVersion", ""),
                    query.get("allowWatchBookmarks") in ("1", "true"),
                )
            self.list_requests += 1
            items = self._current(ws, resource, ns, labels, fields)
            hook, self.after_next_list = self.after_next_list, None
            response = ApiJSON(
                {
                    "kind": f"{RESOURCES[resource]['kind']}List",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": str(self.rv)},
                    "items": items,
                }
            )
            if hook is not None:
                hook()
            return response
        if request.method == "GET":
            obj = self.objects[ws].get((resource, ns, name))  # type: ignore[arg-type]
            if obj is None:
                return self._not_found(resource, name)  # type: ignore[arg-type]
            return ApiJSON(obj)
        if request.method == "POST":
            raw = await request.body()
            if request.headers.get("content-type", "").startswith("application/vnd.kubernetes.protobuf"):
                # kubectl's typed clients (e.g. `create configmap`) send protobuf; this fake speaks JSON only,
                # as a CRD-only server would. `kubectl create -f` sends JSON.
                return ApiJSON(
                    status(
                        415,
                        "UnsupportedMediaType",
                        "the body of the request was in an unknown format - accepted media types include: application/json",
                    ),
                    415,
                )
            body = json.loads(raw)
            if (resource, ns, body["metadata"]["name"]) in self.objects[ws]:
                return ApiJSON(
                    status(409, "AlreadyExists", f'{resource} "{body["metadata"]["name"]}" already exists'),
                    409,
                )
            return ApiJSON(self.put(ws, resource, ns, body), 201)
        assert name is not None
        current = self.objects[ws].get((resource, ns, name))
        if current is None:
            return self._not_found(resource, name)
        if request.method == "PATCH":
            # JSON merge patch (RFC 7386): `kubectl label` sends one; `kubectl patch`'s strategic merge
            # patch is the same for a ConfigMap's maps.
            merged = merge_patch(current, json.loads(await request.body()))
            return ApiJSON(self.put(ws, resource, ns, merged))
        if request.method == "DELETE":
            self.remove(ws, resource, ns, name)
            return ApiJSON(current)
        return ApiJSON(status(405, "MethodNotAllowed", "method not allowed"), 405)

    @staticmethod
    def _not_found(resource: str, name: str) -> JSONResponse:
        return ApiJSON(
            status(404, "NotFound", f'{resource} "{name}" not found', {"name": name, "kind": resource}), 404
        )

    def _current(
        self, ws: str, resource: str, ns: str | None, labels: list[Any], fields: list[Any]
    ) -> list[dict[str, Any]]:
        return [
            o
            for (r, n, _), o in sorted(self.objects[ws].items(), key=lambda kv: kv[1]["metadata"]["name"])
            if r == resource and (ns is None or n == ns) and selected(o, labels, fields)
        ]

    def _watch(
        self,
        ws: str,
        resource: str,
        ns: str | None,
        labels: list[Any],
        fields: list[Any],
        rv_text: str,
        bookmarks: bool,
    ) -> Response:
        self.watch_requests += 1
        self.watch_rvs.append(rv_text)
        if self._expire_next:
            self._expire_next = False
            self.rv += 1  # a write elsewhere (resourceVersions are global), then compaction up to it
            self.compact()
        w = _Watch(ws, resource, ns, labels, fields, bookmarks)
        since = int(rv_text) if rv_text.isdigit() and rv_text != "0" else None
        if since is not None and since < self.compacted:
            err = status(410, "Expired", f"too old resource version: {since} ({self.compacted})")
            w.send.send_nowait({"type": "ERROR", "object": err})
            w.send.send_nowait(None)
        else:
            if since is None:  # "start at most recent": the current state first, as ADDED
                for obj in self._current(ws, resource, ns, labels, fields):
                    w.send.send_nowait({"type": "ADDED", "object": obj})
            else:
                for rv, hws, hres, kind, obj, prev in self.history:
                    if rv > since and (event := w.event(hws, hres, kind, obj, prev)) is not None:
                        w.send.send_nowait(event)
            self.watches.add(w)
        started = self.watch_started

        async def body() -> AsyncIterator[bytes]:
            try:
                started.set()
                async for item in w.recv:
                    if item is None:
                        return
                    yield json.dumps(item, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
            finally:
                self.watches.discard(w)

        return StreamingResponse(body(), media_type="application/json")


@asynccontextmanager
async def run_fake_apiserver(server: FakeApiServer) -> AsyncIterator[FakeApiServer]:
    """Serve ``server`` on 127.0.0.1:<free port> until the block exits; ``server.url`` is its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections queue here until uvicorn accepts: no readiness wait needed
    sock.setblocking(False)
    server.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    config = uvicorn.Config(server.app(), log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
    uv = uvicorn.Server(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(uv.serve, [sock])
        try:
            yield server
        finally:
            server.drop_watches()
            uv.should_exit = True
