"""Benchmark of the pure watch core, from JSON text as read: event-log pipeline and state diff.

    python bench/core.py            # full run (about a minute on 2 cores)
    python bench/core.py --quick    # a smaller run, for CI smoke

Every repetition starts from the body *text*, as ``resources/read`` hands it to the manager,
and builds fresh objects by parsing it: no pre-parsed dicts, no ``copy.deepcopy`` (whose copies
share strings), no ``gc.freeze``; the cyclic GC is on, as in the agent. The fixture (the texts)
is made once, before timing; once made, it is strings only, which the GC never scans.

1. pipeline: bodies of 100 Kubernetes-like MODIFIED events (each with ``object`` and ``old``;
   ``Limits.events_per_update`` is 100), through the manager's own code path: ``Body.parse``
   with the GC paused (what the runner does), the shared :class:`Extraction` (``read``:
   sequencer, changed paths; its ``position``), the watch's :class:`Delivery` (``lines``: default
   lines; ``add``: dedupe, debounce; ``due``) and the ``log.events`` call (``add`` builds the
   kept/deduped records only when the log takes them, as the watcher asks). Target: >= 100,000 events/s.
   Baselines, same run: the same pipeline parsed by ``json.loads``, and a naive pipeline
   (``json.loads``, changed paths by comparing ``json.dumps`` of every key at every level).
2. state: a 100,000-item list body with 1% of items changed, through the watch's own path:
   ``Body.of`` of both texts (a :class:`~asyncai_watch.core.state_index.StateIndex`: the items
   as raw JSON text, nothing built) and ``diff_reads`` (keys both lists, parses only the items
   whose text changed). Target: <= 100 ms. Also the split (read / diff) and one read's cost in
   a running watch (the new text + diff, the last read having been diffed already, so its keys
   are known). Baselines, same run: the whole-body path (msgspec parse of both + ``diff_state``,
   what the watch did before the index), and ``json.loads`` with a naive diff (key both lists,
   compare every item pair by ``json.dumps``).

Times are the best of several repeats (the machine is shared), wall (perf_counter); CPU time
(process_time) is printed beside the target figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import attrs

from asyncai_watch import log
from asyncai_watch.core.changes import IGNORED_METADATA
from asyncai_watch.core.deliver import Delivery
from asyncai_watch.core.diff import diff_state
from asyncai_watch.core.eventlog import Sequencer
from asyncai_watch.core.events import EVENTS_MIME_TYPE, MODIFIED, Event
from asyncai_watch.core.extract import Body, Extraction
from asyncai_watch.core.identity import item_key
from asyncai_watch.core.jsontext import parse_json
from asyncai_watch.core.limits import Limits
from asyncai_watch.core.lines import default_line
from asyncai_watch.core.state_index import diff_reads
from asyncai_watch.runtime.gcpause import gc_paused

PIPELINE_TARGET = 100_000.0  # events/s
STATE_TARGET_MS = 100.0
BATCH = 100  # new events per read, Limits.events_per_update
STATE_ITEMS = 100_000

Parse = Callable[[str], Any]


def index_state(text: str) -> Any:
    """What a watch keeps of a state read (``Body.of``): its index, or its value without one."""
    return Body.of(text, "application/json").state


class GcClock:
    """Wall time spent in the cyclic GC's collections while entered (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = [0, 0, 0]
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._start
            self.collections[info["generation"]] += 1

    def __enter__(self) -> GcClock:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)

    def __str__(self) -> str:
        gen0, gen1, gen2 = self.collections
        return f"{self.seconds * 1e3:,.0f} ms in {gen0 + gen1 + gen2} collections ({gen2} full)"


# --- data -------------------------------------------------------------------------------------------


def pod(i: int, rv: int, phase: str, ready: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"web-{i}",
            "namespace": "default",
            "uid": f"6f1c2a9e-0000-4000-8000-{i:012d}",
            "resourceVersion": str(rv),
            "generation": 1,
            "creationTimestamp": "2026-11-03T10:00:00Z",
            "labels": {"app": "web", "pod-template-hash": "5d8f7c9b4"},
        },
        "spec": {
            "nodeName": f"node-{i % 3}",
            "containers": [{"name": "web", "image": "nginx:1.27", "ports": [{"containerPort": 80}]}],
        },
        "status": {
            "phase": phase,
            "podIP": f"10.0.{i // 250}.{i % 250}",
            "conditions": [{"type": "Ready", "status": ready}, {"type": "PodScheduled", "status": "True"}],
        },
    }


PHASES = ["Pending", "Running", "Running", "Succeeded"]


