"""Running kubectl against kcp workspaces: argv building, credentials, errors, API discovery.

Every call is a kubectl subprocess, so the server works with whatever kubectl
the user has and kcp's addressing: a workspace is the URL path prefix
``--server https://HOST/clusters/<workspace>``. The host comes from the
endpoint's kubeconfig (``kubectl config view --minify``) unless given.

Watches are the client-go reflector done with ``kubectl get --raw``: one list of
the resource's API path gives the items and the List's resourceVersion, and a
watch of the same path with ``?watch=true&resourceVersion=RV`` streams the
API server's events from exactly after RV. kubectl sends a ``--raw`` path as it
is, relative to the host only (it drops the ``--server`` URL's path; checked
with the real kubectl v1.33.9), so these paths carry ``/clusters/<workspace>`` and any path prefix
of the server URL (kcp behind a proxy at ``https://proxy/kcp``).
"""

from __future__ import annotations

import difflib
import json
import re
import shlex
import subprocess
import urllib.parse
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio
import anyio.abc
import attrs

from asyncai_servers.kcp.jsonstream import JsonStreamParser
from asyncai_servers.kcp.uri import WatchTarget

__all__ = [
    "ApiResource",
    "Endpoint",
    "Kubectl",
    "KubectlError",
    "WatchPath",
    "WatchStream",
    "api_path",
    "did_you_mean",
    "find_resource",
    "parse_api_resources_wide",
    "server_base",
]

_STDERR_LIMIT: Final = 8192
_EXIT_GRACE: Final = 10.0  # seconds a kubectl that closed its stdout gets to exit before it is killed
_NO_WORKSPACE: Final = "the server could not find the requested resource"
# kubectl api-resources when some API group fails discovery (an aggregated API down): it prints the
# table of the groups that answered and exits 1 with this.
_PARTIAL_DISCOVERY: Final = "unable to retrieve the complete list of server APIs"
# klog lines (``E1202 14:00:00.000000   42 memcache.go:265] ...``) repeat the real error; keep them out of messages.
_KLOG: Final = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+:\d+\] ")
# kubectl errors that no retry can fix: the URI names something that does not exist or cannot parse.
_PERMANENT: Final = (
    "doesn't have a resource type",
    "unable to parse",
    "(BadRequest)",
    "(NotFound)",
    "invalid selector",
    "unknown flag",
    "not a valid",
)


class KubectlError(Exception):
    """kubectl failed; ``message`` is what to show (kubectl's stderr plus our hints)."""

    def __init__(
        self,
        message: str,
        *,
        stderr: str = "",
        returncode: int | None = None,
        explained: bool = False,
        stdout: bytes = b"",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.stderr = stderr
        self.returncode = returncode
        self.stdout = stdout
        self.explained = explained
        """The message already carries the hints :meth:`Kubectl.explain_failure` would add."""

    @property
    def permanent(self) -> bool:
        return any(p in self.stderr for p in _PERMANENT)


@attrs.frozen(kw_only=True)
class Endpoint:
    """One kcp installation: its kubeconfig, host override and credentials."""

    kubeconfig: str | None = None
    server: str | None = None
    """``https://HOST[:PORT]`` of kcp; ``None``: take it from the kubeconfig's current cluster."""
    token_command: Sequence[str] | None = None
    """Run on every (re)connect; its stdout is the bearer token (the read-only server's re-minting)."""


@attrs.frozen(kw_only=True)
class ApiResource:
    name: str
    short_names: tuple[str, ...]
    api_version: str
    namespaced: bool
    kind: str
    verbs: tuple[str, ...]
    categories: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "shortNames": list(self.short_names),
            "apiVersion": self.api_version,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": list(self.verbs),
            "categories": list(self.categories),
        }

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    @property
    def qualified(self) -> str:
        return f"{self.name}.{self.group}" if self.group else self.name


