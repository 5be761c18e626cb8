"""Which connected server a URI goes to, and RFC 6570 matching.

Pure. :func:`route` picks, in order: a server that lists the URI exactly; a server with a
resource template that matches it; the first server that advertises
``resources.subscribe``; else :class:`~asyncai_watch.errors.RoutingError` listing the
known URIs and templates.

:class:`Template` matches and expands RFC 6570 templates, levels 1-4. It is a thin
layer over the SDK's :class:`mcp.shared.uri_template.UriTemplate` (the matcher MCP
servers themselves route ``resources/read`` with, so client and server agree on what a
URI means; imported on first use, so that importing the core loads no SDK), adding the two
level-4 pieces the SDK refuses:

- the prefix modifier ``{var:N}``: expands the first N characters; matches a value of
  at most N characters;
- query explode ``{?list*}`` / ``{&list*}`` in a trailing query part: expands
  ``?list=a&list=b``; matches every ``list=`` parameter, as a list, in any order.

Trailing query parts (``{?a,b}``, ``{&c}``) match in any order, may be partly or wholly
absent (absent variables are left out of the result), and extra parameters are ignored.
Associative-array values (level-4 ``{?keys*}`` with a mapping) are not supported.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Final
from urllib.parse import unquote

import attrs

from asyncai_watch.core.echo import clip, quoted
from asyncai_watch.core.resources import ListedResource, ListedTemplate
from asyncai_watch.errors import RoutingError

if TYPE_CHECKING:
    from mcp.shared.uri_template import InvalidUriTemplate, UriTemplate

__all__ = [
    "InvalidUriTemplate",
    "Route",
    "ServerCatalog",
    "ServerListing",
    "Template",
    "compile_template",
    "route",
]

_EXPRESSION: Final = re.compile(r"\{([^{}]*)\}")
_OPERATORS: Final = frozenset("+#./;?&")
_PREFIX_LENGTH: Final = re.compile(r"[1-9][0-9]{0,3}")  # RFC 6570 §2.4.1: 1..9999
_MAX_LISTED: Final = 20


@functools.cache
def _sdk() -> ModuleType:
    """The SDK's ``mcp.shared.uri_template``, imported on first use (it loads all of ``mcp``)."""
    import mcp.shared.uri_template

    return mcp.shared.uri_template


def __getattr__(name: str) -> object:
    if name == "InvalidUriTemplate":  # the SDK's class, re-exported without importing it eagerly
        return _sdk().InvalidUriTemplate
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


Value = str | Sequence[str]
Variables = dict[str, str | list[str]]


@attrs.frozen
class _Var:
    name: str
    explode: bool = False
    prefix: int | None = None


@attrs.frozen
class _Expr:
    operator: str
    variables: tuple[_Var, ...]
    sdk: UriTemplate  # this expression alone, modifiers the SDK refuses stripped