def event_bodies(n: int, objects: int = 1000) -> list[str]:
    """``n`` MODIFIED events over ``objects`` pods (each changing phase, readiness or both), as
    the texts of positioned event-log reads of :data:`BATCH` events each (what a server answers
    a reader that sends its position), compact JSON as servers write it."""
    state = [pod(i, 1, "Pending", "False") for i in range(objects)]
    texts: list[str] = []
    batch: list[dict[str, Any]] = []
    for seq in range(1, n + 1):
        i = (seq * 7919) % objects
        old = state[i]
        step = seq // objects
        new = pod(i, seq + 1, PHASES[step % 4], "True" if step % 2 else "False")
        batch.append({"seq": seq, "type": MODIFIED, "object": new, "old": old})
        state[i] = new
        if len(batch) == BATCH:
            body = {"log_id": "bench", "last_seq": seq, "events": batch}
            texts.append(json.dumps(body, separators=(",", ":"), ensure_ascii=False))
            batch = []
    assert not batch
    return texts


def state_texts(n: int) -> tuple[str, str]:
    """A state resource's list of ``n`` items, and the same with 1% of the items changed."""
    items = [
        {"id": f"item-{i:06d}", "name": f"item {i}", "status": "open", "count": i, "tags": ["a", "b"]}
        for i in range(n)
    ]
    old = json.dumps(items, separators=(",", ":"))
    for i in range(0, n, 100):
        items[i]["count"] = -1
    return old, json.dumps(items, separators=(",", ":"))


# --- the pipeline -----------------------------------------------------------------------------------


def run_pipeline(texts: list[str], parse: Parse) -> tuple[int, int, float, float, GcClock]:
    """Every body text through the manager's path; (events, notices, wall s, CPU s, GC time).

    ``parse`` is the JSON parser of ``Body.parse`` (the library's, or the baseline's)."""
    x = Extraction("k8s://pods", Limits())
    d = Delivery("bench", "k8s://pods", Limits())
    # The baseline read: an empty log at seq 0 (not timed).
    x.baseline(Body.parse('{"log_id":"bench","last_seq":0,"events":[]}', EVENTS_MIME_TYPE))
    events_log, wanted, now, events, notices = log.events, log.events_enabled, 0.0, 0, 0
    with GcClock() as gc_time:
        start, cpu_start = time.perf_counter(), time.process_time()
        for text in texts:
            # runtime.topic.parse (the GC paused over a large read), then the shared extraction.
            with gc_paused(len(text)):
                body = Body(text, EVENTS_MIME_TYPE, parse(text))
                pending = x.read(body)
            _ = x.position  # what the runner asks for the next read's `after`
            # Watcher.take: the watch's own lines, dedupe and debounce.
            lines, records = d.lines(pending)
            kept = d.add(lines, now, records=wanted())
            if records or kept:
                events_log([*records, *kept], watch="bench", uri="k8s://pods")
            events += len(pending.events) + len(pending.noops)  # kept + no-ops: every event read
            now += 0.5  # the watch's clock: a read every 0.5 s, so the debounce flushes now and then
            if d.due(now) is not None:
                notices += 1
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    return events, notices, wall, cpu, gc_time


def naive_changed_paths(old: Any, new: Any, depth: int = 1, prefix: str = "") -> list[str]:
    """Every key at every level compared by its json.dumps text."""
    out: list[str] = []
    for k in sorted(set(old) | set(new)):
        if depth == 2 and prefix == "metadata" and k in IGNORED_METADATA:
            continue
        a, b = old.get(k), new.get(k)
        path = f"{prefix}.{k}" if prefix else k
        if depth < 3 and isinstance(a, dict) and isinstance(b, dict):
            out.extend(naive_changed_paths(a, b, depth + 1, path))
        elif json.dumps(a, sort_keys=True) != json.dumps(b, sort_keys=True):
            out.append(path)
    return out


def run_naive_pipeline(texts: list[str]) -> tuple[int, int, float, float, GcClock]:
    """What a client without this library would write: json.loads, compare by json.dumps."""
    seq = Sequencer()
    last: dict[str, str] = {}
    pending: list[str] = []
    events = notices = 0
    with GcClock() as gc_time:
        start, cpu_start = time.perf_counter(), time.process_time()
        for n, text in enumerate(texts):
            for ev in seq.feed(json.loads(text), limit=BATCH).events:
                events += 1
                if ev.type == MODIFIED and ev.old is not None:
                    changed = naive_changed_paths(ev.old, ev.new)
                    if not changed:
                        continue
                    ev = attrs.evolve(ev, changed=tuple(changed))
                line = default_line(ev)
                if ev.key is None or last.get(ev.key) != line:
                    if ev.key is not None:
                        last[ev.key] = line
                    pending.append(line)
            if n % 6 == 5:  # a notice every 3 s, as the debounce above
                notices += 1
                pending = []
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    return events, notices, wall, cpu, gc_time


