"""The filter engine, end to end through real worker processes."""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

import anyio
import pytest

from asyncai_watch.core.limits import Limits
from asyncai_watch.errors import FilterEngineError, FilterError
from asyncai_watch.filters import (
    EmptyCatalog,
    FilterOutcome,
    RestrictedFilterSession,
    RestrictedPythonEngine,
    dry_run,
    sample_event,
    validate_on_event,
)
from tests.support.filters import Catalog

pytestmark = pytest.mark.anyio

FAST = Limits(filter_timeout=0.3)

COUNTER = """\
try:
    count += 1
except NameError:
    count = 1
count
"""


@pytest.fixture
def engine() -> RestrictedPythonEngine:
    return RestrictedPythonEngine(limits=FAST, memory_limit=160 * 2**20)


async def open_(engine: RestrictedPythonEngine, source: str, catalog: Any = None) -> RestrictedFilterSession:
    return await engine.open(source, catalog=catalog or EmptyCatalog())


async def test_drop_transform_and_print(engine: RestrictedPythonEngine) -> None:
    source = """\
t = event["type"]
if t == "PRINT":
    print("seen", event["n"])
None if t in ("DROP", "PRINT", "EMPTY") else (t.lower() if t == "STR" else {"t": t, "n": [1, 2], "s": "é"})
"""
    async with await open_(engine, source) as session:
        outcomes = await session.run(
            [{"type": "DROP"}, {"type": "STR"}, {"type": "X"}, {"type": "PRINT", "n": 7}]
        )
    assert outcomes == [
        FilterOutcome(),  # None and nothing printed: dropped
        FilterOutcome(line="str"),
        FilterOutcome(line='{"t":"X","n":[1,2],"s":"é"}'),  # compact JSON
        FilterOutcome(line="seen 7"),  # printed output counts
    ]
    assert outcomes[0].dropped
    assert not outcomes[1].dropped


async def test_printed_text_and_value_both_count(engine: RestrictedPythonEngine) -> None:
    async with await open_(engine, "print('a')\nprint('b')\n'c' if event['v'] else ''") as session:
        assert [o.line for o in await session.run([{"v": 1}, {"v": 0}])] == ["a\nb\nc", "a\nb"]
    async with await open_(engine, "''") as session:
        assert (await session.run([{}]))[0].dropped  # an empty string says nothing either


async def test_variables_persist_across_events_and_batches(engine: RestrictedPythonEngine) -> None:
    async with await open_(engine, COUNTER) as session:
        first = await session.run([{}, {}])
        second = await session.run([{}] * 3)
    assert [o.line for o in first + second] == ["1", "2", "3", "4", "5"]


async def test_large_updates_are_split_into_batches_in_order(engine: RestrictedPythonEngine) -> None:
    limits = Limits(filter_timeout=1.0, events_per_update=100)
    async with await engine.open("str(event['i'])", catalog=EmptyCatalog(), limits=limits) as session:
        outcomes = await session.run([{"i": i} for i in range(250)])
    assert [o.line for o in outcomes] == [str(i) for i in range(250)]


def test_validate_on_event_rejects_what_cannot_run() -> None:
    def fmt(event: Any) -> str:
        return str(event)

    with pytest.raises(FilterError, match=r"must be Python source text \(a str\), got function 'fmt'"):
        validate_on_event(fmt)
    with pytest.raises(FilterError, match="got int"):
        validate_on_event(42)
    with pytest.raises(FilterError, match="repr of a function"):
        validate_on_event("<function fmt at 0x7f3a2c1b5e40>")
    with pytest.raises(FilterError, match="empty"):
        validate_on_event("  \n")
    with pytest.raises(FilterError, match="does not compile: SyntaxError"):
        validate_on_event("x = (")
    with pytest.raises(FilterError, match="__class__"):
        validate_on_event("event.__class__")
    source = "f\"{event['type']} {event.get('key')}\""
    assert validate_on_event(source) == source