class Template:
    """An RFC 6570 URI template that can both expand and match (see the module docstring)."""

    __slots__ = ("_parts", "_prefixes", "_query_explode", "_sdk", "template")

    def __init__(self, template: str) -> None:
        """Parse ``template``; raises :class:`InvalidUriTemplate` (a ``ValueError``) saying why."""
        self.template = template
        pieces: list[str | tuple[str, tuple[_Var, ...], str]] = []
        prefixes: dict[str, int] = {}
        query_explode: set[str] = set()
        pos = 0
        for m in _EXPRESSION.finditer(template):
            if m.start() > pos:
                pieces.append(template[pos : m.start()])
            body = m.group(1)
            op = body[0] if body and body[0] in _OPERATORS else ""
            variables: list[_Var] = []
            specs: list[str] = []
            for spec in body[len(op) :].split(","):
                var = _parse_varspec(template, spec, m.start())
                variables.append(var)
                if var.prefix is not None:
                    prefixes[var.name] = var.prefix
                    specs.append(var.name)
                elif var.explode and op in ("?", "&"):
                    query_explode.add(var.name)
                    specs.append(var.name)
                else:
                    specs.append(spec)
            pieces.append((op, tuple(variables), "{" + op + ",".join(specs) + "}"))
            pos = m.end()
        if pos < len(template):
            pieces.append(template[pos:])
        # The SDK validates the whole template, with the modifiers it refuses stripped;
        # each expression of a valid template is then valid on its own.
        self._sdk = _sdk_parse("".join(p if isinstance(p, str) else p[2] for p in pieces))
        outside = query_explode - self._sdk.query_variable_names
        if outside:
            raise _sdk().InvalidUriTemplate(
                f"Query explode {{?{sorted(outside)[0]}*}} is supported only in the template's trailing "
                "query part (e.g. 'items{?tag*}'); got it elsewhere",
                template=template,
            )
        parts: list[str | _Expr] = [
            p if isinstance(p, str) else _Expr(p[0], p[1], _sdk_parse(p[2])) for p in pieces
        ]
        self._parts = tuple(parts)
        self._prefixes = prefixes
        self._query_explode = frozenset(query_explode)

    def __repr__(self) -> str:
        return f"Template({self.template!r})"

    def __str__(self) -> str:
        return self.template

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Template) and other.template == self.template

    def __hash__(self) -> int:
        return hash(self.template)

    @property
    def variable_names(self) -> list[str]:
        """Every variable, in order of appearance."""
        return self._sdk.variable_names

    @property
    def optional_names(self) -> frozenset[str]:
        """Variables a matching URI may leave out (the trailing query part's)."""
        return self._sdk.query_variable_names

    def expand(self, variables: Mapping[str, Value]) -> str:
        """The URI for ``variables`` (``str`` or a sequence of ``str`` each); absent ones are omitted."""
        out: list[str] = []
        for part in self._parts:
            if isinstance(part, str):
                out.append(part)
            else:
                out.append(self._expand_expr(part, variables))
        return "".join(out)

    def _expand_expr(self, expr: _Expr, variables: Mapping[str, Value]) -> str:
        values: dict[str, Value] = {}
        for var in expr.variables:
            if var.name not in variables:
                continue
            value = variables[var.name]
            if var.prefix is not None:
                if not isinstance(value, str):
                    raise TypeError(
                        f"Variable {var.name!r} has a prefix modifier {{{var.name}:{var.prefix}}}, "
                        f"which applies to strings only; got {type(value).__name__}"
                    )
                value = value[: var.prefix]
            values[var.name] = value
        if not any(
            v.name in self._query_explode and not isinstance(values.get(v.name, ""), str)
            for v in expr.variables
        ):
            return expr.sdk.expand(values)
        # Query explode: each list item becomes its own name=value pair (RFC 6570 §3.2.8).
        pairs: list[str] = []
        for var in expr.variables:
            if var.name not in values:
                continue
            value = values[var.name]
            items = [value] if isinstance(value, str) or var.name not in self._query_explode else list(value)
            for item in items:
                piece = _sdk_parse("{&" + var.name + "}").expand({var.name: item})
                if piece:
                    pairs.append(piece[1:])
        return (expr.operator + "&".join(pairs)) if pairs else ""

    def match(self, uri: str) -> Variables | None:
        """The variables that expand to ``uri``, or ``None`` when it does not match."""
        result = self._sdk.match(uri)
        if result is None:
            return None
        for name, n in self._prefixes.items():
            value = result.get(name)
            if isinstance(value, str) and len(value) > n:
                return None
        if self._query_explode:
            query = uri.partition("#")[0].partition("?")[2]
            found: dict[str, list[str]] = {}
            if query:
                for pair in query.split("&"):
                    name, _, value = pair.partition("=")
                    if name in self._query_explode:
                        found.setdefault(name, []).append(unquote(value))
            for name in self._query_explode:
                result.pop(name, None)
                if name in found:
                    result[name] = found[name]
        return result


@functools.lru_cache(maxsize=512)
def _sdk_parse(text: str) -> UriTemplate:
    parsed: UriTemplate = _sdk().UriTemplate.parse(text)
    return parsed