# --- the state diff ---------------------------------------------------------------------------------


def naive_diff(old: list[Any], new: list[Any]) -> list[Event]:
    def keyed(items: list[Any]) -> dict[str, Any]:
        return {item_key(x) or json.dumps(x, sort_keys=True): x for x in items}

    a, b = keyed(old), keyed(new)
    out = [
        Event(type=MODIFIED, key=k, item=v, old=a[k])
        for k, v in b.items()
        if k in a and json.dumps(a[k], sort_keys=True) != json.dumps(v, sort_keys=True)
    ]
    out += [Event(type="ADDED", key=k, item=v) for k, v in b.items() if k not in a]
    out += [Event(type="DELETED", key=k, item=v) for k, v in a.items() if k not in b]
    return out


@dataclasses.dataclass
class StateRun:
    """One repetition of the state figure, in ms; ``gc_*`` is the cyclic GC's part of each."""

    parse_old: float
    parse_new: float
    diff: float
    cpu: float
    events: int
    gc_parse: float
    gc_diff: float

    @property
    def total(self) -> float:
        return self.parse_old + self.parse_new + self.diff


def time_state(
    old_text: str, new_text: str, parse: Parse, diff: Callable[[Any, Any], list[Event]]
) -> StateRun:
    """Parse both texts (fresh objects), diff them."""
    with GcClock() as gc_time:
        start, cpu_start = time.perf_counter(), time.process_time()
        old = parse(old_text)
        parsed_old = time.perf_counter()
        new = parse(new_text)
        parsed_new = time.perf_counter()
        gc_parse = gc_time.seconds
        events = diff(old, new)
        end = time.perf_counter()
        cpu = time.process_time() - cpu_start
    return StateRun(
        (parsed_old - start) * 1e3,
        (parsed_new - parsed_old) * 1e3,
        (end - parsed_new) * 1e3,
        cpu * 1e3,
        len(events),
        gc_parse * 1e3,
        (gc_time.seconds - gc_parse) * 1e3,
    )


def time_read(old_text: str, new_text: str, parse: Parse, diff: Callable[[Any, Any], list[Event]]) -> float:
    """One update of a running watch, ms: its last read (``new_text``) was diffed against the one
    before already and met by the GC; the next read (``old_text`` again: the same 1% of items
    changed back) is parsed and diffed."""
    last = parse(new_text)
    diff(parse(old_text), last)  # not timed: the update that brought the last read
    gc.collect()  # not timed: the baseline has been in the heap a while when the next read comes
    start = time.perf_counter()
    events = diff(last, parse(old_text))
    elapsed = (time.perf_counter() - start) * 1e3
    assert len(events) == STATE_ITEMS // 100
    return elapsed


# --- output -----------------------------------------------------------------------------------------