async def test_dry_run_fails_for_name_errors_and_accepts_missing_keys(engine: RestrictedPythonEngine) -> None:
    sample = sample_event(watch="cm", uri="kcp-events://watch/root/configmaps", event_log=True)
    with pytest.raises(FilterError, match="NameError: name 'undefined_thing' is not defined"):
        await dry_run(engine, "undefined_thing + 1", sample=sample)
    with pytest.raises(FilterError, match="import of 'os'"):
        await dry_run(engine, "import os\nos.name", sample=sample)
    with pytest.raises(FilterError, match="timeout"):
        await dry_run(engine, "while True:\n    pass", sample=sample)
    # The ADR's example filter reads keys the sample lacks: KeyError is fine.
    adr = (
        'm = event["object"]["metadata"]\n'
        'f\'{event["type"].lower()} {m["namespace"]}/{m["name"]}\' if event["type"] in ("ADDED", "DELETED") else None'
    )
    outcome = await dry_run(engine, adr, sample=sample)
    assert outcome.error_type == "KeyError"


async def test_dry_run_leaves_the_scope_untouched(engine: RestrictedPythonEngine) -> None:
    async with await open_(engine, COUNTER) as session:
        assert (await session.dry_run({})).line == "1"
        assert (await session.run([{}]))[0].line == "1"


async def test_compile_time_refusals_fail_open(engine: RestrictedPythonEngine) -> None:
    with pytest.raises(
        FilterError, match=r'on_event does not compile: .*"__class__" is an invalid attribute name'
    ):
        await open_(engine, "().__class__")


async def test_import_open_and_dunders_fail_in_the_outcome(engine: RestrictedPythonEngine) -> None:
    source = """\
k = event["k"]
if k == "import":
    import subprocess
elif k == "open":
    open("/etc/passwd").read()
elif k == "dunder":
    getattr(event, "__class__")
elif k == "format":
    "{0.__class__}".format(event)
elif k == "mro":
    class A:
        pass
    A.mro()[-1]
"fine"
"""
    async with await open_(engine, source) as session:
        outcomes = await session.run(
            [{"k": k} for k in ("import", "open", "dunder", "format", "mro", "other")]
        )
    assert [o.error_type for o in outcomes] == ["PolicyError"] * 5 + [None]
    assert "import of 'subprocess' is not allowed" in str(outcomes[0].error)
    assert "open() is not available" in str(outcomes[1].error)
    assert "'__class__' is not accessible" in str(outcomes[2].error)
    assert "str.format is blocked" in str(outcomes[3].error)
    assert "attribute 'mro' is not accessible on any object" in str(outcomes[4].error)
    assert outcomes[5].line == "fine"


async def test_endless_loop_is_stopped_and_the_next_event_works(engine: RestrictedPythonEngine) -> None:
    source = COUNTER + "\nif event.get('spin'):\n    while True:\n        pass\ncount"
    async with await open_(engine, source) as session:
        outcomes = await session.run([{}, {"spin": True}, {}])
        assert session.restarts == 0
    assert outcomes[1].error_type == "timeout"
    assert "ran for more than 0.3 s on this event" in str(outcomes[1].error)
    assert [outcomes[0].line, outcomes[2].line] == ["1", "3"]  # the scope survived


async def test_a_catalog_call_that_never_answers_times_the_event_out_and_the_watch_goes_on(
    engine: RestrictedPythonEngine,
) -> None:
    # filter_timeout is wall-clock per event, tool-call time included: a filter waiting on a
    # call (no CPU used) is stopped at the event's deadline, not at a 30 s watchdog.
    cancelled: list[str] = []

    async def hang(**_kwargs: Any) -> Any:
        try:
            await anyio.Event().wait()  # never set: the call never answers
        finally:
            cancelled.append("hang")

    source = COUNTER + (
        "\nif event.get('hang'):\n"
        "    try:\n"
        "        hang()\n"
        "    except Exception as e:\n"  # a CatalogError could be caught; the timeout cannot
        "        print('swallowed', e)\n"
        "count"
    )
    async with await open_(engine, source, Catalog({"hang"}, {"hang": hang})) as session:
        pid = session.pid
        with anyio.fail_after(20):  # generous; far below the old 30 s catalog timeout
            outcomes = await session.run([{}, {"hang": True}, {}])
            later = await session.run([{}])
        assert (session.restarts, session.pid) == (0, pid)  # the same worker, the scope kept
    assert outcomes[0].line == "1"
    assert outcomes[1].error_type == "timeout"
    assert "ran for more than 0.3 s on this event" in str(outcomes[1].error)
    assert "catalog calls included); hang() had not answered and was abandoned" in str(outcomes[1].error)
    assert [outcomes[2].line, later[0].line] == ["3", "4"]  # the next events are served
    assert cancelled == ["hang"]  # the parent gave up on the call itself


