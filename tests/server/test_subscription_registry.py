"""The subscription index and the registry's fan-out under any interleaving (hypothesis, in process).

- :class:`SubscriptionIndex` against a plain model (listener -> set of URIs): the listeners of a
  URI are exactly the live subscriptions; ``add`` reports a URI as *first* exactly when it had no
  listener, ``discard`` / ``remove`` report it as *last* exactly when it loses its only one; so the
  first/last hooks a server drives from them stay balanced.
- :class:`SubscriptionRegistry` (its synchronous part: ``attach`` and ``publish_nowait``): every
  delivered event goes to a listener subscribed to it at that moment, every such listener gets it
  once, publishing a URI never touches a listener of another URI, and after everyone leaves
  every ``on_first`` was matched by one ``on_last``.
"""

from __future__ import annotations

from collections import Counter
from contextlib import ExitStack

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from mcp import MCPError
from mcp.shared.subscriptions import (
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ServerEvent,
    ToolsListChanged,
)

from asyncai_watch.server import LIST_KINDS, ListKind, SubscriptionIndex, SubscriptionRegistry

URI_POOL = [f"memo://notes/k{i}" for i in range(6)]
URIS = st.sampled_from(URI_POOL)
LISTENERS = st.integers(0, 4)
KINDS = st.sets(st.sampled_from(LIST_KINDS), max_size=2)
EVENT_KIND: dict[type[ServerEvent], ListKind] = {
    ToolsListChanged: "tools",
    PromptsListChanged: "prompts",
    ResourcesListChanged: "resources",
}
EVENTS = st.one_of(
    URIS.map(lambda uri: ResourceUpdated(uri=uri)),
    st.sampled_from([ToolsListChanged(), PromptsListChanged(), ResourcesListChanged()]),
)


class IndexMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.index: SubscriptionIndex[int] = SubscriptionIndex()
        self.model: dict[int, set[str]] = {}
        self.kinds: dict[int, set[ListKind]] = {}
        self.hooks: Counter[str] = Counter()  # firsts minus lasts, per URI

    def holders(self, uri: str) -> set[int]:
        return {listener for listener, uris in self.model.items() if uri in uris}

    @rule(listener=LISTENERS, uris=st.lists(URIS, max_size=5), kinds=KINDS)
    def add(self, listener: int, uris: list[str], kinds: set[ListKind]) -> None:
        unheld = [uri for uri in dict.fromkeys(uris) if not self.holders(uri)]
        firsts = self.index.add(listener, uris, kinds)
        assert firsts == unheld
        self.model.setdefault(listener, set()).update(uris)
        self.kinds.setdefault(listener, set()).update(kinds)
        self.hooks.update(firsts)

    @rule(listener=LISTENERS, uris=st.lists(URIS, max_size=5))
    def discard(self, listener: int, uris: list[str]) -> None:
        held = self.model.get(listener, set())
        only = [uri for uri in dict.fromkeys(uris) if uri in held and self.holders(uri) == {listener}]
        lasts = self.index.discard(listener, uris)
        assert lasts == only
        held.difference_update(uris)
        self.hooks.subtract(lasts)

    @rule(listener=LISTENERS)
    def remove(self, listener: int) -> None:
        only = {uri for uri in self.model.get(listener, ()) if self.holders(uri) == {listener}}
        lasts = self.index.remove(listener)
        assert sorted(lasts) == sorted(only)
        self.model.pop(listener, None)
        self.kinds.pop(listener, None)
        self.hooks.subtract(lasts)
        assert listener not in self.index

    @rule(uri=URIS)
    def publish(self, uri: str) -> None:
        targets = self.index.listeners(uri)
        assert len(targets) == len(set(targets))  # nobody twice
        assert set(targets) == self.holders(uri)

    @invariant()
    def consistent(self) -> None:
        for uri in URI_POOL:
            listened = bool(self.holders(uri))
            assert self.index.listened(uri) == listened
            assert self.hooks[uri] == int(listened)  # a first per URI in use, a last for each one left
        for kind in LIST_KINDS:
            expected = {listener for listener, kinds in self.kinds.items() if kind in kinds}
            assert set(self.index.listeners_of_kind(kind)) == expected
        for listener, uris in self.model.items():
            assert set(self.index.uris(listener)) == uris
            assert self.index.count(listener) == len(uris)
        assert self.index.uri_count == sum(1 for uri in URI_POOL if self.holders(uri))
        assert self.index.subscription_count == sum(len(uris) for uris in self.model.values())

    def teardown(self) -> None:
        for listener in list(self.model):
            self.hooks.subtract(self.index.remove(listener))
        assert +self.hooks == Counter()
        assert -self.hooks == Counter()
        assert self.index.uri_count == 0


TestIndex = IndexMachine.TestCase


class Recorder:
    """A registry listener that records what it was handed."""

    def __init__(self, uris: set[str], kinds: set[ListKind]) -> None:
        self.uris = uris
        self.kinds = kinds
        self.got: list[ServerEvent] = []

    def deliver(self, event: ServerEvent) -> None:
        self.got.append(event)


class RegistryMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.hooks: Counter[str] = Counter()
        self.registry = SubscriptionRegistry(
            "prop",
            on_first=lambda uri: self.hooks.update([uri]),
            on_last=lambda uri: self.hooks.subtract([uri]),
        )
        self.attached: list[tuple[Recorder, ExitStack]] = []

    @rule(uris=st.sets(URIS, max_size=4), kinds=KINDS)
    def attach(self, uris: set[str], kinds: set[ListKind]) -> None:
        recorder = Recorder(uris, kinds)
        stack = ExitStack()
        stack.enter_context(self.registry.attach(recorder, uris, kinds))
        self.attached.append((recorder, stack))

    @precondition(lambda self: bool(self.attached))
    @rule(data=st.data())
    def detach(self, data: st.DataObject) -> None:
        recorder, stack = self.attached.pop(data.draw(st.integers(0, len(self.attached) - 1)))
        stack.close()
        seen = len(recorder.got)
        self.registry.publish_nowait(URI_POOL[0])
        assert len(recorder.got) == seen  # a listener that left gets nothing more

    @rule(event=EVENTS)
    def publish(self, event: ServerEvent) -> None:
        before = {id(r): len(r.got) for r, _ in self.attached}
        delivered = self.registry.publish_nowait(event)
        expected = 0
        for recorder, _ in self.attached:
            new = recorder.got[before[id(recorder)] :]
            if isinstance(event, ResourceUpdated):
                live = event.uri in recorder.uris
            else:
                live = EVENT_KIND[type(event)] in recorder.kinds
            assert new == ([event] if live else []), (event, recorder.uris, recorder.kinds, new)
            expected += live
        assert delivered == expected

    @invariant()
    def hooks_balanced(self) -> None:
        for uri in URI_POOL:
            listened = any(uri in r.uris for r, _ in self.attached)
            assert self.registry.listened(uri) == listened
            assert self.hooks[uri] == int(listened)

    def teardown(self) -> None:
        for _, stack in self.attached:
            stack.close()
        assert all(count == 0 for count in self.hooks.values())
        stats = self.registry.stats()
        assert (stats.uris, stats.subscriptions) == (0, 0)


TestRegistry = RegistryMachine.TestCase


def test_a_publish_touches_only_the_listeners_of_its_uri() -> None:
    """The cost of a change, counted in listener invocations: 1 with 10,000 other subscriptions."""
    registry = SubscriptionRegistry("count")
    target = Recorder({"memo://notes/target"}, set())
    others = [Recorder({f"memo://notes/o{i}"}, set()) for i in range(10_000)]
    with ExitStack() as stack:
        stack.enter_context(registry.attach(target, target.uris))
        assert registry.publish_nowait("memo://notes/target") == 1
        for other in others:
            stack.enter_context(registry.attach(other, other.uris))
        assert registry.stats().subscriptions == 10_001
        assert registry.publish_nowait("memo://notes/target") == 1
        assert registry.stats().delivered == 2
    assert len(target.got) == 2
    assert all(not other.got for other in others)


def test_a_raising_hook_or_listener_is_isolated() -> None:
    """Hooks and listeners must not raise; when one does anyway, the others and the index are unharmed."""
    lasts: list[str] = []

    def first(uri: str) -> None:
        raise RuntimeError("boom")

    registry = SubscriptionRegistry("isolated", on_first=first, on_last=lasts.append)

    class Raising:
        def deliver(self, event: ServerEvent) -> None:
            raise RuntimeError("broken listener")

    good = Recorder({"memo://notes/a"}, set())
    with registry.attach(Raising(), ["memo://notes/a"]), registry.attach(good, good.uris):
        assert registry.publish_nowait("memo://notes/a") == 2
    assert good.got == [ResourceUpdated(uri="memo://notes/a")]
    assert lasts == ["memo://notes/a"]  # its on_first raised, yet it gets its on_last
    assert not registry.listened("memo://notes/a")


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_limits_are_checked_when_the_registry_is_made(bad: object) -> None:
    with pytest.raises(ValueError, match="max_uris must be an integer >= 1"):
        SubscriptionRegistry("x", max_uris=bad)  # type: ignore[arg-type]


def test_a_refusal_names_the_uris_and_says_why() -> None:
    registry = SubscriptionRegistry(
        "memo", refuse=lambda uri: None if uri.startswith("memo://") else "not memo"
    )
    registry.check(["memo://notes"])
    with pytest.raises(MCPError) as caught:
        registry.check(["memo://notes", *(f"x://{i}" for i in range(7))])
    assert caught.value.error.code == -32602
    message = caught.value.error.message
    assert message.startswith(
        "memo: cannot subscribe to ['x://0', 'x://1', 'x://2', 'x://3', 'x://4'] (and 2 more)"
    )
    assert message.endswith("; not memo")
