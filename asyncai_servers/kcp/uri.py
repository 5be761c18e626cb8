"""The kcp server's URIs, parsed into what a kubectl invocation needs (sans-IO).

``kcp-events://watch/{workspace}/{resource}{?namespace,labelSelector,fieldSelector,kcp}``
is the watchable event log; ``kcp-api://{workspace}/resources{?kcp}`` is the
plain API-resources document. Every rejection names what was wrong and what is
accepted, because the model reads these errors and corrects its next call.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from typing import Any, Final

import attrs
from mcp import UriTemplate

__all__ = [
    "ALL_NAMESPACES",
    "API_TEMPLATE",
    "WATCH_TEMPLATE",
    "ApiTarget",
    "UriError",
    "WatchTarget",
    "parse_api_uri",
    "parse_watch_uri",
    "validate_workspace",
]

WATCH_TEMPLATE: Final = (
    "kcp-events://watch/{workspace}/{resource}{?namespace,labelSelector,fieldSelector,kcp}"
)
API_TEMPLATE: Final = "kcp-api://{workspace}/resources{?kcp}"
ALL_NAMESPACES: Final = "*"

_WATCH = UriTemplate.parse(WATCH_TEMPLATE)
_API = UriTemplate.parse(API_TEMPLATE)
_WATCH_QUERY: Final = ("namespace", "labelSelector", "fieldSelector", "kcp")
_API_QUERY: Final = ("kcp",)

# kcp workspace paths are colon-separated DNS labels (``root:org:team``); a
# logical-cluster hash name (``2x3kbvv4y8cs``) is one such label too.
_LABEL = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
_WORKSPACE_RE: Final = re.compile(rf"{_LABEL}(?::{_LABEL})*")
# kubectl resource arguments: plural, singular or short name, optionally
# qualified by version and group (``deployments.v1.apps``).
_RESOURCE_RE: Final = re.compile(r"[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?")
_NAMESPACE_RE: Final = re.compile(_LABEL)
_ENDPOINT_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


class UriError(ValueError):
    """A URI this server does not serve; the message says what is accepted."""


_OBJECT_NAME_RE: Final = re.compile(r"[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?")  # a DNS subdomain


def validate_tool_args(args: Mapping[str, Any]) -> None:
    """Refuse tool arguments that kubectl would read as something else (``--all``, ``--as=...``).

    Tool arguments come from the model and go on kubectl's command line, so each one must be
    what its name says; the watch URI gets the same checks in :func:`parse_watch_uri`.
    """
    checks = (
        ("resource", _RESOURCE_RE, "a lowercase resource name such as configmaps, cm or deployments.apps"),
        ("name", _OBJECT_NAME_RE, "an object name (lowercase letters, digits, '-' and '.')"),
        ("namespace", _NAMESPACE_RE, "a namespace (a lowercase DNS label) or '*'"),
        ("kcp", _ENDPOINT_RE, "an endpoint name (letters, digits, '_', '.' or '-')"),
    )
    for key, pattern, accepted in checks:
        value = args.get(key)
        if value in (None, "") or (key == "namespace" and value == ALL_NAMESPACES):
            continue
        if not isinstance(value, str) or not pattern.fullmatch(value):
            raise UriError(f"argument {key}={value!r} is not accepted: expected {accepted}")
    for key in ("labelSelector", "fieldSelector"):
        value = args.get(key)
        if isinstance(value, str) and value.startswith("-"):
            raise UriError(f"argument {key}={value!r} is not a selector (it would be read as a kubectl flag)")


@attrs.frozen(kw_only=True)
class WatchTarget:
    """What one ``kcp-events://watch/...`` URI asks kubectl to watch."""

    workspace: str
    resource: str
    namespace: str | None = None
    """``None``: the kubeconfig context's namespace; ``"*"``: all namespaces (``-A``)."""
    label_selector: str | None = None
    field_selector: str | None = None
    kcp: str | None = None
    """The name of an alternate kcp endpoint configured with ``--endpoint NAME=KUBECONFIG``."""

    @property
    def all_namespaces(self) -> bool:
        return self.namespace == ALL_NAMESPACES