async def test_a_swallowed_timeout_is_still_the_events_outcome(engine: RestrictedPythonEngine) -> None:
    source = """\
if event.get("spin"):
    try:
        while True:
            pass
    except BaseException:
        pass
"done"
"""
    async with await open_(engine, source) as session:
        with anyio.fail_after(30):
            outcomes = await session.run([{"spin": True}, {}])
        assert session.restarts == 0
    assert outcomes[0].error_type == "timeout"
    assert outcomes[1].line == "done"


async def test_a_long_c_call_is_killed_by_the_cpu_limit() -> None:
    # sum() over a range never returns to the bytecode loop, so no tick can stop it: the CPU
    # limit (the second guard) does. A long grace keeps the parent's wall-clock kill out of it.
    engine = RestrictedPythonEngine(limits=FAST, memory_limit=160 * 2**20, watchdog=60.0)
    source = COUNTER + "\nsum(range(10**14)) if event.get('c') else count"
    async with await open_(engine, source) as session:
        outcomes = await session.run([{}, {"c": 1}, {}])
        assert session.restarts == 1
    assert outcomes[0].line == "1"
    assert outcomes[1].error_type == "worker"
    assert "CPU limit (SIGXCPU)" in str(outcomes[1].error)
    assert "variables set by earlier events are gone" in str(outcomes[1].error)
    assert outcomes[2].line == "1"  # a new worker, a new scope


async def test_memory_bombs_are_stopped() -> None:
    # The growing loop must reach the memory limit before the filter timeout, also on a loaded
    # CI machine: a generous timeout and 10 MB steps (about 16 allocations to 160 MiB).
    engine = RestrictedPythonEngine(limits=Limits(filter_timeout=10.0), memory_limit=160 * 2**20)
    source = """\
if event["k"] == "big":
    x = "a" * (10**10)
elif event["k"] == "grow":
    hog = []
    while True:
        hog.append("y" * 10**7)
"ok"
"""
    async with await open_(engine, source) as session:
        outcomes = await session.run([{"k": "big"}, {"k": "grow"}, {"k": "none"}])
    assert [o.error_type for o in outcomes[:2]] == ["MemoryError", "MemoryError"]
    assert "memory limit (160 MiB)" in str(outcomes[0].error)
    assert outcomes[2].line == "ok"


async def test_catalog_round_trip(engine: RestrictedPythonEngine) -> None:
    async def read_resource(uri: str) -> Any:
        return {"uri": uri, "items": [1, 2, 3]}

    catalog = Catalog({"read_resource", "memo_get"}, {"read_resource": read_resource})
    source = 'r = read_resource(uri="memo://notes")\nf\'{r["uri"]} {sum(r["items"])} {memo_get(key="a")["kwargs"]}\''
    async with await open_(engine, source, catalog) as session:
        outcomes = await session.run([{}])
    assert outcomes[0].line == "memo://notes 6 {'key': 'a'}"
    assert catalog.calls == [("read_resource", {"uri": "memo://notes"}), ("memo_get", {"key": "a"})]