def find_resource(wanted: str, resources: Sequence[ApiResource]) -> ApiResource | None:
    """The resource ``kubectl get <wanted>`` means: a plural, singular (kind) or short name, optionally
    qualified as ``NAME.GROUP`` or ``NAME.VERSION.GROUP``; the first match in discovery order (core first)."""
    for r in resources:
        aliases = {r.name, r.kind.lower(), *r.short_names}
        if wanted in aliases and not r.group:
            return r
    for r in resources:
        aliases = {r.name, r.kind.lower(), *r.short_names}
        if wanted in aliases:
            return r
        for alias in aliases:
            if r.group and wanted in (f"{alias}.{r.group}", f"{alias}.{r.version}.{r.group}"):
                return r
        if not r.group and wanted in (f"{a}.{r.version}" for a in aliases):
            return r
    return None


def api_path(resource: ApiResource, workspace: str, namespace: str | None, *, prefix: str = "") -> str:
    """The collection's URL path under the kcp host: ``PREFIX/clusters/WS/api/v1[/namespaces/NS]/PLURAL``.

    The core group lives under ``/api/v1``, the others under ``/apis/GROUP/VERSION``; ``namespace``
    ``None`` (all namespaces, or a cluster-scoped resource) leaves out ``/namespaces/NS``. ``prefix`` is
    the server URL's own path (kcp behind a proxy at ``https://proxy/kcp``): kubectl sends a ``--raw``
    path relative to the host only, so the path must carry it.
    """
    base = f"/apis/{resource.group}/{resource.version}" if resource.group else f"/api/{resource.version}"
    ns = f"/namespaces/{namespace}" if namespace is not None and resource.namespaced else ""
    return f"{prefix.rstrip('/')}/clusters/{workspace}{base}{ns}/{resource.name}"


def server_base(server: str) -> str:
    """``SCHEME://HOST[:PORT][/PREFIX]`` of a server URL, without any ``/clusters/<workspace>`` part
    (a kubeconfig may point into a workspace; workspaces are addressed per watch)."""
    parts = urllib.parse.urlsplit(server.strip())
    prefix = parts.path.partition("/clusters/")[0]
    if prefix.endswith("/clusters"):
        prefix = prefix[: -len("/clusters")]
    return f"{parts.scheme}://{parts.netloc}{prefix}".rstrip("/")


@attrs.frozen(kw_only=True)
class WatchPath:
    """A watch target resolved through discovery: the API path to list and watch, and its selectors."""

    path: str
    resource: ApiResource
    namespace: str | None
    """The namespace the path is in; ``None``: all namespaces, or a cluster-scoped resource."""
    label_selector: str | None = None
    field_selector: str | None = None

    def _query(self, extra: Sequence[tuple[str, str]] = ()) -> str:
        params = list(extra)
        if self.label_selector:
            params.append(("labelSelector", self.label_selector))
        if self.field_selector:
            params.append(("fieldSelector", self.field_selector))
        query = urllib.parse.urlencode(params, quote_via=urllib.parse.quote, safe="")
        return f"{self.path}?{query}" if query else self.path

    def list_uri(self) -> str:
        return self._query()

    def watch_uri(self, resource_version: str | None) -> str:
        """Watch from just after ``resource_version`` (``None``: the API server's current state, which
        it first sends as ADDED events), with BOOKMARKs so a quiet selection still advances it."""
        params = [("watch", "true")]
        if resource_version:
            params.append(("resourceVersion", resource_version))
        params.append(("allowWatchBookmarks", "true"))
        return self._query(params)


