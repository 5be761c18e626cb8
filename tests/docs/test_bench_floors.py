"""bench/floors.py splits a py-spy profile by process and by layer as its report says."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.support.script_module import load_script

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(scope="module")
def floors() -> ModuleType:
    return load_script("bench/floors.py", "bench_floors")


# py-spy --subprocesses: the process py-spy started has no command line; a child's frames come
# after its parent's process frame.
RAW = """\
process 10:"";<module> (latency.py:280);run (anyio/_core/_eventloop.py:83);parse_json (asyncai_watch/core/jsontext.py:40) 6
process 10:"";<module> (latency.py:280);run (anyio/_core/_eventloop.py:83);validate_json (pydantic/type_adapter.py:466) 3
process 10:"";<module> (latency.py:47);_find_and_load (<frozen importlib._bootstrap>:1176);x (mcp/types.py:1) 50
process 10:"";process 11:"/usr/bin/python -m asyncai_servers.memo --also-http 127.0.0.1:0";main (asyncai_servers/memo/__main__.py:9);handle (mcp/server/runner.py:230) 4
process 10:"";process 11:"/usr/bin/python -m asyncai_servers.memo --also-http 127.0.0.1:0";main (asyncai_servers/memo/__main__.py:9);write (uvicorn/protocols/http/h11_impl.py:486) 4
process 10:"";process 12:"/usr/bin/python /work/bench/_writer.py http://x";main (_writer.py:30);__init__ (<attrs generated methods asyncai_watch.mcp.source.ToolResult>:38) 1
process 10:"";process 12:"/usr/bin/python /work/bench/_writer.py http://x";main (_writer.py:30);send (httpcore2/_async/http11.py:139) 1
process 10:"";process 12:"/usr/bin/python /work/bench/_writer.py http://x";event_bodies (core.py:140);dumps (json/__init__.py:238) 7
"""


def test_samples_are_split_by_process_and_innermost_layer(floors: ModuleType) -> None:
    procs = floors.parse(RAW, "latency bench process", ("event_bodies (core.py",))
    assert set(procs) == {"latency bench process [10]", "memo server [11]", "writer [12]"}
    bench = procs["latency bench process [10]"]
    assert bench.samples == 9  # the 50 samples under an import are start-up, left out
    assert bench.layers == {"library": 6, "pydantic": 3}
    memo = procs["memo server [11]"]
    assert memo.layers == {"MCP SDK": 4, "HTTP": 4}
    writer = procs["writer [12]"]
    assert writer.samples == 2  # the 7 under the set-up frame are left out
    assert writer.layers == {"library": 1, "HTTP": 1}  # attrs' generated methods of our classes are ours


def test_bench_frames_and_unknown_files(floors: ModuleType) -> None:
    assert floors.layer_of("main (_writer.py:30)") == "bench"
    assert floors.layer_of("select (selectors.py:468)") == "loop+tasks"
    assert floors.layer_of("wait (threading.py:320)") == "other"
    assert floors.layer_of("not a frame") == "other"


def test_report_prints_each_process_with_its_shares(
    floors: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    floors.report("latency", floors.parse(RAW, "latency bench process"), rate=10)
    out = capsys.readouterr().out
    memo = next(line for line in out.splitlines() if line.lstrip().startswith("memo server [11]"))
    assert "0.80" in memo  # 8 samples at 10/s
    assert memo.count("50.0%") == 2  # half MCP SDK, half HTTP