async def test_names_outside_the_catalog_and_refused_calls_are_clear_errors(
    engine: RestrictedPythonEngine,
) -> None:
    async def refuse(**_kwargs: Any) -> Any:
        raise PermissionError("tool 'memo_set' is not read-only (no readOnlyHint: true)")

    catalog = Catalog({"read_resource", "memo_set"}, {"memo_set": refuse})
    source = """\
k = event["k"]
if k == "watch":
    watch_start(name="x", uri="memo://notes")
elif k == "refused":
    memo_set(key="a", value=1)
elif k == "caught":
    try:
        memo_set(key="a", value=1)
    except CatalogError as e:
        print("caught:", e)
elif k == "positional":
    read_resource("memo://notes")
"""
    async with await open_(engine, source, catalog) as session:
        outcomes = await session.run([{"k": k} for k in ("watch", "refused", "caught", "positional")])
    assert outcomes[0].error_type == "NameError"
    assert "name 'watch_start' is not defined" in str(outcomes[0].error)
    assert "the provided functions are: memo_set, read_resource" in str(outcomes[0].error)
    assert outcomes[1].error_type == "CatalogError"
    assert "memo_set(): PermissionError: tool 'memo_set' is not read-only" in str(outcomes[1].error)
    assert outcomes[2].line is not None
    assert outcomes[2].line.startswith("caught: memo_set(): PermissionError")
    assert outcomes[3].error_type == "TypeError"
    assert "keyword arguments only" in str(outcomes[3].error)


async def test_tool_call_limit_per_event(engine: RestrictedPythonEngine) -> None:
    catalog = Catalog({"read_resource"})
    limits = Limits(filter_timeout=1.0, filter_tool_calls=3)
    source = "[read_resource(uri=str(i)) for i in range(event['n'])]\n'done'"
    async with await engine.open(source, catalog=catalog, limits=limits) as session:
        outcomes = await session.run([{"n": 5}, {"n": 3}])
    assert outcomes[0].error_type == "CatalogError"
    assert "tool-call limit: on_event may make at most 3 catalog calls per event" in str(outcomes[0].error)
    assert outcomes[1].line == "done"  # the count starts again for each event
    assert len(catalog.calls) == 3 + 3


async def test_worker_death_becomes_an_outcome_and_the_worker_restarts(
    engine: RestrictedPythonEngine,
) -> None:
    session: RestrictedFilterSession

    async def crash() -> None:
        assert session.pid is not None
        os.kill(session.pid, signal.SIGKILL)

    source = COUNTER + "\nif event.get('crash'):\n    crash()\ncount"
    async with await open_(engine, source, Catalog({"crash"}, {"crash": crash})) as session:
        first_pid = session.pid
        outcomes = await session.run([{}, {}, {"crash": True}, {}])
        assert session.restarts == 1
        assert session.pid not in (None, first_pid)
        later = await session.run([{}])
    assert [o.line for o in outcomes[:2]] == ["1", "2"]
    assert outcomes[2].error_type == "worker"
    assert "was killed by SIGKILL" in str(outcomes[2].error)
    assert [outcomes[3].line, later[0].line] == ["1", "2"]


async def test_a_worker_that_stops_answering_is_killed_after_the_grace() -> None:
    engine = RestrictedPythonEngine(limits=FAST, watchdog=1.0)
    session: RestrictedFilterSession

    async def freeze() -> None:
        assert session.pid is not None
        os.kill(session.pid, signal.SIGSTOP)  # alive but silent: no EOF, no CPU

    source = "if event.get('freeze'):\n    freeze()\n'ok'"
    async with await open_(engine, source, Catalog({"freeze"}, {"freeze": freeze})) as session:
        outcomes = await session.run([{"freeze": True}, {}])
    assert outcomes[0].error_type == "worker"
    assert (
        "had not finished the event 1.3 s after it started (Limits.filter_timeout 0.3 s + 1 s grace)"
        in str(outcomes[0].error)
    )
    assert outcomes[1].line == "ok"


async def test_the_worker_is_locked_down(engine: RestrictedPythonEngine) -> None:
    async with await open_(engine, "None") as session:
        probe = await session.probe()
    assert probe["environ"] == {}
    assert probe["inherited_fds"] == [0, 1, 2]
    limits = probe["rlimits"]
    assert limits["RLIMIT_AS"] == [160 * 2**20, 160 * 2**20]
    assert limits["RLIMIT_NOFILE"] == [3, 3]
    assert limits["RLIMIT_CORE"] == [0, 0]
    assert limits["RLIMIT_FSIZE"] == [0, 0]
    assert limits["RLIMIT_NPROC"] == [0, 0]
    assert limits["RLIMIT_CPU"][1] == 3600
    if os.geteuid() == 0:
        assert (probe["uid"], probe["gid"]) == (65534, 65534)
    assert "-I" in engine.command()


