"""A fake ``kubectl`` for the kcp server's tests (run through the executable ``tests/support/bin/kubectl``).

It mimics what the server relies on from the real kubectl v1.33:

- argument handling: flags before or after the resource, ``--flag=value`` and
  ``--flag value``, ``-n``/``-A``/``-l``/``--field-selector``/``-o``/``-w``,
  the global ``--kubeconfig``/``--server``/``--token``/``--request-timeout``;
  an unknown flag fails as kubectl does;
- output: ``-o json`` prints 4-space indented JSON (a ``List`` for collections),
  ``-w --output-watch-events`` prints the current objects as ``ADDED`` events and
  then each change as one compact ``{"type": ..., "object": ...}`` line;
- ``get --raw PATH``: the API server's response bytes, as kubectl copies them:
  a compact JSON document and a newline (a ``List`` with
  ``metadata.resourceVersion``, or one object); ``PATH?watch=true`` streams
  the API server's watch events one compact JSON per line. kubectl sends a raw
  path relative to the host (it drops ``--server``'s path), so the workspace
  comes from the path's ``/clusters/<workspace>`` prefix (none: ``root``); a
  ``--server`` path before ``/clusters/`` is a proxy's: only raw paths under it
  reach the cluster;
- errors: kubectl's texts and exit code 1 (``error: the server doesn't have a
  resource type "foo"``, ``Error from server (NotFound): ...``).

The cluster lives in ``$FAKE_KUBECTL_DIR/cluster.json``; the kcp workspace comes
from ``--server https://HOST/clusters/<workspace>``. ``events.ndjson`` in the
same directory is both the API server's history and its live feed, tailed with
inotify (watchfiles), no polling: each line is ``{"workspace", "resource",
"event": {...}, "old": {...}}`` (a change; ``old`` is the object before it,
absent for a create), ``{"exit": N, "stderr": "..."}`` (the API server ends
every open watch stream) or ``{"workspace", "resource", "bookmark": RV}`` (a
``BOOKMARK`` for watches that allow them). A raw watch from a resourceVersion
replays the history after it, then tails; one older than the compaction floor
(``cluster.json``'s ``compacted``) gets the API server's in-stream ``ERROR``
with a ``410 Expired`` Status, as the watch cache sends it. Tests drive all of
it through :class:`FakeCluster`. As the API server does, a watch with a selector
matches both the old and the new object: a change that makes an object stop
matching is printed as ``DELETED`` (the old object at the change's
resourceVersion), one that makes it start matching as ``ADDED``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec  # the watch stream's hot path: the fake must outrun the server it feeds

RESOURCES: dict[str, dict[str, Any]] = {
    "configmaps": {
        "aliases": ("configmap", "cm"),
        "kind": "ConfigMap",
        "apiVersion": "v1",
        "namespaced": True,
        "verbs": "create delete deletecollection get list patch update watch",
    },
    "secrets": {
        "aliases": ("secret",),
        "kind": "Secret",
        "apiVersion": "v1",
        "namespaced": True,
        "verbs": "create delete deletecollection get list patch update watch",
    },
    "namespaces": {
        "aliases": ("namespace", "ns"),
        "kind": "Namespace",
        "apiVersion": "v1",
        "namespaced": False,
        "verbs": "create delete get list patch update watch",
    },
}


# --- the cluster file, shared by the fake kubectl and the tests -------------------------------------------


class FakeCluster:
    """The fake cluster's state directory; every change also appends the watch event."""

    def __init__(self, root: Path, workspaces: tuple[str, ...] = ("root:app",)) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        if not self.cluster_file.exists():
            self._save({"rv": 100, "workspaces": {ws: {} for ws in workspaces}})
        self.events_file.touch()

    @property
    def cluster_file(self) -> Path:
        return self.root / "cluster.json"

    @property
    def events_file(self) -> Path:
        return self.root / "events.ndjson"

    def load(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.cluster_file.read_text())
        return data

    def _save(self, data: dict[str, Any]) -> None:
        tmp = self.cluster_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(self.cluster_file)

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """Change the cluster without recording the events: history the API server no longer has.

        Afterwards the history is compacted up to now, so a watch resuming from before these changes
        gets ``410 Expired`` and must re-list, as against a real API server whose watch cache has
        moved past the resumed resourceVersion.
        """
        self._quiet = True
        try:
            yield
        finally:
            self._quiet = False
            self.compact()

    def compact(self) -> None:
        """Drop the history up to the current resourceVersion: older watches get 410 Expired."""
        data = self.load()
        data["compacted"] = data["rv"]
        self._save(data)

    def bump(self) -> int:
        """Advance the resourceVersion without an event here (a write to another resource; RVs are global)."""
        data = self.load()
        data["rv"] += 1
        self._save(data)
        return int(data["rv"])

    def bookmark(self, *, workspace: str = "root:app", resource: str = "configmaps") -> str:
        """Send a BOOKMARK at the current resourceVersion to every watch that allows them."""
        rv = str(self.load()["rv"])
        self.append({"workspace": workspace, "resource": resource, "bookmark": rv})
        return rv

    def after_next_list(
        self, *, delete: str, namespace: str = "default", workspace: str = "root:app"
    ) -> None:
        """Delete ``delete`` right after the next list is answered: a change between list and watch."""
        (self.root / "after-list.json").write_text(
            json.dumps({"delete": delete, "namespace": namespace, "workspace": workspace})
        )

    def run_after_list_hook(self) -> None:
        hook = self.root / "after-list.json"
        claimed = hook.with_suffix(f".{os.getpid()}")
        try:
            hook.rename(claimed)  # atomic: one list runs it
        except FileNotFoundError:
            return
        spec = json.loads(claimed.read_text())
        claimed.unlink()
        self.delete(spec["delete"], namespace=spec["namespace"], workspace=spec["workspace"])

    def break_discovery(self, group_version: str) -> None:
        """Make an API group fail discovery (an aggregated API that is down), as for api-resources."""
        data = self.load()
        data["discovery_errors"] = [*data.get("discovery_errors", []), group_version]
        self._save(data)

    def calls(self) -> list[list[str]]:
        """Every kubectl invocation's argv so far (``--token`` values masked)."""
        path = self.root / "calls.log"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def append(self, line: dict[str, Any]) -> None:
        if getattr(self, "_quiet", False) and "event" in line:
            return
        with self.events_file.open("a") as f:
            f.write(json.dumps(line) + "\n")

    def objects(self, workspace: str, resource: str) -> list[dict[str, Any]]:
        return list(self.load()["workspaces"][workspace].get(resource, []))

    def _change(
        self, workspace: str, resource: str, namespace: str | None, name: str, fn: Any
    ) -> dict[str, Any]:
        data = self.load()
        objs: list[dict[str, Any]] = data["workspaces"][workspace].setdefault(resource, [])
        idx = next(
            (
                i
                for i, o in enumerate(objs)
                if o["metadata"]["name"] == name and o["metadata"].get("namespace") == namespace
            ),
            None,
        )
        old = objs[idx] if idx is not None else None
        data["rv"] += 1
        kind, new = fn(old, str(data["rv"]))
        event_obj: dict[str, Any]
        if new is None:
            assert idx is not None
            assert old is not None
            objs.pop(idx)
            # The API server's DELETED carries the last state at the deletion's resourceVersion.
            event_obj = json.loads(json.dumps(old))
            event_obj["metadata"]["resourceVersion"] = str(data["rv"])
        elif idx is None:
            objs.append(new)
            event_obj = new
        else:
            objs[idx] = new
            event_obj = new
        self._save(data)
        line: dict[str, Any] = {
            "workspace": workspace,
            "resource": resource,
            "event": {"type": kind, "object": event_obj},
        }
        if old is not None:
            line["old"] = old  # what the watch cache keeps as PrevObject, for selector transitions
        self.append(line)
        return event_obj

    def create(
        self,
        name: str,
        data: dict[str, str] | None = None,
        *,
        namespace: str = "default",
        workspace: str = "root:app",
        labels: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        def make(old: Any, rv: str) -> tuple[str, dict[str, Any]]:
            assert old is None, f"{name} exists"
            meta: dict[str, Any] = {
                "name": name,
                "namespace": namespace,
                "uid": str(uuid.uuid4()),
                "resourceVersion": rv,
                "creationTimestamp": "2026-12-02T14:00:00Z",
                "managedFields": [{"manager": "kubectl-create", "operation": "Update"}],
            }
            if labels:
                meta["labels"] = labels
            return "ADDED", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data or {}}

        return self._change(workspace, "configmaps", namespace, name, make)

    def patch(
        self, name: str, data: dict[str, str], *, namespace: str = "default", workspace: str = "root:app"
    ) -> dict[str, Any]:
        def upd(old: Any, rv: str) -> tuple[str, dict[str, Any]]:
            assert old is not None, f"{name} does not exist"
            new = json.loads(json.dumps(old))
            new["metadata"]["resourceVersion"] = rv
            new["data"] = {**new.get("data", {}), **data}
            return "MODIFIED", new

        return self._change(workspace, "configmaps", namespace, name, upd)

    def label(
        self, name: str, labels: dict[str, str], *, namespace: str = "default", workspace: str = "root:app"
    ) -> dict[str, Any]:
        """Replace an object's labels (a MODIFIED that may move it into or out of a watch's selector)."""

        def relabel(old: Any, rv: str) -> tuple[str, dict[str, Any]]:
            assert old is not None, f"{name} does not exist"
            new = json.loads(json.dumps(old))
            new["metadata"]["resourceVersion"] = rv
            new["metadata"]["labels"] = labels
            if not labels:
                del new["metadata"]["labels"]  # the API server omits an empty map
            return "MODIFIED", new

        return self._change(workspace, "configmaps", namespace, name, relabel)

    def delete(self, name: str, *, namespace: str = "default", workspace: str = "root:app") -> dict[str, Any]:
        return self._change(workspace, "configmaps", namespace, name, lambda old, rv: ("DELETED", None))

    def drop_streams(self, code: int = 0, stderr: str = "") -> None:
        """End every running ``kubectl get -w`` (what an API server timeout or a network drop does)."""
        self.append({"exit": code, "stderr": stderr})

    def raw_event(
        self, event: dict[str, Any], *, workspace: str = "root:app", resource: str = "configmaps"
    ) -> None:
        """Print ``event`` on every matching watch without changing the cluster (e.g. a duplicate ADDED).

        An ``ERROR`` ends each ``--raw`` watch it is printed on, as the API server closes the stream."""
        self.append({"workspace": workspace, "resource": resource, "event": event})


