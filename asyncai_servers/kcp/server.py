"""The kcp MCP server: event-log resources over API watches (``kubectl get --raw``), plus kubectl tools.

Subscriptions of both protocol eras (``subscriptions/listen``, and
``resources/subscribe`` from 2025-era clients) are held by one
:class:`~asyncai_watch.server.SubscriptionRegistry`: the first subscription to a
watch URI starts that URI's watcher, the last one ending stops it. Each ring append
publishes the URI to the registry, which notifies that URI's listeners only.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from asyncai_servers.kcp.kubectl import Kubectl, KubectlError
from asyncai_servers.kcp.state import strip_managed_fields
from asyncai_servers.kcp.uri import (
    API_TEMPLATE,
    WATCH_TEMPLATE,
    UriError,
    WatchTarget,
    parse_api_uri,
    parse_watch_uri,
    validate_tool_args,
    validate_workspace,
)
from asyncai_servers.kcp.watcher import SeedError, WatcherPool
from asyncai_watch import EVENTS_MIME_TYPE
from asyncai_watch.server.errors import resource_error
from asyncai_watch.server.eventlog import read_after
from asyncai_watch.server.subscriptions import DEFAULT_MAX_URIS, SubscriptionRegistry
from asyncai_watch.server.tool_dispatch import ToolCall, tool_handlers

__all__ = ["KcpServer", "watch_refusal"]

WATCH_DESCRIPTION: Final = (
    "Event log of one Kubernetes resource type in a kcp workspace, fed by a Kubernetes watch (list, then watch from its resourceVersion). "
    "Events: {seq, type: ADDED|MODIFIED|DELETED|ERROR, object, old (MODIFIED)}; managedFields stripped. "
    "namespace='*' watches all namespaces; omitted means the kubeconfig's namespace. labelSelector and "
    "fieldSelector are kubectl selectors; kcp names an alternate kcp endpoint. "
    'Example: await watch_start(name="cm", uri="kcp-events://watch/root:app/configmaps?namespace=*")'
)
API_DESCRIPTION: Final = (
    "The API resources a kcp workspace serves (same JSON as the get_api_resources tool); not watchable "
    "(a listen on it is refused): read it, then watch a resource type with kcp-events://watch/..."
)

_STR: Final = {"type": "string"}


def _schema(required: Sequence[str], **props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(required), "additionalProperties": False}


def _desc(text: str) -> dict[str, Any]:
    return {"type": "string", "description": text}


_WS = _desc("kcp workspace path, e.g. root:app")
_KCP = _desc("alternate kcp endpoint name (server --endpoint NAME=KUBECONFIG); omit for the default")
_NS = _desc("namespace; '*' for all namespaces; omit for the kubeconfig's namespace")


def watch_refusal(uri: str) -> str | None:
    """Why a subscription to ``uri`` is refused, or ``None`` for a ``kcp-events://watch`` URI.

    A ``kcp-api://`` URI reads fine but never changes, so a watch on it would start and never
    deliver: it is refused before anything is acknowledged, saying what to watch instead.
    """
    try:
        parse_watch_uri(uri)
    except UriError as exc:
        if uri.startswith("kcp-api://"):
            return (
                f"{uri} is not watchable: it is a plain document (the workspace's API resources), "
                "served for resources/read and never updated. Read it to see which resource types exist, "
                f"then watch one as {WATCH_TEMPLATE}, e.g. kcp-events://watch/root:app/configmaps?namespace=*"
            )
        return f"cannot watch {uri!r}: {exc}"
    return None


class KcpServer:
    def __init__(
        self, kubectl: Kubectl, *, read_write: bool, name: str = "kcp", max_uris: int = DEFAULT_MAX_URIS
    ) -> None:
        self.kubectl = kubectl
        self.read_write = read_write
        self._pool: WatcherPool | None = None
        # The pool's task group exists only once serving starts; the hooks look it up then.
        self.subscriptions = SubscriptionRegistry(
            name,
            refuse=watch_refusal,
            on_first=lambda uri: self.pool.add_listener(uri),
            on_last=lambda uri: self.pool.remove_listener(uri),
            max_uris=max_uris,
        )
        # Built once (tool_handlers answers the same list): the tools never change, and building
        # the models was 3% of a tools/list.
        tools = self.tools()
        self.server: Server[Any] = Server(
            name,
            version="0.1.0",
            instructions=(
                "Kubernetes objects in kcp workspaces. Watch a resource type with the kcp-events://watch "
                "template; read kcp-api://{workspace}/resources to see which resource types exist."
            ),
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_templates,
            on_read_resource=self._read_resource,
            **tool_handlers(name, tools, {tool.name: self._tool_call(tool.name) for tool in tools}),
            **self.subscriptions.handlers(),
        )

    @property
    def pool(self) -> WatcherPool:
        if self._pool is None:
            raise RuntimeError("KcpServer.pool used before attach_pool()")
        return self._pool

    def attach_pool(self, pool: WatcherPool) -> None:
        self._pool = pool

    def close_listeners(self) -> None:
        """End every open listen stream gracefully (an HTTP shutdown would otherwise wait on them)."""
        self.subscriptions.close()

    async def publish(self, uri: str) -> None:
        await self.subscriptions.publish(uri)

    # --- resources ---------------------------------------------------------------------------------

    async def _list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[])

    async def _list_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    uri_template=WATCH_TEMPLATE,
                    name="kcp-events",
                    description=WATCH_DESCRIPTION,
                    mime_type=EVENTS_MIME_TYPE,
                ),
                types.ResourceTemplate(
                    uri_template=API_TEMPLATE,
                    name="kcp-api-resources",
                    description=API_DESCRIPTION,
                    mime_type="application/json",
                ),
            ]
        )

    async def _read_resource(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        try:
            if uri.startswith("kcp-api://"):
                target = parse_api_uri(uri)
                text = json.dumps(await self._api_resources(target.workspace, target.kcp))
                mime = "application/json"
            else:
                text = await self.pool.read(uri, read_after(params.meta))
                mime = EVENTS_MIME_TYPE
        except UriError as exc:
            raise resource_error(uri, str(exc)) from exc
        except (SeedError, KubectlError) as exc:
            raise MCPError(types.INVALID_PARAMS, f"{uri}: {exc}") from exc
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type=mime, text=text)]
        )

    async def _api_resources(self, workspace: str, kcp: str | None) -> list[dict[str, Any]]:
        return [r.to_json() for r in await self.kubectl.api_resources(validate_workspace(workspace), kcp)]

    # --- tools ---------------------------------------------------------------------------------------

    def tools(self) -> list[types.Tool]:
        ro = types.ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=True)
        out = [
            types.Tool(
                name="get_api_resources",
                description="List the API resource types a kcp workspace serves (name, shortNames, kind, verbs).",
                input_schema=_schema(["workspace"], workspace=_WS, kcp=_KCP),
                annotations=ro,
            ),
            types.Tool(
                name="get",
                description="Get one object as JSON (kubectl get RESOURCE NAME -o json; managedFields stripped).",
                input_schema=_schema(
                    ["workspace", "resource", "name"],
                    workspace=_WS,
                    resource=_desc("resource type, e.g. configmaps"),
                    name=_desc("object name"),
                    namespace=_NS,
                    kcp=_KCP,
                ),
                annotations=ro,
            ),
            types.Tool(
                name="list",
                description="List objects as JSON (kubectl get RESOURCE -o json; managedFields stripped).",
                input_schema=_schema(
                    ["workspace", "resource"],
                    workspace=_WS,
                    resource=_desc("resource type, e.g. configmaps"),
                    namespace=_NS,
                    labelSelector=_desc("label selector, e.g. app=web"),
                    fieldSelector=_desc("field selector, e.g. metadata.name=x"),
                    kcp=_KCP,
                ),
                annotations=ro,
            ),
        ]
        if self.read_write:
            destructive = types.ToolAnnotations(
                read_only_hint=False, destructive_hint=True, open_world_hint=True
            )
            out += [
                types.Tool(
                    name="apply",
                    description="Create or update objects from a JSON or YAML manifest (kubectl apply -f -).",
                    input_schema=_schema(
                        ["workspace", "manifest"],
                        workspace=_WS,
                        manifest=_desc("the manifest text, JSON or YAML"),
                        namespace=_desc("namespace for objects that name none"),
                        kcp=_KCP,
                    ),
                    annotations=destructive,
                ),
                types.Tool(
                    name="delete",
                    description="Delete one object (kubectl delete RESOURCE NAME).",
                    input_schema=_schema(
                        ["workspace", "resource", "name"],
                        workspace=_WS,
                        resource=_desc("resource type, e.g. configmaps"),
                        name=_desc("object name"),
                        namespace=_desc("namespace of the object"),
                        kcp=_KCP,
                    ),
                    annotations=destructive,
                ),
            ]
        return out

    def _tool_call(self, tool: str) -> ToolCall:
        """The ``tools/call`` function of ``tool``: its arguments checked, kubectl's errors as results."""
        handler: Callable[[dict[str, Any]], Awaitable[Any]] = {
            "get_api_resources": self._tool_api_resources,
            "get": self._tool_get,
            "list": self._tool_list,
            "apply": self._tool_apply,
            "delete": self._tool_delete,
        }[tool]

        async def call(
            ctx: ServerRequestContext[Any, Any], arguments: Mapping[str, Any]
        ) -> types.CallToolResult:
            args = dict(arguments)
            try:
                validate_tool_args(args)  # model-supplied values go on kubectl's command line
                result = await handler(args)
            except (KubectlError, UriError) as exc:
                return _error(str(exc))
            except (KeyError, TypeError) as exc:
                return _error(f"{tool}: missing or invalid argument {exc}")
            text = result if isinstance(result, str) else json.dumps(result, indent=1)
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

        return call

    async def _conn(self, args: dict[str, Any]) -> list[str]:
        return await self.kubectl.connection_args(
            validate_workspace(str(args["workspace"])), _opt(args, "kcp")
        )

    async def _tool_api_resources(self, args: dict[str, Any]) -> Any:
        return await self._api_resources(str(args["workspace"]), _opt(args, "kcp"))

    @staticmethod
    def _target(args: dict[str, Any]) -> WatchTarget:
        return WatchTarget(
            workspace=str(args["workspace"]),
            resource=str(args["resource"]),
            namespace=_opt(args, "namespace"),
            label_selector=_opt(args, "labelSelector"),
            field_selector=_opt(args, "fieldSelector"),
            kcp=_opt(args, "kcp"),
        )

    async def _tool_get(self, args: dict[str, Any]) -> Any:
        target = self._target(args)
        argv = ["get", target.resource, str(args["name"]), "-o", "json", *Kubectl.selection_args(target)]
        try:
            out, _ = await self.kubectl.run([*argv, *await self._conn(args)])
        except KubectlError as exc:
            raise await self.kubectl.explain_failure(exc, target) from exc
        return strip_managed_fields(json.loads(out))

    async def _tool_list(self, args: dict[str, Any]) -> Any:
        target = self._target(args)
        try:
            items = await self.kubectl.list_objects(target, await self._conn(args))
        except KubectlError as exc:
            raise await self.kubectl.explain_failure(exc, target) from exc
        return [strip_managed_fields(i) for i in items]

    async def _tool_apply(self, args: dict[str, Any]) -> Any:
        argv = ["apply", "-f", "-", "-o", "json"]
        ns = _opt(args, "namespace")
        if ns:
            argv += ["-n", ns]
        out, _ = await self.kubectl.run(
            [*argv, *await self._conn(args)], stdin=str(args["manifest"]).encode()
        )
        try:
            return strip_managed_fields(json.loads(out))
        except json.JSONDecodeError:
            return out.decode()

    async def _tool_delete(self, args: dict[str, Any]) -> Any:
        argv = ["delete", str(args["resource"]), str(args["name"])]
        ns = _opt(args, "namespace")
        if ns:
            argv += ["-n", ns]
        out, _ = await self.kubectl.run([*argv, *await self._conn(args)])
        return out.decode().strip()


def _opt(args: dict[str, Any], key: str) -> str | None:
    value = args.get(key)
    return str(value) if value not in (None, "") else None


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)
