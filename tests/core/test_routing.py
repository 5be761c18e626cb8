"""URI routing and RFC 6570 templates (levels 1-4) on top of the SDK's matcher."""

from __future__ import annotations

import random
from typing import Any

import pytest
import uritemplate
from hypothesis import given
from hypothesis import strategies as st

from asyncai_watch.core.routing import (
    InvalidUriTemplate,
    Route,
    ServerListing,
    Template,
    compile_template,
    route,
)
from asyncai_watch.errors import RoutingError
from asyncai_watch.mcp.source import ListedResource, ListedTemplate

KCP = "kcp-events://watch/{workspace}/{resource}{?namespace,labelSelector,fieldSelector,kcp}"


# --- templates --------------------------------------------------------------------------------------


def test_kcp_template_from_the_adr() -> None:
    t = Template(KCP)
    assert t.match("kcp-events://watch/root:app/configmaps?namespace=*") == {
        "workspace": "root:app",
        "resource": "configmaps",
        "namespace": "*",
    }


def test_query_parts_in_any_order_and_optional() -> None:
    t = Template(KCP)
    assert t.match("kcp-events://watch/root/pods") == {"workspace": "root", "resource": "pods"}
    got = t.match("kcp-events://watch/root/pods?kcp=prod&labelSelector=app%3Dweb&namespace=default&utm=x")
    assert got == {
        "workspace": "root",
        "resource": "pods",
        "kcp": "prod",
        "labelSelector": "app=web",
        "namespace": "default",
    }
    assert t.optional_names == {"namespace", "labelSelector", "fieldSelector", "kcp"}
    assert t.match("kcp-events://watch/root") is None
    assert t.match("other://watch/root/pods") is None


def test_levels_one_to_three() -> None:
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("memo://notes/{key}", {"key": "a b"}, "memo://notes/a%20b"),
        ("file://{+path}", {"path": "etc/hosts"}, "file://etc/hosts"),
        ("doc://x{#section}", {"section": "intro"}, "doc://x#intro"),
        ("m://x{.fmt}", {"fmt": "json"}, "m://x.json"),
        ("m://x{/a,b}", {"a": "1", "b": "2"}, "m://x/1/2"),
        ("m://x{;v}", {"v": "3"}, "m://x;v=3"),
        ("m://x{?q}{&page}", {"q": "a", "page": "2"}, "m://x?q=a&page=2"),
    ]
    for template, variables, uri in cases:
        t = Template(template)
        assert t.expand(variables) == uri, template
        assert t.match(uri) == variables, template


def test_level_four_explode_from_the_sdk() -> None:
    t = Template("files://root{/path*}")
    assert t.expand({"path": ["a", "b c"]}) == "files://root/a/b%20c"
    assert t.match("files://root/a/b%20c") == {"path": ["a", "b c"]}


def test_level_four_prefix_modifier() -> None:
    t = Template("cache://{key:3}/{rest}")
    assert t.expand({"key": "abcdef", "rest": "r"}) == "cache://abc/r"
    assert t.match("cache://abc/r") == {"key": "abc", "rest": "r"}
    assert t.match("cache://ab/r") == {"key": "ab", "rest": "r"}
    assert t.match("cache://abcd/r") is None  # a 3-character prefix never expands to 4
    with pytest.raises(TypeError, match="prefix modifier"):
        t.expand({"key": ["a"], "rest": "r"})


def test_level_four_query_explode() -> None:
    t = Template("q://items{?tag*,page}")
    assert t.expand({"tag": ["red", "big one"], "page": "2"}) == "q://items?tag=red&tag=big%20one&page=2"
    assert t.match("q://items?page=2&tag=red&tag=big%20one") == {"tag": ["red", "big one"], "page": "2"}
    assert t.match("q://items?tag=x") == {"tag": ["x"]}
    assert t.match("q://items") == {}
    assert Template("q://items{?a}{&tag*}").match("q://items?tag=1&a=z&tag=2") == {
        "a": "z",
        "tag": ["1", "2"],
    }


@pytest.mark.parametrize(
    ("template", "says"),
    [
        ("m://{a:0}", "length of 1-9999"),
        ("m://{a:x}", "length of 1-9999"),
        ("m://{a*}", "not supported"),
        ("m://{?a*}/{b}", "trailing query part"),
        ("m://{a}{b}", "adjacent"),
        ("m://{a", "Unclosed"),
    ],
)
def test_bad_templates_say_why(template: str, says: str) -> None:
    with pytest.raises(InvalidUriTemplate, match=says):
        Template(template)
    with pytest.raises(InvalidUriTemplate):
        compile_template(template)


def test_expansion_agrees_with_the_uritemplate_library() -> None:
    # `uritemplate` is a reference expander for RFC 6570 (it cannot match); ours must agree.
    cases: list[tuple[str, dict[str, Any]]] = [
        ("x://{a:2}/{b}{?c*,d}", {"a": "hello", "b": "w o", "c": ["1", "2"], "d": "z"}),
        ("x://{+p}{?q}", {"p": "a/b", "q": "1 2"}),
        ("x://{/p*}{;m}", {"p": ["a", "b"], "m": "v"}),
        ("x://{.f}{#frag}", {"f": "json", "frag": "top"}),
        (KCP, {"workspace": "root:app", "resource": "cm", "namespace": "*"}),
    ]
    for template, variables in cases:
        assert Template(template).expand(variables) == uritemplate.expand(template, variables), template


# --- property: expand then match gives the variables back -------------------------------------------

text = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=6)
plain = st.text("abcXYZ019-_~", min_size=1, max_size=6)
reserved_ok = st.text(st.characters(codec="utf-8", exclude_characters="?#%\x00"), min_size=1, max_size=6)