# --- the kubectl command line ----------------------------------------------------------------------------

_VALUE_FLAGS = {
    "--raw",
    "--kubeconfig",
    "--server",
    "-s",
    "--token",
    "--request-timeout",
    "-n",
    "--namespace",
    "-l",
    "--selector",
    "--field-selector",
    "-o",
    "--output",
    "--cache-dir",
    "-f",
    "--filename",
    "--context",
}
_BOOL_FLAGS = {"-A", "--all-namespaces", "-w", "--watch", "--output-watch-events", "--minify", "--no-headers"}
_CANON = {
    "-s": "--server",
    "--namespace": "-n",
    "--selector": "-l",
    "--output": "-o",
    "--all-namespaces": "-A",
    "--watch": "-w",
    "--filename": "-f",
}


class SelectorError(ValueError):
    pass


class KubectlExit(Exception):
    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def parse_args(argv: list[str]) -> tuple[list[str], dict[str, Any]]:
    positional: list[str] = []
    flags: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("-") and arg != "-":
            name, eq, value = arg.partition("=")
            if name in _VALUE_FLAGS:
                if not eq:
                    i += 1
                    if i >= len(argv):
                        raise KubectlExit(f"error: flag needs an argument: {name.lstrip('-')!r} in {name}")
                    value = argv[i]
                flags[_CANON.get(name, name)] = value
            elif name in _BOOL_FLAGS:
                flags[_CANON.get(name, name)] = value.lower() != "false" if eq else True
            else:
                verb = positional[0] if positional else ""
                raise KubectlExit(f"error: unknown flag: {name}\nSee 'kubectl {verb} --help' for usage.")
        else:
            positional.append(arg)
        i += 1
    return positional, flags