def _parse_varspec(template: str, spec: str, pos: int) -> _Var:
    if ":" in spec:
        name, _, length = spec.partition(":")
        if not _PREFIX_LENGTH.fullmatch(length):
            raise _sdk().InvalidUriTemplate(
                f"Prefix modifier in {quoted(spec)} at position {pos} needs a length of 1-9999, e.g. {{{name}:3}}",
                template=template,
                position=pos,
            )
        return _Var(name, prefix=int(length))
    if spec.endswith("*"):
        return _Var(spec[:-1], explode=True)
    return _Var(spec)


@functools.lru_cache(maxsize=512)
def _compile(template: str) -> Template | InvalidUriTemplate:
    try:
        return Template(template)
    except _sdk().InvalidUriTemplate as exc:
        invalid: InvalidUriTemplate = exc
        return invalid


def compile_template(template: str) -> Template:
    """A cached :class:`Template`; raises :class:`InvalidUriTemplate` for a bad template."""
    compiled = _compile(template)
    if not isinstance(compiled, Template):
        raise compiled
    return compiled


@attrs.frozen(kw_only=True)
class ServerListing:
    """What one server lists (its resources and templates) and whether it can carry watches, as
    routing needs it. (Named apart from :class:`asyncai_watch.filters.Catalog`, the functions a
    filter may call.)"""

    name: str
    resources: Sequence[ListedResource] = ()
    templates: Sequence[ListedTemplate] = ()
    subscribable: bool = False
    """The server can carry watches (it advertises ``resources.subscribe``, or accepted a try)."""
    by_trial: bool = False
    """It does not advertise ``resources.subscribe``, but accepted the subscription it was tried with."""
    protocol: str = ""
    """The MCP version it speaks: ``2026-07-28`` takes ``subscriptions/listen``, older ones
    ``resources/subscribe``."""


ServerCatalog = ServerListing
"""The former name of :class:`ServerListing`, kept for code written against it."""


@attrs.frozen(kw_only=True)
class Route:
    """Where a URI goes: the server, the template that matched (if any) and its variables."""

    server: str
    template: str | None = None
    variables: Mapping[str, object] = attrs.field(factory=dict, hash=False)
    mime_type: str | None = None
    """The mimeType the listing declares for the URI or its template (a shape hint)."""


def route(uri: str, catalogs: Sequence[ServerListing]) -> Route:
    """The server for ``uri``: exact listing, then template match, then the first subscribable server."""
    for cat in catalogs:
        for res in cat.resources:
            if res.uri == uri:
                return Route(server=cat.name, mime_type=res.mime_type)
    for cat in catalogs:
        for tpl in cat.templates:
            compiled = _compile(tpl.uri_template)
            if not isinstance(compiled, Template):
                continue  # a server's unparseable template cannot match anything; others still can
            variables = compiled.match(uri)
            if variables is not None:
                return Route(
                    server=cat.name, template=tpl.uri_template, variables=variables, mime_type=tpl.mime_type
                )
    for cat in catalogs:
        if cat.subscribable:
            return Route(server=cat.name)
    raise RoutingError(_no_route_message(uri, catalogs))


def _listing(items: list[str]) -> str:
    if not items:
        return "none"
    shown = ", ".join(items[:_MAX_LISTED])
    return shown + (f", +{len(items) - _MAX_LISTED} more" if len(items) > _MAX_LISTED else "")


def _no_route_message(uri: str, catalogs: Sequence[ServerListing]) -> str:
    if not catalogs:
        return f"no server for {quoted(uri)}: no MCP server is connected"
    uris = [f"{clip(r.uri)} ({c.name})" for c in catalogs for r in c.resources]
    templates: list[str] = []
    for c in catalogs:
        for t in c.templates:
            bad = not isinstance(_compile(t.uri_template), Template)
            templates.append(f"{clip(t.uri_template)} ({c.name}{', unparseable' if bad else ''})")
    servers = ", ".join(c.name for c in catalogs)
    return (
        f"no server for {quoted(uri)}: no server lists it, it matches no template, and no server "
        f"({servers}) advertises resources.subscribe. Known URIs: {_listing(uris)}. "
        f"Templates: {_listing(templates)}."
    )