def parse_api_resources_wide(text: str) -> list[ApiResource]:
    """Parse ``kubectl api-resources -o wide`` (a tabwriter table: slice rows at the header's column starts)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    header = lines[0]
    names = header.split()
    if names[:1] != ["NAME"]:
        raise ValueError(f"unexpected kubectl api-resources header: {header!r}")
    starts = [header.index(n) for n in names]
    out: list[ApiResource] = []
    for line in lines[1:]:
        cells: dict[str, str] = {}
        for i, col in enumerate(names):
            end = starts[i + 1] if i + 1 < len(starts) else None
            cells[col] = line[starts[i] : end].strip()
        # kubectl prints verbs comma-separated (older ones: "[get list]").
        verbs = cells.get("VERBS", "").strip("[]").replace(",", " ").split()
        out.append(
            ApiResource(
                name=cells["NAME"],
                short_names=tuple(s for s in cells.get("SHORTNAMES", "").split(",") if s),
                api_version=cells.get("APIVERSION", ""),
                namespaced=cells.get("NAMESPACED", "") == "true",
                kind=cells.get("KIND", ""),
                verbs=tuple(verbs),
                categories=tuple(s for s in cells.get("CATEGORIES", "").split(",") if s),
            )
        )
    return out


def did_you_mean(wanted: str, resources: Sequence[ApiResource], n: int = 3) -> list[str]:
    """Close resource names for a typo (``atproprecords`` -> ``atprotorecords``)."""
    by_alias: dict[str, str] = {}
    for r in resources:
        for alias in (r.name, r.qualified, r.kind.lower(), *r.short_names):
            by_alias.setdefault(alias, r.name)
    out: list[str] = []
    for alias in difflib.get_close_matches(wanted.lower(), list(by_alias), n=n * 2, cutoff=0.6):
        name = by_alias[alias]
        if name not in out:
            out.append(name)
    return out[:n]


def _stderr_text(data: bytes) -> str:
    text = data.decode("utf-8", "replace").strip()
    lines = text.splitlines()
    kept = [ln for ln in lines if not _KLOG.match(ln)]
    return ("\n".join(kept) if kept else text)[-_STDERR_LIMIT:]


@attrs.define
class WatchStream:
    """A running ``kubectl get --raw ...?watch=true``: iterate events; ``returncode``/``stderr`` once the
    stream ended."""

    process: anyio.abc.Process
    argv: list[str]
    returncode: int | None = None
    stderr: str = ""
    ended: bool = False  # stdout reached EOF: kubectl ended the stream itself
    _err_chunks: list[bytes] = attrs.field(factory=list)

    async def batches(self) -> AsyncIterator[list[Any]]:
        """The documents completed by each read from kubectl's stdout (a burst arrives as one batch)."""
        assert self.process.stdout is not None
        parser = JsonStreamParser()
        async for chunk in self.process.stdout:
            docs = parser.feed(chunk)
            if docs:
                yield docs
        self.ended = True

    async def _drain_stderr(self) -> None:
        assert self.process.stderr is not None
        async for chunk in self.process.stderr:
            self._err_chunks.append(chunk)
            if sum(map(len, self._err_chunks)) > 4 * _STDERR_LIMIT:
                self._err_chunks[:] = [b"".join(self._err_chunks)[-_STDERR_LIMIT:]]