def _resource(name: str) -> str:
    base = name.split(".", 1)[0]
    for plural, info in RESOURCES.items():
        if base == plural or base in info["aliases"] or base == info["kind"].lower():
            return plural
    raise KubectlExit(f'error: the server doesn\'t have a resource type "{name}"')


def _workspace(flags: dict[str, Any], cluster: dict[str, Any]) -> str:
    server: str = flags.get("--server", "")
    _, sep, ws = server.partition("/clusters/")
    if not sep:
        raise KubectlExit("error: fake kubectl needs --server https://HOST/clusters/<workspace>")
    ws = ws.strip("/")
    if ws not in cluster["workspaces"]:
        # What kubectl v1.33 prints when everything under /clusters/<ws> answers 404 (tests/fake_kube_apiserver).
        klog = (
            'E1202 14:00:00.000000   4242 memcache.go:265] "Unhandled Error" err="couldn\'t get current '
            'server API group list: the server could not find the requested resource"\n'
        )
        raise KubectlExit(
            klog * 5 + "Error from server (NotFound): the server could not find the requested resource"
        )
    return ws


def _parse_selector(sel: str) -> list[tuple[str, str, str | None]]:
    reqs: list[tuple[str, str, str | None]] = []
    for part in sel.split(","):
        part = part.strip()
        if not part:
            continue
        for op in ("==", "!=", "="):
            if op in part:
                key, _, value = part.partition(op)
                if not key.strip() or " " in key.strip() or " " in value.strip():
                    raise SelectorError(
                        f"unable to parse requirement: found '{part}', expected: ',' or 'end of string'"
                    )
                reqs.append((key.strip(), "!=" if op == "!=" else "=", value.strip()))
                break
        else:
            if " " in part:
                raise SelectorError(
                    f"unable to parse requirement: found '{part.split()[1]}', expected: in, notin, =, ==, !=, gt, lt"
                )
            reqs.append((part.lstrip("!"), "!" if part.startswith("!") else "exists", None))
    return reqs


