"""The resubscribe policy (``core/resubscribe.py``): its jitter, with an injected random source."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncai_watch.core.backoff import Backoff
from asyncai_watch.core.feed import Down, Feed, OpenListen
from asyncai_watch.core.limits import Limits
from asyncai_watch.core.resubscribe import GiveUp, Resubscribe, Retry
from asyncai_watch.errors import LimitError


def failing_delays(policy: Resubscribe) -> list[float]:
    """The delays of attempts that each fail before they are up, until the policy gives up."""
    delays = []
    now = 0.0
    while isinstance(decision := policy.ended(now), Retry):
        delays.append(decision.delay)
        now += decision.delay
    assert isinstance(decision, GiveUp)
    return delays


def test_without_jitter_the_delays_are_the_backoffs() -> None:
    assert failing_delays(Resubscribe()) == [1.0, 2.0, 4.0, 8.0, 16.0]


def test_jitter_spreads_each_delay_below_the_backoffs_with_the_injected_source() -> None:
    draws = iter([0.0, 0.5, 0.999, 0.25, 0.75])
    policy = Resubscribe(jitter=0.5, random=lambda: next(draws))
    assert failing_delays(policy) == [1.0, 1.5, 4.0 * (1 - 0.4995), 8.0 * 0.875, 16.0 * 0.625]


def test_two_clients_of_one_restarted_server_come_back_at_different_moments() -> None:
    a = Resubscribe(jitter=0.5, random=random.Random(1).random)
    b = Resubscribe(jitter=0.5, random=random.Random(2).random)
    assert failing_delays(a) != failing_delays(b)


@given(
    jitter=st.floats(0, 1),
    draws=st.lists(st.floats(0, 1, exclude_max=True), min_size=5, max_size=5),
    initial=st.floats(0, 10),
    cap=st.floats(0, 60),
)
def test_a_jittered_delay_stays_within_its_bounds(
    jitter: float, draws: list[float], initial: float, cap: float
) -> None:
    backoff = Backoff(initial=initial, cap=cap)
    source = iter(draws)
    jittered = failing_delays(Resubscribe(backoff=backoff, jitter=jitter, random=lambda: next(source)))
    exact = failing_delays(Resubscribe(backoff=backoff))
    assert len(jittered) == len(exact)  # the same attempts, then give up
    for got, delay in zip(jittered, exact, strict=True):
        assert delay * (1 - jitter) - 1e-9 <= got <= delay


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), True, "0.2"])
def test_a_jitter_outside_zero_to_one_is_refused_and_the_error_says_what_is_accepted(bad: object) -> None:
    with pytest.raises(ValueError, match=r"jitter must be a number from 0 \(none\) to 1"):
        Resubscribe(jitter=bad)  # type: ignore[arg-type]
    with pytest.raises(LimitError, match="resubscribe_jitter must be a number from 0 to 1"):
        Limits(resubscribe_jitter=bad)  # type: ignore[arg-type]


def test_a_random_source_outside_zero_to_one_is_refused() -> None:
    policy = Resubscribe(jitter=0.5, random=lambda: 1.0)
    with pytest.raises(ValueError, match=r"must return a number in \[0, 1\), got 1.0"):
        policy.ended(0.0)


def test_the_feed_tells_its_watchers_the_jittered_delay() -> None:
    feed: Feed[str, None] = Feed(jitter=0.5, random=lambda: 0.5)
    (listen,) = [a for a in feed.watch("a", "w", 0.0) if isinstance(a, OpenListen)]
    feed.send(listen.id)
    feed.acked(listen.id, None, 0.0)
    feed.read_done("a", 0.0)
    (down,) = [a for a in feed.ended(listen.id, "lost", 1.0) if isinstance(a, Down)]
    assert down.retry == Retry(0.75, 1)
    assert feed.deadline == 1.75


def test_losses_while_an_attempt_waits_share_it_and_giving_up_forgets_it() -> None:
    policy = Resubscribe(backoff=Backoff(initial=1.0, cap=2.0, attempts=2))
    assert policy.lost(0.0) == Retry(1.0, 1)
    assert policy.due == 1.0
    assert policy.lost(0.5) == Retry(1.0, 1)  # the same attempt, not a second one
    assert policy.due == 1.0
    assert policy.purpose(1.0, settle=False) == "retry"
    assert policy.due is None
    assert policy.lost(1.2) == Retry(2.0, 2)  # the attempt failed: the next one
    assert policy.due == 3.2
    assert policy.purpose(3.2, settle=False) == "retry"
    assert policy.lost(3.3) == GiveUp(2)
    assert policy.pending is None
    assert policy.due is None
    assert policy.failures == 0


def test_before_its_deadline_only_a_new_watch_makes_the_attempt() -> None:
    policy = Resubscribe()
    assert policy.purpose(0.0, settle=True) == "cover"  # nothing waits: listens open as they come
    policy.lost(0.0)
    assert policy.purpose(0.5, settle=True) is None  # a listen acked or ended meanwhile: wait
    assert policy.due == 1.0
    assert policy.purpose(0.5, settle=False) == "retry"  # a watch starts: it tries at once
    assert policy.due is None