def row(
    name: str, ours: float, base: float | None, unit: str, target: str = "", *, higher: bool = False
) -> None:
    """One figure, its baseline (same run) and how many times better ours is."""
    if base is None:
        print(f"  {name:<50} {ours:>12,.1f} {unit:<9}   {target}", flush=True)
        return
    ratio = ours / base if higher else base / ours
    print(
        f"  {name:<50} {ours:>12,.1f} {unit:<9} baseline {base:>12,.1f} {unit:<9} {ratio:>6.1f}x   {target}",
        flush=True,
    )


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a smaller, faster run")
    parser.add_argument(
        "--ours-only",
        action="store_true",
        help="our two paths alone, no baselines (for bench/floors.py's profile; prints no ratios)",
    )
    args = parser.parse_args(argv)
    n_events = 20_000 if args.quick else 100_000
    repeats = 3 if args.quick else 5
    base_repeats = 1 if args.quick else 2
    sample = n_events // 5  # the baselines run on the first fifth: rates compare like for like

    print(
        f"asyncai-watch core bench ({'quick' if args.quick else 'full'}): python {sys.version.split()[0]}, "
        f"GC on {gc.isenabled()}, load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores",
        flush=True,
    )
    texts = event_bodies(n_events)
    old_text, new_text = state_texts(STATE_ITEMS)
    gc.collect()  # the fixture's building garbage, before timing (the texts are not GC-tracked)

    # 1. the pipeline
    mb = sum(map(len, texts)) / 1e6
    print(
        f"pipeline: {n_events:,} MODIFIED events in {len(texts)} bodies of {BATCH} "
        f"({mb:.1f} MB of JSON text), from text through Watch:",
        flush=True,
    )
    runs = [run_pipeline(texts, parse_json) for _ in range(repeats)]
    assert all(r[0] == n_events and r[1] > 0 for r in runs), runs
    if args.ours_only:
        row("events/s (best wall)", n_events / min(r[2] for r in runs), None, "events/s")
        for _ in range(repeats):
            run = time_state(old_text, new_text, index_state, diff_reads)
            time_read(old_text, new_text, index_state, diff_reads)
        row("state: read both + diff (last run)", run.total, None, "ms")
        return 0
    stdlib = [run_pipeline(texts[: sample // BATCH], json.loads) for _ in range(base_repeats)]
    naive = [run_naive_pipeline(texts[: sample // BATCH]) for _ in range(base_repeats)]
    assert all(r[0] == sample for r in [*stdlib, *naive])
    fastest, naive_best = min(runs, key=lambda r: r[2]), min(naive, key=lambda r: r[2])
    eps = n_events / fastest[2]
    ok_pipeline = eps >= PIPELINE_TARGET
    row(
        "events/s (best wall)",
        eps,
        sample / naive_best[2],
        "events/s",
        f"target >= {PIPELINE_TARGET:,.0f}: {verdict(ok_pipeline)}",
        higher=True,
    )
    row(
        "  by CPU time",
        n_events / min(r[3] for r in runs),
        sample / min(r[3] for r in naive),
        "events/s",
        higher=True,
    )
    row("  median of the repeats (wall)", n_events / statistics.median(r[2] for r in runs), None, "events/s")
    row(
        "  same pipeline, parsed by json.loads",
        eps,
        sample / min(r[2] for r in stdlib),
        "events/s",
        "(baseline: the stdlib parser)",
        higher=True,
    )
    print(f"  {'':<50} naive baseline: json.loads + changed paths by json.dumps, {sample:,} events")
    print(f"  {'':<50} cyclic GC in the best run: {fastest[4]}; naive baseline: {naive_best[4]}")

    # 2. the state diff
    print(
        f"state: {STATE_ITEMS:,} items ({len(old_text) / 1e6:.1f} MB of JSON text each read), "
        "1% changed: Body.of both + diff_reads, as a watch does:",
        flush=True,
    )
    # Each repetition times both figures, so load that comes and goes falls on both alike.
    ours, ours_update = zip(
        *(
            (
                time_state(old_text, new_text, index_state, diff_reads),
                time_read(old_text, new_text, index_state, diff_reads),
            )
            for _ in range(repeats)
        ),
        strict=True,
    )
    whole, whole_update = zip(
        *(
            (
                time_state(old_text, new_text, parse_json, diff_state),
                time_read(old_text, new_text, parse_json, diff_state),
            )
            for _ in range(base_repeats)
        ),
        strict=True,
    )
    base, base_update = zip(
        *(
            (
                time_state(old_text, new_text, json.loads, naive_diff),
                time_read(old_text, new_text, json.loads, naive_diff),
            )
            for _ in range(base_repeats)
        ),
        strict=True,
    )
    assert all(r.events == STATE_ITEMS // 100 for r in [*ours, *whole, *base])
    best, base_best = min(ours, key=lambda r: r.total), min(base, key=lambda r: r.total)
    whole_best = min(whole, key=lambda r: r.total)
    ok_state = best.total <= STATE_TARGET_MS
    row(
        "read both + diff (best wall)",
        best.total,
        base_best.total,
        "ms",
        f"target <= {STATE_TARGET_MS:.0f} ms: {verdict(ok_state)}",
    )
    row("  by CPU time", min(r.cpu for r in ours), min(r.cpu for r in base), "ms")
    row("  median of the repeats (wall)", statistics.median(r.total for r in ours), None, "ms")
    row(
        "  vs the whole-body path",
        best.total,
        whole_best.total,
        "ms",
        "(baseline: msgspec parse of both texts + diff_state)",
    )
    row(
        "  read both (Body.of vs json.loads)",
        best.parse_old + best.parse_new,
        base_best.parse_old + base_best.parse_new,
        "ms",
        f"(best run; cyclic GC {best.gc_parse:,.0f} vs {base_best.gc_parse:,.0f} ms of it)",
    )
    row(
        "  diff (diff_reads vs json.dumps per item)",
        best.diff,
        base_best.diff,
        "ms",
        f"(best run; cyclic GC {best.gc_diff:,.0f} vs {base_best.gc_diff:,.0f} ms of it)",
    )
    row(
        "  one update: the new text + diff",
        min(ours_update),
        min(base_update),
        "ms",
        "(a running watch's cost per read; baseline: json.loads + naive diff)",
    )
    row(
        "  one update, whole-body path",
        min(ours_update),
        min(whole_update),
        "ms",
        "(baseline: msgspec parse of the new text + diff_state)",
    )
    missed = [name for name, ok in (("pipeline", ok_pipeline), ("state", ok_state)) if not ok]
    print("all targets met" if not missed else f"missed targets: {', '.join(missed)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