def _matches(obj: dict[str, Any], flags: dict[str, Any], namespaced: bool) -> bool:
    meta = obj.get("metadata", {})
    if namespaced and not flags.get("-A") and meta.get("namespace") != flags.get("-n", "default"):
        return False
    labels = meta.get("labels", {})
    for key, op, value in _parse_selector(flags.get("-l", "")):
        if (op == "=" and labels.get(key) != value) or (op == "!=" and labels.get(key) == value):
            return False
        if (op == "exists" and key not in labels) or (op == "!" and key in labels):
            return False
    for key, op, value in _parse_selector(flags.get("--field-selector", "")):
        actual = {"metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace")}.get(key)
        if (op == "=" and actual != value) or (op == "!=" and actual == value):
            return False
    return True


def _dump(obj: Any) -> None:
    # kubectl's JSON printer for -o json: four-space indent, keys sorted (unstructured objects), a newline.
    sys.stdout.write(json.dumps(obj, indent=4, sort_keys=True, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def _dump_event(obj: Any) -> None:
    # kubectl v1.33 prints each -w --output-watch-events document compact, one per line (checked against
    # the real binary in tests/servers/kcp/test_kcp_real_kubectl.py); the server's parser does not rely on either.
    sys.stdout.write(json.dumps(obj, separators=(",", ":"), sort_keys=True, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def _get(cluster: FakeCluster, positional: list[str], flags: dict[str, Any]) -> None:
    if len(positional) < 2 and "--raw" not in flags:
        raise KubectlExit(
            'You must specify the type of resource to get. Use "kubectl api-resources" for a complete list of supported resources.\n\nerror: Required resource not specified.\nUse "kubectl explain <resource>" for a detailed description of that resource (e.g. kubectl explain pods).\nSee \'kubectl get -h\' for help and examples'
        )
    if "--raw" in flags:
        if len(positional) > 1:
            raise KubectlExit("error: arguments may not be passed when --raw is specified")
        _raw(cluster, flags["--raw"], _server_prefix(flags))
        return
    flags["_resource"] = positional[1]
    resource = _resource(positional[1])
    info = RESOURCES[resource]
    if flags.get("-o") != "json":
        raise KubectlExit("error: fake kubectl supports only -o json")
    # Remember where the event log ends *before* listing, so no change falls between list and watch.
    offset = cluster.events_file.stat().st_size
    data = cluster.load()
    ws = _workspace(flags, data)
    try:
        _parse_selector(flags.get("-l", ""))
        _parse_selector(flags.get("--field-selector", ""))
    except SelectorError as exc:
        # The API server rejects the selector; kubectl still prints an empty List, then the error.
        _dump({"apiVersion": "v1", "items": [], "kind": "List", "metadata": {"resourceVersion": ""}})
        raise KubectlExit(
            f'Error from server (BadRequest): Unable to find "/v1, Resource={resource}" that match label selector '
            f'"{flags.get("-l", "")}", field selector "{flags.get("--field-selector", "")}": {exc}'
        ) from exc
    objs = [o for o in data["workspaces"][ws].get(resource, []) if _matches(o, flags, info["namespaced"])]
    if len(positional) > 2:
        name = positional[2]
        found = [o for o in objs if o["metadata"]["name"] == name]
        if not found:
            raise KubectlExit(f'Error from server (NotFound): {resource} "{name}" not found')
        objs = found
        if not flags.get("-w"):
            _dump(found[0])
            return
    if not flags.get("-w"):
        _dump({"apiVersion": "v1", "items": objs, "kind": "List", "metadata": {"resourceVersion": ""}})
        sys.stdout.flush()
        cluster.run_after_list_hook()
        return
    for obj in objs:
        _dump_event({"type": "ADDED", "object": obj} if flags.get("--output-watch-events") else obj)
    _announce_watch(ws, resource)
    _tail(cluster, offset, ws, resource, flags, info["namespaced"])


def _announce_watch(ws: str, resource: str) -> None:
    """Tell the test (over a unix socket it listens on) that this watch is streaming: a signal, not a poll."""
    path = os.environ.get("FAKE_KUBECTL_NOTIFY")
    if not path:
        return
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(path)
            s.sendall(f"{ws} {resource}\n".encode())
        except OSError:
            pass  # the test stopped listening


def _tail(
    cluster: FakeCluster, offset: int, ws: str, resource: str, flags: dict[str, Any], namespaced: bool
) -> None:
    """``kubectl get -w``: print each change after ``offset`` (kubectl -w does not ask for bookmarks)."""

    def live(line: dict[str, Any]) -> None:
        if line.get("workspace") != ws or line.get("resource") != resource or "event" not in line:
            return
        event = _watch_event(line["event"], line.get("old"), flags, namespaced)
        if event is not None:
            _dump_event(event if flags.get("--output-watch-events") else event["object"])

    _follow(cluster, offset, offset, lambda line: None, live)


def _follow(cluster: FakeCluster, start: int, live_from: int, replay: Any, live: Any) -> None:
    """Read the event log from ``start``: lines before ``live_from`` go to ``replay`` (history), the
    rest to ``live``, then follow appends with inotify; an ``exit`` line among the live ones ends it."""
    # inotify via watchfiles' RustNotify, registered *before* the first read: a line appended between
    # that read and the registration would otherwise wait for the next append.
    from watchfiles._rust_notify import RustNotify

    path = cluster.events_file
    offset = start
    buf = b""

    def drain() -> None:
        nonlocal offset, buf
        with path.open("rb") as f:
            f.seek(offset)
            chunk = f.read()
        base = offset - len(buf)
        offset += len(chunk)
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for raw in lines:
            at, base = base, base + len(raw) + 1
            if not raw.strip():
                continue
            line = msgspec.json.decode(raw)
            if at < live_from:
                replay(line)
                continue
            if "exit" in line:
                sys.stdout.flush()
                if line.get("stderr"):
                    sys.stderr.write(line["stderr"] + "\n")
                raise KubectlExit("", int(line["exit"]))
            live(line)
        sys.stdout.flush()

    with RustNotify([str(path)], False, False, 0, False, False) as notify:
        drain()
        while True:
            if notify.watch(0, 1, 0, None) == "signal":
                raise KeyboardInterrupt
            drain()


def _raw_json(doc: Any, *, flush: bool = True) -> None:
    # The API server's JSON encoder (Go's json.Encoder): compact, a newline after each document;
    # kubectl get --raw copies the response bytes as they are. A watch stream is flushed once per
    # batch (flush=False, then _follow flushes): the API server flushes when its event channel is
    # empty, and kubectl copies the body in chunks of up to 32 KiB, so a burst arrives in chunks.
    sys.stdout.write(
        msgspec.json.encode(doc).decode() + "\n"
    )  # = json.dumps(separators=(",", ":"), ensure_ascii=False)
    if flush:
        sys.stdout.flush()


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


_NOT_FOUND = "Error from server (NotFound): the server could not find the requested resource"


def _server_prefix(flags: dict[str, Any]) -> str:
    """The path of ``--server`` before ``/clusters/``: where a proxy in front of kcp serves it."""
    server = str(flags.get("--server", ""))
    return urllib.parse.urlsplit(server).path.partition("/clusters/")[0].rstrip("/")


def _raw(cluster: FakeCluster, raw: str, prefix: str = "") -> None:
    """``kubectl get --raw PATH``: a collection list, one object, or ``?watch=true``.

    kubectl sends PATH relative to the host; behind a proxy at ``--server https://HOST/PREFIX/...`` only
    paths under PREFIX reach kcp (the proxy answers the rest 404)."""
    parts = urllib.parse.urlsplit(raw)
    query = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
    path = parts.path
    if prefix:
        if not path.startswith(prefix + "/"):
            raise KubectlExit(_NOT_FOUND)
        path = path[len(prefix) :]
    ws = "root"  # the fake API server's workspace for a path without /clusters/
    if path.startswith("/clusters/"):
        ws, _, rest = path[len("/clusters/") :].partition("/")
        path = "/" + rest
    offset = cluster.events_file.stat().st_size  # the history's end before the list: no gap to the watch
    data = cluster.load()
    if ws not in data["workspaces"]:
        raise KubectlExit(_NOT_FOUND)
    segs = path.strip("/").split("/")
    if segs[:2] != ["api", "v1"]:
        raise KubectlExit(_NOT_FOUND)
    segs = segs[2:]
    ns: str | None = None
    if len(segs) >= 3 and segs[0] == "namespaces":
        ns, segs = segs[1], segs[2:]
    if not segs or segs[0] not in RESOURCES or len(segs) > 2:
        raise KubectlExit(_NOT_FOUND)
    resource = segs[0]
    info = RESOURCES[resource]
    if ns is not None and not info["namespaced"]:
        raise KubectlExit(_NOT_FOUND)
    # The selection as _matches reads kubectl's flags: no namespace in the path means every namespace.
    sel: dict[str, Any] = {
        "-l": query.get("labelSelector", ""),
        "--field-selector": query.get("fieldSelector", ""),
        **({"-n": ns} if ns is not None else {"-A": True}),
    }
    try:
        _parse_selector(sel["-l"])
        _parse_selector(sel["--field-selector"])
    except SelectorError as exc:
        raise KubectlExit(f"Error from server (BadRequest): {exc}") from exc
    namespaced = bool(info["namespaced"])
    objs = [o for o in data["workspaces"][ws].get(resource, []) if _matches(o, sel, namespaced)]
    if len(segs) == 2:
        found = [o for o in objs if o["metadata"]["name"] == segs[1]]
        if not found:
            raise KubectlExit(f'Error from server (NotFound): {resource} "{segs[1]}" not found')
        _raw_json(found[0])
        return
    if query.get("watch") not in ("true", "1"):
        _raw_json(
            {
                "kind": f"{info['kind']}List",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(data["rv"])},
                "items": objs,
            }
        )
        cluster.run_after_list_hook()
        return
    _raw_watch(cluster, data, offset, ws, resource, sel, namespaced, query, objs)


def _raw_watch(
    cluster: FakeCluster,
    data: dict[str, Any],
    offset: int,
    ws: str,
    resource: str,
    sel: dict[str, Any],
    namespaced: bool,
    query: dict[str, str],
    current: list[dict[str, Any]],
) -> None:
    """A watch as the API server's watch cache serves it: replay after ``resourceVersion``, then live."""
    rv_text = query.get("resourceVersion", "")
    bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
    kind = RESOURCES[resource]["kind"]

    def send(line: dict[str, Any], since: int | None) -> None:
        if line.get("workspace") != ws or line.get("resource") != resource:
            return
        if "bookmark" in line:
            if bookmarks:
                meta = {"resourceVersion": str(line["bookmark"]), "creationTimestamp": None}
                _raw_json(
                    {"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": "v1", "metadata": meta}}
                )
            return
        if "event" not in line:
            return
        if since is not None:  # history: only what came after the watch's resourceVersion
            rv = str(line["event"].get("object", {}).get("metadata", {}).get("resourceVersion", ""))
            if not rv.isdigit() or int(rv) <= since:
                return
        event = _watch_event(line["event"], line.get("old"), sel, namespaced)
        if event is not None:
            _raw_json(event, flush=False)
            if event.get("type") == "ERROR":
                sys.stdout.flush()
                raise KubectlExit("", 0)  # the API server closes a watch after an ERROR; kubectl exits 0

    if rv_text in ("", "0"):
        # No resourceVersion: the current state as ADDED events, then what happens from now on.
        for obj in current:
            _raw_json({"type": "ADDED", "object": obj})
        _announce_watch(ws, resource)
        _follow(cluster, offset, offset, lambda line: None, lambda line: send(line, None))
        return
    if not rv_text.isdigit():
        raise KubectlExit(
            f'Error from server (BadRequest): resourceVersion: Invalid value: "{rv_text}": '
            "strconv.ParseUint: parsing: invalid syntax"
        )
    since = int(rv_text)
    floor = int(data.get("compacted", 0))
    if since < floor:
        # The watch cache answers 200 and sends the error in the stream, which kubectl copies and ends (exit 0).
        _raw_json(
            {
                "type": "ERROR",
                "object": _status(410, "Expired", f"too old resource version: {since} ({floor})"),
            }
        )
        return
    _announce_watch(ws, resource)
    # History: the changes after ``since`` (old bookmarks are not resent); live: every line as it comes
    # (a test's raw_event is printed as is).
    _follow(
        cluster,
        0,
        offset,
        lambda line: None if "bookmark" in line else send(line, since),
        lambda line: send(line, None),
    )


def _watch_event(
    event: dict[str, Any], old: dict[str, Any] | None, flags: dict[str, Any], namespaced: bool
) -> dict[str, Any] | None:
    """The event a selector watch gets for one change, as k8s.io/apiserver's cacheWatcher sends it.

    The new and the old object are both matched: starting to match is ADDED, ceasing to match is
    DELETED with the old object at the change's resourceVersion, neither is nothing.
    """
    kind = event.get("type")
    obj = event.get("object") or {}
    if kind not in ("ADDED", "MODIFIED", "DELETED"):
        return event  # ERROR / BOOKMARK pass through
    if old is None:  # a create, or a raw event a test printed as is
        return event if _matches(obj, flags, namespaced) else None
    passes = kind != "DELETED" and _matches(obj, flags, namespaced)
    passed = _matches(old, flags, namespaced)
    if passes:
        return {"type": "MODIFIED" if passed else "ADDED", "object": obj}
    if not passed:
        return None
    gone = json.loads(json.dumps(old))
    gone["metadata"]["resourceVersion"] = obj["metadata"]["resourceVersion"]
    return {"type": "DELETED", "object": gone}


def _api_resources(cluster: FakeCluster, flags: dict[str, Any]) -> None:
    data = cluster.load()
    try:
        _workspace(flags, data)
    except KubectlExit:
        # The real kubectl v1.33.9 prints the table's header before the discovery error.
        sys.stdout.write("NAME   SHORTNAMES   APIVERSION   NAMESPACED   KIND   VERBS   CATEGORIES\n")
        raise
    rows = [["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND", "VERBS", "CATEGORIES"]]
    for plural, info in sorted(RESOURCES.items()):
        shorts = ",".join(a for a in info["aliases"] if len(a) <= 3)
        rows.append(
            [
                plural,
                shorts,
                info["apiVersion"],
                str(info["namespaced"]).lower(),
                info["kind"],
                info["verbs"].replace(" ", ","),
                "",
            ]
        )
    # text/tabwriter(minwidth 6, tabwidth 4, padding 3), as kubectl's printers use.
    widths = [max(6, max(len(r[i]) for r in rows) + 3) for i in range(len(rows[0]))]
    for r in rows:
        sys.stdout.write("".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=False)) + r[-1] + "\n")
    broken = data.get("discovery_errors", [])
    if broken:
        # kubectl v1.33.9 prints the groups that answered, then fails (exit 1) naming the others.
        down = "the server is currently unable to handle the request"
        klog = "".join(
            f'E1202 14:00:00.000000   4242 memcache.go:287] "Unhandled Error" err="couldn\'t get resource '
            f'list for {gv}: {down}"\n'
            for gv in broken
        )
        detail = ", ".join(f"{gv}: {down}" for gv in broken)
        raise KubectlExit(f"{klog}error: unable to retrieve the complete list of server APIs: {detail}")


