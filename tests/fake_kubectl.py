"""A fake ``kubectl`` for the kcp server's tests (run through the executable ``tests/bin/kubectl``).

It mimics what the server relies on from the real kubectl v1.33:

- argument handling: flags before or after the resource, ``--flag=value`` and
  ``--flag value``, ``-n``/``-A``/``-l``/``--field-selector``/``-o``/``-w``,
  the global ``--kubeconfig``/``--server``/``--token``/``--request-timeout``;
  an unknown flag fails as kubectl does;
- output: ``-o json`` prints 4-space indented JSON (a ``List`` for collections),
  ``-w --output-watch-events`` prints the current objects as ``ADDED`` events and
  then each change as one compact ``{"type": ..., "object": ...}`` line;
- errors: kubectl's texts and exit code 1 (``error: the server doesn't have a
  resource type "foo"``, ``Error from server (NotFound): ...``).

The cluster lives in ``$FAKE_KUBECTL_DIR/cluster.json``; the kcp workspace comes
from ``--server https://HOST/clusters/<workspace>``. A watch tails
``$FAKE_KUBECTL_DIR/events.ndjson`` with inotify (watchfiles), no polling: each
line is ``{"workspace", "resource", "event": {...}, "old": {...}}`` (a change;
``old`` is the object before it, absent for a create) or
``{"exit": N, "stderr": "..."}`` (the API server ends every open watch stream).
Tests drive both through :class:`FakeCluster`. As the API server does, a watch
with a selector matches both the old and the new object: a change that makes an
object stop matching is printed as ``DELETED`` (the old object at the change's
resourceVersion), one that makes it start matching as ``ADDED``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
        """Change the cluster without streaming the events: changes made while no watch was connected."""
        self._quiet = True
        try:
            yield
        finally:
            self._quiet = False

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
        """Print ``event`` on every matching watch without changing the cluster (e.g. a duplicate ADDED)."""
        self.append({"workspace": workspace, "resource": resource, "event": event})


# --- the kubectl command line ----------------------------------------------------------------------------

_VALUE_FLAGS = {
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
    # the real binary in tests/test_kcp_real_kubectl.py); the server's parser does not rely on either.
    sys.stdout.write(json.dumps(obj, separators=(",", ":"), sort_keys=True, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def _get(cluster: FakeCluster, positional: list[str], flags: dict[str, Any]) -> None:
    if len(positional) < 2:
        raise KubectlExit(
            'You must specify the type of resource to get. Use "kubectl api-resources" for a complete list of supported resources.\n\nerror: Required resource not specified.\nUse "kubectl explain <resource>" for a detailed description of that resource (e.g. kubectl explain pods).\nSee \'kubectl get -h\' for help and examples'
        )
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
    from watchfiles import watch  # inotify-backed; imported only by watching invocations

    path = cluster.events_file
    buf = b""

    def drain() -> None:
        nonlocal offset, buf
        with path.open("rb") as f:
            f.seek(offset)
            chunk = f.read()
        offset += len(chunk)
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for raw in lines:
            if not raw.strip():
                continue
            line = json.loads(raw)
            if "exit" in line:
                if line.get("stderr"):
                    sys.stderr.write(line["stderr"] + "\n")
                raise KubectlExit("", int(line["exit"]))
            if line.get("workspace") != ws or line.get("resource") != resource:
                continue
            event = _watch_event(line["event"], line.get("old"), flags, namespaced)
            if event is not None:
                _dump_event(event if flags.get("--output-watch-events") else event["object"])

    drain()
    for _changes in watch(path, debounce=0, step=1, rust_timeout=0, yield_on_timeout=False):
        drain()


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
    _workspace(flags, cluster.load())
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
    _dump(config)


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