class Kubectl:
    """kubectl for a set of kcp endpoints; ``None`` names the default one."""

    def __init__(
        self,
        binary: str,
        endpoints: Mapping[str | None, Endpoint],
        *,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if None not in endpoints:
            raise ValueError("the endpoints map needs a default entry (key None)")
        self.binary = binary
        self.endpoints = dict(endpoints)
        self.env = dict(env) if env is not None else None
        self._hosts: dict[str | None, str] = {}
        self._namespaces: dict[str | None, str] = {}

    def endpoint(self, kcp: str | None) -> Endpoint:
        try:
            return self.endpoints[kcp]
        except KeyError:
            names = ", ".join(sorted(k for k in self.endpoints if k is not None)) or "none configured"
            raise KubectlError(
                f"unknown kcp endpoint {kcp!r}; configured with --endpoint NAME=KUBECONFIG: {names}"
            ) from None

    async def run(self, args: Sequence[str], *, stdin: bytes | None = None) -> tuple[bytes, str]:
        """Run kubectl to completion; return (stdout, stderr) or raise KubectlError with its stderr."""
        argv = [self.binary, *args]
        try:
            proc = await anyio.run_process(argv, input=stdin, check=False, env=self.env)
        except OSError as exc:
            raise KubectlError(f"cannot run kubectl ({self.binary!r}): {exc}") from exc
        err = _stderr_text(proc.stderr)
        if proc.returncode != 0:
            raise KubectlError(
                err or f"kubectl exited with status {proc.returncode}",
                stderr=err,
                returncode=proc.returncode,
                stdout=proc.stdout,
            )
        return proc.stdout, err

    async def _host(self, kcp: str | None) -> str:
        ep = self.endpoint(kcp)
        if ep.server:
            return server_base(ep.server)
        cached = self._hosts.get(kcp)
        if cached is not None:
            return cached
        config = await self._minified(kcp)
        server = _first(config, "clusters", "cluster").get("server")
        server = server.strip() if isinstance(server, str) else ""
        parts = urllib.parse.urlsplit(server)
        if not parts.scheme or not parts.netloc:
            raise KubectlError(
                f"the kubeconfig's current cluster has no usable server URL ({server!r}); pass --kcp-host"
            )
        # The kubeconfig may already point into a workspace (.../clusters/root:x); we address workspaces
        # ourselves, keeping a path prefix before it (kcp behind a proxy).
        host = server_base(server)
        self._hosts[kcp] = host
        return host

    async def _minified(self, kcp: str | None) -> dict[str, Any]:
        """``kubectl config view --minify -o json``: the current context, its cluster and user."""
        ep = self.endpoint(kcp)
        args = ["config", "view", "--minify", "-o", "json"]
        if ep.kubeconfig:
            args += ["--kubeconfig", ep.kubeconfig]
        out, _ = await self.run(args)
        try:
            doc = json.loads(out)
        except json.JSONDecodeError as exc:
            raise KubectlError(f"kubectl config view --minify -o json printed invalid JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise KubectlError(f"kubectl config view --minify -o json printed no config: {str(doc)[:200]}")
        return doc

    async def default_namespace(self, kcp: str | None) -> str:
        """The namespace kubectl uses without ``-n``: the kubeconfig context's, else ``default``."""
        cached = self._namespaces.get(kcp)
        if cached is not None:
            return cached
        try:
            config = await self._minified(kcp)
        except KubectlError:
            if self.endpoint(kcp).server is None:
                raise
            config = {}  # no usable kubeconfig beside --kcp-host: kubectl too falls back to "default"
        namespace = _first(config, "contexts", "context").get("namespace")
        result = namespace if isinstance(namespace, str) and namespace else "default"
        self._namespaces[kcp] = result
        return result

    async def connection_args(self, workspace: str, kcp: str | None) -> list[str]:
        """``--kubeconfig``/``--server``/``--token`` for one connection; re-mints the token each call."""
        ep = self.endpoint(kcp)
        args: list[str] = []
        if ep.kubeconfig:
            args += ["--kubeconfig", ep.kubeconfig]
        args += ["--server", f"{await self._host(kcp)}/clusters/{workspace}"]
        if ep.token_command:
            try:
                proc = await anyio.run_process(list(ep.token_command), check=False, env=self.env)
            except OSError as exc:
                raise KubectlError(
                    f"token command {shlex.join(ep.token_command)!r} cannot run: {exc}"
                ) from exc
            token = proc.stdout.decode().strip()
            if proc.returncode != 0 or not token:
                raise KubectlError(
                    f"token command {shlex.join(ep.token_command)!r} failed (exit {proc.returncode}): "
                    f"{_stderr_text(proc.stderr) or 'no token printed'}"
                )
            args += ["--token", token]
        return args

    @staticmethod
    def selection_args(target: WatchTarget) -> list[str]:
        args: list[str] = []
        if target.all_namespaces:
            args.append("-A")
        elif target.namespace:
            args += ["-n", target.namespace]
        if target.label_selector:
            args += ["-l", target.label_selector]
        if target.field_selector:
            args += ["--field-selector", target.field_selector]
        return args

    async def list_objects(self, target: WatchTarget, conn: Sequence[str]) -> list[Any]:
        """``kubectl get <resource> -o json``: the items of the list (the ``list`` tool)."""
        out, _ = await self.run(["get", target.resource, "-o", "json", *self.selection_args(target), *conn])
        try:
            doc = json.loads(out)
        except json.JSONDecodeError as exc:
            raise KubectlError(f"kubectl get {target.resource} -o json printed invalid JSON: {exc}") from exc
        if isinstance(doc, dict) and isinstance(doc.get("items"), list):
            return list(doc["items"])
        if isinstance(doc, dict) and "metadata" in doc:
            return [doc]
        raise KubectlError(f"kubectl get {target.resource} -o json printed no list: {str(doc)[:200]}")

    async def resolve(self, target: WatchTarget, conn: Sequence[str]) -> WatchPath:
        """The API path of ``target`` via discovery (``kubectl api-resources -o wide``) and its namespace."""
        partial: KubectlError | None = None
        try:
            resources = await self.api_resources(target.workspace, target.kcp, conn=conn)
        except KubectlError as exc:
            if _PARTIAL_DISCOVERY not in exc.stderr or not exc.stdout.strip():
                raise
            # Some API group is down; the rest answered, and the watched resource may well be among them.
            partial = exc
            resources = parse_api_resources_wide(exc.stdout.decode())
        resource = find_resource(target.resource, resources)
        if resource is None and partial is not None:
            raise KubectlError(  # not permanent: the missing group may answer on the next try
                f"resource {target.resource!r} is not among the API groups that answered discovery: "
                f"{partial.message}",
                stderr=partial.stderr,
                returncode=partial.returncode,
                explained=True,
            )
        if resource is None:
            # kubectl's own words for it, so explain_failure and KubectlError.permanent treat it alike.
            err = f'error: the server doesn\'t have a resource type "{target.resource}"'
            unknown = KubectlError(err, stderr=err, returncode=1)
            raise await self.explain_failure(unknown, target, resources=resources)
        missing = [v for v in ("list", "watch") if v not in resource.verbs]
        if missing:
            raise KubectlError(
                f"resource {resource.qualified!r} cannot be watched: the API server does not allow "
                f"{' or '.join(missing)} on it (verbs: {', '.join(resource.verbs) or 'none'})",
                stderr="not a valid watch target",
                explained=True,
            )
        namespace: str | None = None
        if resource.namespaced and not target.all_namespaces:
            namespace = target.namespace or await self.default_namespace(target.kcp)
        prefix = urllib.parse.urlsplit(await self._host(target.kcp)).path
        return WatchPath(
            path=api_path(resource, target.workspace, namespace, prefix=prefix),
            resource=resource,
            namespace=namespace,
            label_selector=target.label_selector,
            field_selector=target.field_selector,
        )

    async def list_raw(self, path: WatchPath, conn: Sequence[str]) -> tuple[list[Any], str | None]:
        """``kubectl get --raw PATH``: the List's items and its ``metadata.resourceVersion``."""
        uri = path.list_uri()
        out, _ = await self.run(["get", "--raw", uri, *conn])
        try:
            doc = json.loads(out)
        except json.JSONDecodeError as exc:
            raise KubectlError(f"kubectl get --raw {uri} printed invalid JSON: {exc}") from exc
        if not isinstance(doc, dict) or not isinstance(doc.get("items"), list):
            raise KubectlError(f"kubectl get --raw {uri} printed no List: {str(doc)[:200]}")
        meta = doc.get("metadata")
        rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
        return list(doc["items"]), rv if isinstance(rv, str) and rv else None

    def watch_argv(self, path: WatchPath, conn: Sequence[str], resource_version: str | None) -> list[str]:
        return [
            self.binary,
            "get",
            "--raw",
            path.watch_uri(resource_version),
            "--request-timeout=0",
            *conn,
        ]

    @asynccontextmanager
    async def watch(
        self, path: WatchPath, conn: Sequence[str], resource_version: str | None
    ) -> AsyncIterator[WatchStream]:
        """Start ``kubectl get --raw PATH?watch=true&resourceVersion=RV``; on exit the process is ended
        (killed if still running) and reaped."""
        argv = self.watch_argv(path, conn, resource_version)
        try:
            process = await anyio.open_process(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env
            )
        except OSError as exc:
            raise KubectlError(f"cannot run kubectl ({self.binary!r}): {exc}") from exc
        stream = WatchStream(process=process, argv=argv)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(stream._drain_stderr)
                try:
                    yield stream
                finally:
                    with anyio.CancelScope(shield=True):
                        if stream.ended and process.returncode is None:
                            # kubectl closed its stdout, so it is exiting: wait for its status rather than
                            # kill. Popen.kill() polls first, and that poll reaps a child that has exited but
                            # whose status asyncio's watcher thread has not delivered yet; asyncio then
                            # reports 255 and a clean server timeout would read as a failure.
                            with anyio.move_on_after(_EXIT_GRACE):
                                await process.wait()
                        if process.returncode is None:
                            process.kill()
                        stream.returncode = await process.wait()
        finally:
            with anyio.CancelScope(shield=True):
                await process.aclose()
            stream.stderr = _stderr_text(b"".join(stream._err_chunks))

    async def api_resources(
        self, workspace: str, kcp: str | None, *, conn: Sequence[str] | None = None
    ) -> list[ApiResource]:
        if conn is None:
            conn = await self.connection_args(workspace, kcp)
        out, _ = await self.run(["api-resources", "-o", "wide", *conn])
        try:
            return parse_api_resources_wide(out.decode())
        except (ValueError, KeyError) as exc:
            raise KubectlError(f"cannot read kubectl api-resources output: {exc}") from exc

    async def explain_failure(
        self, err: KubectlError, target: WatchTarget, *, resources: Sequence[ApiResource] | None = None
    ) -> KubectlError:
        """Add ``did you mean: ...`` (or why the workspace cannot be asked) to a failed get."""
        if err.explained:
            return err
        if _NO_WORKSPACE in err.stderr and "(NotFound)" in err.stderr:
            # Under kcp, a 404 for discovery itself means the workspace path does not exist (or is not visible).
            return KubectlError(
                f"{err.message}\nworkspace {target.workspace!r} was not found at this kcp server "
                "(kubectl's API discovery under /clusters/<workspace> answered 404)",
                stderr=err.stderr,
                returncode=err.returncode,
                explained=True,
            )
        if "doesn't have a resource type" not in err.stderr:
            return err
        if resources is None:
            try:
                resources = await self.api_resources(target.workspace, target.kcp)
            except KubectlError as exc:
                return KubectlError(
                    f"{err.message}\nworkspace {target.workspace!r} did not answer API discovery "
                    f"(does it exist?): {exc.message}",
                    stderr=err.stderr,
                    returncode=err.returncode,
                    explained=True,
                )
        if not resources:
            hint = f"workspace {target.workspace!r} serves no API resources (does it exist?)"
        else:
            close = did_you_mean(target.resource, resources)
            if close:
                hint = f"did you mean: {', '.join(close)}"
            else:
                hint = f"available: {', '.join(sorted(r.name for r in resources)[:30])}"
        return KubectlError(
            f"{err.message}\n{hint}", stderr=err.stderr, returncode=err.returncode, explained=True
        )


def _first(config: Mapping[str, Any], section: str, field: str) -> dict[str, Any]:
    """``config[section][0][field]`` of a minified kubeconfig, ``{}`` where absent."""
    entries = config.get(section)
    if isinstance(entries, list) and entries and isinstance(entries[0], dict):
        value = entries[0].get(field)
        if isinstance(value, dict):
            return value
    return {}