def _config_view(flags: dict[str, Any]) -> None:
    path = flags.get("--kubeconfig") or os.environ.get("KUBECONFIG")
    if not path:
        raise KubectlExit("error: fake kubectl needs --kubeconfig")
    config = json.loads(Path(path).read_text())  # a JSON kubeconfig (YAML's subset)
    current = config.get("current-context")
    ctx = next(c["context"] for c in config["contexts"] if c["name"] == current)
    cl = next(c["cluster"] for c in config["clusters"] if c["name"] == ctx["cluster"])
    if flags.get("-o") == "jsonpath={.clusters[0].cluster.server}":
        sys.stdout.write(cl["server"])
        return
    if flags.get("-o") != "json":
        raise KubectlExit("error: fake kubectl's config view supports -o json and one jsonpath")
    if flags.get("--minify"):
        user = next(u for u in config["users"] if u["name"] == ctx["user"])
        # kubectl's order for a minified config (not sorted), 4-space indent.
        config = {
            "kind": "Config",
            "apiVersion": "v1",
            "preferences": {},
            "clusters": [{"name": ctx["cluster"], "cluster": cl}],
            "users": [user],
            "contexts": [{"name": current, "context": ctx}],
            "current-context": current,
        }
    sys.stdout.write(json.dumps(config, indent=4, ensure_ascii=False) + "\n")


