"""The webhooks server's pure parts and its store, with the time passed in: verification per
scheme (rotation, tolerance, constant-time compares over every secret), URIs, and the SQLite
store's logs (exactly once, contiguous seqs per view, positions kept across a reopen, retention
as a GAP naming it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from asyncai_servers.webhooks.config import ConfigError, SourceSpec, parse_config
from asyncai_servers.webhooks.store import Retention, Store
from asyncai_servers.webhooks.uri import LogTarget, StateTarget, UriError, parse_uri
from asyncai_servers.webhooks.verify import Refused, verify
from asyncai_watch.core.eventlog import Sequencer
from tests.support.webhooks_helpers import (
    GITHUB_SECRET,
    NOW,
    STANDARD_SECRET,
    github,
    hmac_headers,
    run_delivery,
    standard,
    stripe,
    stripe_event,
    workflow_run,
)

GH = SourceSpec("github", "github", (b"old-secret", GITHUB_SECRET.encode()))
ST = SourceSpec("stripe", "stripe", (b"whsec_test_stripe_0123456789",))
SW = SourceSpec("svix", "standard", (STANDARD_SECRET.encode(),))
HM = SourceSpec(
    "deploys", "hmac", (b"deploys-secret",), signature_header="x-signature", id_header="x-delivery"
)


def lower(headers: dict[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def test_github_accepts_any_configured_secret_and_refuses_a_changed_body() -> None:
    body = json.dumps(workflow_run(5)).encode()
    got = verify(GH, lower(github(body, "workflow_run", "d-1")), body, NOW)
    assert (got.delivery_id, got.event, got.payload["workflow_run"]["id"]) == ("d-1", "workflow_run", 5)
    old = verify(GH, lower(github(body, "workflow_run", "d-2", secret="old-secret")), body, NOW)
    assert old.delivery_id == "d-2"  # rotation: the old secret still verifies until it is removed
    with pytest.raises(Refused) as changed:
        verify(GH, lower(github(body, "workflow_run")), body.replace(b"CI", b"XX"), NOW)
    assert changed.value.status == 401
    assert "does not match the body for any configured secret" in changed.value.message


def test_github_form_encoded_payload_is_read_from_its_payload_field() -> None:
    from urllib.parse import urlencode

    body = urlencode({"payload": json.dumps({"zen": "Keep it logically awesome."})}).encode()
    headers = {**github(body, "ping", "d-3"), "Content-Type": "application/x-www-form-urlencoded"}
    assert verify(GH, lower(headers), body, NOW).payload == {"zen": "Keep it logically awesome."}


def test_stripe_timestamps_outside_the_tolerance_are_refused_either_way() -> None:
    body = stripe_event("evt_1")
    assert verify(ST, lower(stripe(body, at=int(NOW) - 299)), body, NOW).delivery_id == "evt_1"
    for at in (int(NOW) - 301, int(NOW) + 301):
        with pytest.raises(Refused, match=r"past the tolerance of 300 s") as stale:
            verify(ST, lower(stripe(body, at=at)), body, NOW)
        assert stale.value.status == 401
    # A signature made for another timestamp does not verify under this one (a replay with t changed).
    headers = stripe(body, at=int(NOW) - 10)
    forged = headers["Stripe-Signature"].replace(f"t={int(NOW) - 10}", f"t={int(NOW)}")
    with pytest.raises(Refused, match="does not match"):
        verify(ST, {"stripe-signature": forged}, body, NOW)


def test_standard_webhooks_verify_with_the_whsec_secret_and_the_injected_time() -> None:
    body = b'{"type":"invoice.paid","data":{"id":"inv_1"}}'
    got = verify(SW, lower(standard(body, "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", at=int(NOW))), body, NOW)
    assert (got.delivery_id, got.event) == ("msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", "invoice.paid")
    with pytest.raises(Refused, match="webhook-timestamp is 600 s"):
        verify(SW, lower(standard(body, "msg_1", at=int(NOW) - 600)), body, NOW)
    with pytest.raises(Refused, match="webhook-id header is missing"):
        verify(SW, {}, body, NOW)


def test_hmac_uses_the_configured_headers_and_a_missing_id_is_the_body_hash() -> None:
    body = b'{"type":"deploy.finished","env":"prod"}'
    got = verify(HM, lower(hmac_headers(body, "dep-9", "ignored")), body, NOW)
    assert (got.delivery_id, got.event) == ("dep-9", "deploy.finished")
    no_id = SourceSpec("deploys", "hmac", (b"deploys-secret",))
    a = verify(no_id, lower(hmac_headers(body, "x", "y")), body, NOW)
    b = verify(no_id, lower(hmac_headers(body, "z", "y")), body, NOW)
    assert a.delivery_id == b.delivery_id
    assert a.delivery_id.startswith("sha256:")


def test_the_config_reads_secrets_from_env_and_files_and_names_what_is_wrong(tmp_path: Path) -> None:
    (tmp_path / "s").write_text("from-a-file\n")
    config = parse_config(
        {"source": [{"name": "gh", "kind": "github", "secrets": [{"env": "GH"}, {"file": "s"}]}]},
        base=tmp_path,
        env={"GH": "from-env"},
    )
    assert config.sources["gh"].secrets == (b"from-env", b"from-a-file")
    assert "<2 secret(s)>" in repr(config.sources["gh"])  # never the secrets themselves
    with pytest.raises(ConfigError, match="environment variable 'GH' is unset or empty"):
        parse_config(
            {"source": [{"name": "gh", "kind": "github", "secrets": [{"env": "GH"}]}]}, base=tmp_path, env={}
        )
    with pytest.raises(ConfigError, match=r"kind must be one of \['github', 'stripe', 'standard', 'hmac'\]"):
        parse_config(
            {"source": [{"name": "gh", "kind": "gitlab", "secrets": [{"file": "s"}]}]}, base=tmp_path, env={}
        )


def test_uris_parse_to_one_target_per_log_whatever_the_spelling() -> None:
    names = {"github"}
    a = parse_uri("webhook-events://github/workflow_run?conclusion=failure&branch=main", names)
    b = parse_uri("webhook-events://github/workflow_run?branch=main&conclusion=failure", names)
    assert a == b == LogTarget("github", "workflow_run", (("branch", "main"), ("conclusion", "failure")))
    assert parse_uri("webhook-events://github", names) == LogTarget("github", "")
    assert parse_uri("webhook-state://github/workflow_run/42", names) == StateTarget(
        "github", "workflow_run", "42"
    )
    assert parse_uri("webhook-events://github/push?repository=o%2Fr", names) == LogTarget(
        "github", "push", (("repository", "o/r"),)
    )
    with pytest.raises(UriError, match="cannot filter on 'colour'"):
        parse_uri("webhook-events://github/push?colour=red", names)
    with pytest.raises(UriError, match="no source 'stripe'"):
        parse_uri("webhook-events://stripe/charge.failed", names)


def store(tmp: Path, **kw: Any) -> Store:
    clock = kw.pop("clock", [NOW])
    return Store(tmp / "hooks.sqlite3", kinds={"github": "github"}, now=lambda: clock[0], **kw)


def test_a_delivery_is_stored_once_and_each_log_numbers_its_own_events(tmp_path: Path) -> None:
    s = store(tmp_path)
    main_failures = LogTarget("github", "workflow_run", (("branch", "main"), ("conclusion", "failure")))
    s.ensure_view(main_failures)
    results = s.insert_many(
        [run_delivery(1), run_delivery(2, branch="dev"), run_delivery(1), run_delivery(3)]
    )
    assert [r is None for r in results] == [False, False, True, False]
    assert s.insert(*run_delivery(2, branch="dev")) is None
    every = json.loads(s.read_log(LogTarget("github", "workflow_run"), None).text)
    mine = json.loads(s.read_log(main_failures, None).text)
    assert [(e["seq"], e["key"]) for e in every["events"]] == [(1, "1"), (2, "2"), (3, "3")]
    assert [(e["seq"], e["key"]) for e in mine["events"]] == [(1, "1"), (2, "3")]  # contiguous, no false GAP
    # A filtered log made later is filled from what the source's log holds.
    dev = LogTarget("github", "workflow_run", (("branch", "dev"),))
    assert [e["key"] for e in json.loads(s.read_log(dev, None).text)["events"]] == ["2"]
    state = json.loads(s.read_state(StateTarget("github", "workflow_run", "3")))
    assert state["object"]["conclusion"] == "failure"
    assert state["delivery_id"] == "d-3"


def test_positions_stay_valid_across_a_reopen(tmp_path: Path) -> None:
    s = store(tmp_path)
    target = LogTarget("github", "workflow_run", (("conclusion", "failure"),))
    s.ensure_view(target)
    s.insert_many([run_delivery(1), run_delivery(2)])
    first = json.loads(s.read_log(target, None).text)
    s.close()
    again = store(tmp_path)
    again.insert(*run_delivery(3))
    later = json.loads(again.read_log(target, (first["log_id"], 2)).text)
    sequencer = Sequencer()
    sequencer.feed(first)
    assert later["log_id"] == first["log_id"]
    assert [(e.type, e.seq) for e in sequencer.feed(later).events] == [("workflow_run.completed", 3)]


def test_retention_drops_old_deliveries_and_a_reader_behind_gets_a_gap_naming_it(tmp_path: Path) -> None:
    clock = [NOW]
    s = store(tmp_path, clock=clock, retention=Retention(max_age=3600, max_count=3))
    target = LogTarget("github", "workflow_run")
    s.insert(*run_delivery(1))
    sequencer = Sequencer()
    sequencer.feed(json.loads(s.read_log(target, None).text))
    s.insert_many([run_delivery(i) for i in range(2, 7)])
    assert s.trim() == 3  # at most 3 kept: 1, 2 and 3 go
    clock[0] += 7200
    s.insert(*run_delivery(7))
    assert s.trim() == 3  # older than an hour: 4, 5 and 6
    body = json.loads(s.read_log(target, (sequencer.log_id or "", 1)).text)
    events = sequencer.feed(body).events
    assert events[0].type == "GAP"
    assert events[0].fields["retention"] == "deliveries of the last 3600s, at most 3 per source"
    assert [e.seq for e in events[1:]] == [7]


def test_past_the_cap_the_least_recently_read_filtered_log_goes_and_its_reader_sees_a_new_log(
    tmp_path: Path,
) -> None:
    clock = [NOW]
    s = store(tmp_path, clock=clock, max_views=2)
    main, dev, ci = (LogTarget("github", "workflow_run", (("branch", b),)) for b in ("main", "dev", "ci"))
    s.insert(*run_delivery(1))
    first = {t: json.loads(s.read_log(t, None).text)["log_id"] for t in (main, dev)}
    clock[0] += 1
    s.read_log(main, None)  # main is read again: dev is now the least recently read
    clock[0] += 1
    s.read_log(ci, None)  # a third filtered log: one must go
    assert json.loads(s.read_log(main, None).text)["log_id"] == first[main]
    assert json.loads(s.read_log(dev, None).text)["log_id"] != first[dev]