@attrs.frozen(kw_only=True)
class ApiTarget:
    workspace: str
    kcp: str | None = None


def validate_workspace(workspace: str) -> str:
    if not _WORKSPACE_RE.fullmatch(workspace):
        raise UriError(
            f"workspace {workspace!r} is not a kcp workspace path: expected colon-separated lowercase "
            "DNS labels such as 'root' or 'root:app'"
        )
    return workspace


def _unknown_query(uri: str, allowed: tuple[str, ...], template: str) -> None:
    query = urllib.parse.urlsplit(uri).query
    for key, _ in urllib.parse.parse_qsl(query, keep_blank_values=True):
        if key not in allowed:
            raise UriError(
                f"unknown query parameter {key!r} in {uri!r}; accepted: {', '.join(allowed)} (template {template})"
            )


def _optional(value: object, name: str, uri: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise UriError(f"query parameter {name!r} in {uri!r} must be given once, as a string")
    return value or None


def parse_watch_uri(uri: str) -> WatchTarget:
    """Parse a ``kcp-events://watch/...`` URI, or raise :class:`UriError`."""
    matched = _WATCH.match(uri)
    if matched is None:
        raise UriError(
            f"not a kcp watch URI: {uri!r}; expected {WATCH_TEMPLATE}, "
            "e.g. kcp-events://watch/root:app/configmaps?namespace=*"
        )
    _unknown_query(uri, _WATCH_QUERY, WATCH_TEMPLATE)
    workspace = validate_workspace(str(matched["workspace"]))
    resource = str(matched["resource"])
    if not _RESOURCE_RE.fullmatch(resource):
        raise UriError(
            f"resource {resource!r} in {uri!r} is not a kubectl resource name: expected a lowercase plural, "
            "singular or short name, optionally with its group (e.g. configmaps, cm, deployments.apps)"
        )
    namespace = _optional(matched.get("namespace"), "namespace", uri)
    if namespace is not None and namespace != ALL_NAMESPACES and not _NAMESPACE_RE.fullmatch(namespace):
        raise UriError(
            f"namespace {namespace!r} in {uri!r} is not a namespace name: expected a lowercase DNS label, "
            "or '*' for all namespaces"
        )
    kcp = _optional(matched.get("kcp"), "kcp", uri)
    if kcp is not None and not _ENDPOINT_RE.fullmatch(kcp):
        raise UriError(f"kcp endpoint name {kcp!r} in {uri!r} must be letters, digits, '_', '.' or '-'")
    return WatchTarget(
        workspace=workspace,
        resource=resource,
        namespace=namespace,
        label_selector=_optional(matched.get("labelSelector"), "labelSelector", uri),
        field_selector=_optional(matched.get("fieldSelector"), "fieldSelector", uri),
        kcp=kcp,
    )


def parse_api_uri(uri: str) -> ApiTarget:
    """Parse a ``kcp-api://{workspace}/resources`` URI, or raise :class:`UriError`."""
    matched = _API.match(uri)
    if matched is None:
        raise UriError(
            f"not a kcp API URI: {uri!r}; expected {API_TEMPLATE}, e.g. kcp-api://root:app/resources"
        )
    _unknown_query(uri, _API_QUERY, API_TEMPLATE)
    kcp = _optional(matched.get("kcp"), "kcp", uri)
    if kcp is not None and not _ENDPOINT_RE.fullmatch(kcp):
        raise UriError(f"kcp endpoint name {kcp!r} in {uri!r} must be letters, digits, '_', '.' or '-'")
    return ApiTarget(workspace=validate_workspace(str(matched["workspace"])), kcp=kcp)