def _apply(cluster: FakeCluster, flags: dict[str, Any]) -> None:
    if flags.get("-f") != "-":
        raise KubectlExit("error: fake kubectl applies only -f -")
    try:
        manifest = json.loads(sys.stdin.read())
    except json.JSONDecodeError as exc:
        raise KubectlExit(f"error: error parsing STDIN: {exc}") from exc
    ws = _workspace(flags, cluster.load())
    meta = manifest.get("metadata", {})
    ns = meta.get("namespace") or flags.get("-n", "default")
    name = meta["name"]
    existing = [
        o
        for o in cluster.objects(ws, "configmaps")
        if o["metadata"]["name"] == name and o["metadata"]["namespace"] == ns
    ]
    if existing:
        obj = cluster.patch(name, manifest.get("data", {}), namespace=ns, workspace=ws)
    else:
        obj = cluster.create(
            name, manifest.get("data", {}), namespace=ns, workspace=ws, labels=meta.get("labels")
        )
    if flags.get("-o") == "json":
        _dump(obj)
    else:
        sys.stdout.write(f"configmap/{name} {'configured' if existing else 'created'}\n")


def _delete(cluster: FakeCluster, positional: list[str], flags: dict[str, Any]) -> None:
    resource = _resource(positional[1])
    ws = _workspace(flags, cluster.load())
    name = positional[2]
    ns = flags.get("-n", "default")
    if not any(
        o["metadata"]["name"] == name and o["metadata"].get("namespace") == ns
        for o in cluster.objects(ws, resource)
    ):
        raise KubectlExit(f'Error from server (NotFound): {resource} "{name}" not found')
    cluster.delete(name, namespace=ns, workspace=ws)
    sys.stdout.write(f'{RESOURCES[resource]["kind"].lower()} "{name}" deleted\n')