async def test_a_slow_filter_delays_neither_other_sessions_nor_the_loop(
    engine: RestrictedPythonEngine,
) -> None:
    slow_done = anyio.Event()
    slow_result: list[FilterOutcome] = []

    spin = await engine.open(
        "while True:\n    pass", catalog=EmptyCatalog(), limits=Limits(filter_timeout=1.0)
    )
    async with spin as slow, await open_(engine, "'quick'") as quick:

        async def run_slow() -> None:
            slow_result.extend(await slow.run([{}]))
            slow_done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_slow)
            for _ in range(3):
                assert [o.line for o in await quick.run([{}])] == ["quick"]
            assert not slow_done.is_set()  # the quick session finished while the slow one spins
    assert slow_result[0].error_type == "timeout"


async def test_cancelling_a_run_leaves_the_session_usable(engine: RestrictedPythonEngine) -> None:
    entered = anyio.Event()

    async def block() -> None:
        entered.set()
        await anyio.sleep_forever()

    async with await open_(
        engine, COUNTER + "\nif event.get('block'):\n    block()\ncount", Catalog({"block"}, {"block": block})
    ) as session:
        async with anyio.create_task_group() as tg:
            tg.start_soon(session.run, [{}, {"block": True}])
            await entered.wait()
            tg.cancel_scope.cancel()
        assert (await session.run([{}]))[0].line == "1"  # a fresh worker


async def test_closed_sessions_end_their_worker(engine: RestrictedPythonEngine) -> None:
    session = await open_(engine, "'x'")
    pid = session.pid
    assert pid is not None
    await session.aclose()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(FilterError, match="closed"):
        await session.run([{}])


async def test_engine_open_session_context_manager(engine: RestrictedPythonEngine) -> None:
    async with engine.open_session("event['a'] * 2", EmptyCatalog()) as session:
        assert (await session.run([{"a": 21}]))[0].line == "42"


@pytest.mark.parametrize("fork_server", [True, False], ids=["fork-server", "process-per-session"])
async def test_a_worker_that_cannot_start_is_a_clear_error(tmp_path: Any, fork_server: bool) -> None:
    engine = RestrictedPythonEngine(python=str(tmp_path / "no-such-python"), fork_server=fork_server)
    with pytest.raises(FilterEngineError, match="cannot start the filter worker"):
        await engine.open("1", catalog=EmptyCatalog())


def test_over_long_source_is_refused() -> None:
    with pytest.raises(FilterError, match="at most 65536 are accepted"):
        validate_on_event("x = 1\n" * 20_000)


async def test_a_misbehaving_worker_cannot_break_the_parent(tmp_path: Any) -> None:
    # Stands in for a worker taken over by a sandbox escape: it answers init, then sends
    # outcomes of the wrong shape and garbage. The parent must report, not crash.
    fake = tmp_path / "fake-python"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        "for line in sys.stdin:\n"
        "    if line.startswith('[\"init\"'):\n"
        "        print('[\"ok\"]', flush=True)\n"
        "    elif line.startswith('[\"run\"'):\n"
        "        print('[\"s\"]', flush=True)\n"
        '        print(\'["o", {"evil": 1}, null, null]\', flush=True)\n'
        "        print('not json', flush=True)\n"
    )
    fake.chmod(0o755)
    # One interpreter per session, so the fake speaks the worker protocol on its stdin/stdout.
    engine = RestrictedPythonEngine(python=str(fake), fork_server=False)
    async with await engine.open("1", catalog=EmptyCatalog()) as session:
        outcomes = await session.run([{}, {}, {}, {}])
    assert [o.error_type for o in outcomes] == ["worker"] * 4
    assert "sent a malformed outcome" in str(outcomes[0].error)
    assert "died 3 times in this batch" in str(outcomes[3].error)