@st.composite
def template_and_values(draw: st.DrawFn) -> tuple[str, dict[str, Any], set[str]]:
    """A template of literal-separated path parts plus an optional trailing query part."""
    parts = ["x://h"]
    values: dict[str, Any] = {}
    n = 0

    def name() -> str:
        nonlocal n
        n += 1
        return f"v{n}"

    for kind in draw(
        st.lists(st.sampled_from(["simple", "prefix", "segment", "label", "param"]), max_size=4)
    ):
        v = name()
        if kind == "simple":
            parts.append(f"/{{{v}}}")
            values[v] = draw(text)
        elif kind == "prefix":
            k = draw(st.integers(1, 5))
            parts.append(f"/{{{v}:{k}}}")
            values[v] = draw(text)
        elif kind == "segment":
            parts.append(f"{{/{v}}}")
            values[v] = draw(text)
        elif kind == "label":
            parts.append(f"/f{{.{v}}}")
            values[v] = draw(plain)
        else:
            parts.append(f"{{;{v}}}")
            values[v] = draw(text)
    tail = draw(st.sampled_from(["", "reserved", "explode"]))
    if tail == "reserved":
        v = name()
        parts.append(f"/r/{{+{v}}}")
        values[v] = draw(reserved_ok)
    elif tail == "explode":
        v = name()
        parts.append(f"/e{{/{v}*}}")
        values[v] = draw(st.lists(text, max_size=3))
    optional: set[str] = set()
    qvars = [name() for _ in range(draw(st.integers(0, 3)))]
    if qvars:
        exploded = draw(st.sets(st.sampled_from(qvars)))
        parts.append("{?" + ",".join(f"{q}*" if q in exploded else q for q in qvars) + "}")
        for q in qvars:
            optional.add(q)
            if draw(st.booleans()):  # optional parts may be missing
                values[q] = draw(st.lists(text, min_size=1, max_size=3)) if q in exploded else draw(text)
    return "".join(parts), values, optional


def expected(template: Template, values: dict[str, Any]) -> dict[str, Any]:
    out = dict(values)
    for name, k in template._prefixes.items():  # a prefix expands (and so matches) its first k characters
        out[name] = out[name][:k]
    return out


@given(template_and_values(), st.randoms(use_true_random=False))
def test_expand_then_match_gives_the_variables_back(
    case: tuple[str, dict[str, Any], set[str]], rnd: random.Random
) -> None:
    source, values, optional = case
    t = Template(source)
    assert t.optional_names == optional
    uri = t.expand(values)
    assert t.match(uri) == expected(t, values)
    # The query's parameters may come in any order (an exploded list keeps its own order).
    base, sep, query = uri.partition("?")
    if sep:
        groups: dict[str, list[str]] = {}
        for pair in query.split("&"):
            groups.setdefault(pair.partition("=")[0], []).append(pair)
        names = list(groups)
        rnd.shuffle(names)
        assert t.match(base + "?" + "&".join(p for n in names for p in groups[n])) == expected(t, values)


# --- routing ----------------------------------------------------------------------------------------

MEMO = ServerListing(
    name="memo",
    resources=[ListedResource(uri="memo://notes")],
    templates=[ListedTemplate(uri_template="memo://notes/{key}")],
    subscribable=True,
)
KCP_SERVER = ServerListing(name="kcp", templates=[ListedTemplate(uri_template=KCP)], subscribable=True)
PLAIN = ServerListing(name="plain", resources=[ListedResource(uri="plain://readme")], subscribable=False)


def test_exact_listing_wins() -> None:
    shadow = ServerListing(
        name="shadow", templates=[ListedTemplate(uri_template="memo://{what}")], subscribable=True
    )
    assert route("memo://notes", [shadow, MEMO]) == Route(server="memo", template=None, variables={})


def test_template_match() -> None:
    r = route("kcp-events://watch/root:app/configmaps?namespace=*", [PLAIN, MEMO, KCP_SERVER])
    assert (r.server, r.template) == ("kcp", KCP)
    assert r.variables == {"workspace": "root:app", "resource": "configmaps", "namespace": "*"}
    assert route("memo://notes/todo", [MEMO]).variables == {"key": "todo"}


def test_first_subscribable_server_otherwise() -> None:
    assert route("unknown://thing", [PLAIN, KCP_SERVER, MEMO]) == Route(server="kcp")


def test_bad_server_template_does_not_break_routing() -> None:
    broken = ServerListing(name="broken", templates=[ListedTemplate(uri_template="b://{a}{b}")])
    assert route("memo://notes/x", [broken, MEMO]).server == "memo"
    with pytest.raises(RoutingError, match=r"b://\{a\}\{b\} \(broken, unparseable\)"):
        route("zzz://", [broken])


def test_no_route_lists_what_is_known() -> None:
    with pytest.raises(RoutingError) as info:
        route(
            "nope://x", [PLAIN, ServerListing(name="t", templates=[ListedTemplate(uri_template="t://{id}")])]
        )
    message = str(info.value)
    assert "'nope://x'" in message
    assert "plain://readme (plain)" in message
    assert "t://{id} (t)" in message
    assert "resources.subscribe" in message
    with pytest.raises(RoutingError, match="no MCP server is connected"):
        route("nope://x", [])


@given(template_and_values())
def test_route_agrees_with_expansion(case: tuple[str, dict[str, Any], set[str]]) -> None:
    source, values, _ = case
    t = Template(source)
    other = ServerListing(name="other", templates=[ListedTemplate(uri_template="y://{a}")], subscribable=True)
    mine = ServerListing(name="mine", templates=[ListedTemplate(uri_template=source)])
    r = route(t.expand(values), [other, mine])
    assert (r.server, r.template, r.variables) == ("mine", source, expected(t, values))