def main(argv: list[str]) -> int:
    root = os.environ.get("FAKE_KUBECTL_DIR")
    if not root:
        sys.stderr.write("fake kubectl: set FAKE_KUBECTL_DIR\n")
        return 2
    cluster = FakeCluster(Path(root))
    try:
        positional, flags = parse_args(argv)
        with (cluster.root / "calls.log").open("a") as f:
            masked = ["--token=***" if a.startswith("--token=") else a for a in argv]
            if "--token" in masked:
                masked[masked.index("--token") + 1] = "***"
            f.write(json.dumps(masked) + "\n")
        if "--token" in flags:
            with (cluster.root / "tokens.log").open("a") as f:
                f.write(flags["--token"] + "\n")
        verb = positional[0] if positional else ""
        if verb == "get":
            _get(cluster, positional, flags)
        elif verb == "api-resources":
            _api_resources(cluster, flags)
        elif verb == "config" and positional[1:2] == ["view"]:
            _config_view(flags)
        elif verb == "apply":
            _apply(cluster, flags)
        elif verb == "delete":
            _delete(cluster, positional, flags)
        else:
            raise KubectlExit(f'error: unknown command "{verb}" for "kubectl"\n\nDid you mean this?\n\tget')
    except KubectlExit as exc:
        if exc.message:
            sys.stderr.write(exc.message + "\n")
        return exc.code
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
