"""The event ring a kcp watch keeps (shared with the other event-log servers), the stream parser's
one-document-per-line fast path, and the watcher's one notification per read (sans-IO / in-process)."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncai_servers.kcp.jsonstream import JsonStreamParser
from asyncai_servers.kcp.kubectl import Endpoint, Kubectl
from asyncai_servers.kcp.uri import WatchTarget
from asyncai_servers.kcp.watcher import Watcher
from asyncai_watch.core.eventlog import Sequencer
from asyncai_watch.server.eventlog import AFTER_META_KEY, EventRing, dumps, read_after
from asyncai_watch.testing import FakeClock


def _event(i: int) -> dict[str, Any]:
    return {"type": "MODIFIED", "object": {"metadata": {"uid": f"u{i % 3}", "n": i}}, "old": {"n": i - 1}}


def _seen(result: Any) -> list[tuple[str, Any]]:
    return [
        (e.type, e.seq if e.type != "GAP" else (e.fields["from_seq"], e.fields["missed"]))
        for e in result.events
    ]


@given(
    capacity=st.integers(1, 12),
    window=st.none() | st.integers(1, 12),
    appended=st.integers(0, 40),
    position=st.integers(0, 45),
    same_log=st.booleans(),
)
def test_a_read_after_a_position_delivers_what_the_whole_ring_delivers(
    capacity: int, window: int | None, appended: int, position: int, same_log: bool
) -> None:
    """For a reader at ``position``, the positioned body gives its Sequencer exactly what the
    whole ring would: the same events, the same GAP; a read naming another log gets the window."""
    ring = EventRing(capacity, window=window)
    whole = EventRing(capacity)  # the same log, read whole
    whole.log_id = ring.log_id
    for i in range(appended):
        ring.append(_event(i))
        whole.append(_event(i))
    log_id = ring.log_id if same_log else "another-log"
    if same_log:
        position = min(position, appended)  # a reader never saw a seq its log has not reached
    positioned = json.loads(ring.text((log_id, position)))
    assert positioned["log_id"] == ring.log_id
    assert positioned["last_seq"] == appended
    if same_log:
        reader, reference = Sequencer(position), Sequencer(position)
        reader.log_id = reference.log_id = ring.log_id
        assert _seen(reader.feed(ring.text((log_id, position)))) == _seen(reference.feed(whole.text()))
        assert [e["seq"] for e in positioned["events"]] == list(
            range(max(position + 1, appended - min(appended, capacity) + 1), appended + 1)
        )
    else:
        held = min(appended, capacity)
        shown = held if window is None else min(held, window)
        assert [e["seq"] for e in positioned["events"]] == list(range(appended - shown + 1, appended + 1))
        assert ring.text() == ring.text((log_id, position))  # no position at all: the same window


def test_the_ring_keeps_at_most_max_chars_of_text_and_always_the_newest_event() -> None:
    ring = EventRing(100, max_chars=300)
    for i in range(20):
        ring.append({"type": "ADDED", "object": {"pad": "x" * 50, "i": i}})
    events = ring.body()["events"]
    assert sum(len(dumps(e)) for e in events) <= 300
    assert events[-1]["object"]["i"] == 19
    assert [e["seq"] for e in events] == list(range(21 - len(events), 21))  # contiguous, newest last
    big = EventRing(100, max_chars=10)
    big.append({"type": "ADDED", "object": {"pad": "y" * 100}})
    assert [e["seq"] for e in big.body()["events"]] == [1]  # larger than the bound, still kept


def test_event_text_is_compact_json_of_any_json_value() -> None:
    ring = EventRing()
    ring.append({"type": "ADDED", "object": {"name": "é😀\u2028", "big": 2**70, "f": 1.5, "n": None}})
    ring.append({"seq": 99, "type": "ERROR", "message": "a seq in the event is replaced"})
    ring.append({})
    text = ring.text()
    assert '"name":"é😀\u2028"' in text  # non-ASCII as is, as json.dumps(ensure_ascii=False)
    assert [e["seq"] for e in json.loads(text)["events"]] == [1, 2, 3]
    assert json.loads(text)["events"][0]["object"]["big"] == 2**70  # beyond orjson: json writes it
    assert json.loads(text)["events"][2] == {"seq": 3}


def test_read_after_reads_only_a_well_formed_position() -> None:
    assert read_after({AFTER_META_KEY: {"log_id": "ab", "seq": 7}}) == ("ab", 7)
    for meta in (
        None,
        {},
        {AFTER_META_KEY: "ab:7"},
        {AFTER_META_KEY: {"log_id": "ab"}},
        {AFTER_META_KEY: {"log_id": 1, "seq": 7}},
        {AFTER_META_KEY: {"log_id": "ab", "seq": True}},
        {AFTER_META_KEY: {"log_id": "ab", "seq": "7"}},
    ):
        assert read_after(meta) is None  # the read then returns the window: always correct


# --- the stream parser: compact lines (the API server's) mixed with documents over several lines ----------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
containers = st.dictionaries(st.text(max_size=6), json_values, max_size=3) | st.lists(json_values, max_size=3)


@given(
    st.lists(st.tuples(containers, st.sampled_from(["compact", "indented", "joined", "blank"])), min_size=1),
    st.lists(st.integers(min_value=1, max_value=9), min_size=1),
)
def test_stream_of_compact_lines_and_other_layouts_any_chunking(
    docs: list[tuple[Any, str]], sizes: list[int]
) -> None:
    text = ""
    for doc, layout in docs:
        if layout == "indented":
            text += json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
        elif layout == "joined":  # two documents on one line: no newline between them
            text += json.dumps(doc, ensure_ascii=False) + json.dumps(doc, separators=(",", ":")) + "\n"
        elif layout == "blank":
            text += "\n  \n" + json.dumps(doc, separators=(",", ":")) + "\r\n"
        else:
            text += json.dumps(doc, separators=(",", ":"), ensure_ascii=False) + "\n"
    want = [d for doc, layout in docs for d in ([doc, doc] if layout == "joined" else [doc])]
    data = text.encode()
    parser = JsonStreamParser()
    got: list[Any] = []
    pos, i = 0, 0
    while pos < len(data):
        step = sizes[i % len(sizes)]
        got += parser.feed(data[pos : pos + step])
        pos, i = pos + step, i + 1
    assert got == want
    assert not parser.pending
    assert JsonStreamParser().feed(data) == want  # one chunk: every compact line takes the fast path


def test_stream_lines_that_are_no_document_still_fail_clearly() -> None:
    from asyncai_servers.kcp.jsonstream import JsonStreamError

    with pytest.raises(JsonStreamError, match="expected a JSON object or array"):
        JsonStreamParser().feed(b'{"a":1}\n42\n')
    with pytest.raises(JsonStreamError, match="malformed JSON"):
        JsonStreamParser().feed(b'{"a":1}\n{"b": tru}\n')
    assert JsonStreamParser().feed(b'{"big":' + str(2**70).encode() + b"}\n") == [{"big": 2**70}]
    with pytest.raises(JsonStreamError, match="malformed JSON"):
        JsonStreamParser().feed(b"[" * 100_000 + b"]" * 100_000 + b"\n")


# --- the watcher notifies once until a read -----------------------------------------------------------------


@pytest.mark.anyio
async def test_appends_notify_once_until_a_read() -> None:
    """A burst of kubectl batches costs one notification per read the client makes, not one per batch
    (one per batch filled the SDK's 1024-notification listen buffer, which then ended the stream)."""
    published: list[str] = []

    async def publish(uri: str) -> None:
        published.append(uri)

    uri = "kcp-events://watch/root:app/configmaps"
    watcher = Watcher(
        uri,
        WatchTarget(workspace="root:app", resource="configmaps"),
        Kubectl("kubectl", {None: Endpoint(server="https://kcp.test")}),
        publish,
        clock=FakeClock(),
    )
    for i in range(5):
        await watcher._append([_event(i)])
    await watcher._error("kubectl watch exited with status 1")
    assert published == [uri]
    body = json.loads(watcher.read())  # a reader read: everything so far is in its body
    assert len(body["events"]) == 6
    with anyio.fail_after(5):
        await watcher._append([_event(6)])
    assert published == [uri, uri]
    await watcher._append([_event(7)])
    assert published == [uri, uri]
    after = json.loads(watcher.read((body["log_id"], body["last_seq"])))
    assert [e["seq"] for e in after["events"]] == [7, 8]  # a positioned read: only what is new
