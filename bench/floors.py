"""Where a bench's CPU goes: every process of it sampled by py-spy, the samples split by layer.

    python bench/floors.py                      # every profiled bench, each in its --quick form
    python bench/floors.py latency switchboard  # some of them
    nox -s floors                               # the same, py-spy installed

The targets a bench misses come with a claim about the floor behind them ("the SDK's request
handling", "the parse"). This script is the profile behind each claim, rerunnable: it runs the
bench (``--quick``) under ``py-spy record --subprocesses``, so the writer, the servers, the
listeners and the bench process itself are all sampled, and prints for each process the CPU
sampled and its share by layer (the file of the innermost Python frame of each sample):

- ours: ``asyncai_watch`` (the library), ``asyncai_servers`` (the reference servers), and the
  bench's own harness (its baselines and bookkeeping);
- the MCP SDK (``mcp``, ``mcp_types``), pydantic (the SDK's models), the HTTP stack (uvicorn,
  starlette, h11, sse-starlette; httpx2 and httpcore2 on the client side), the event loop and
  tasks (asyncio, anyio), JSON (msgspec, json), PostgreSQL/SQLite drivers, OpenTelemetry (the
  SDK's default span middleware), and the rest (the standard library, attrs, ...).

C code is charged to the Python frame that called it (py-spy without ``--native``): msgspec's
decoder shows as its caller, ``parse_json``, so "ours" is an upper bound. Samples taken while a
process imports its modules are left out (start-up is not the steady state the figures time);
idle time (a thread waiting in epoll or on a lock) is not sampled. py-spy runs on the same cores,
so the bench's own figures printed here are slower than ``nox -s bench``'s: read the shares, not
the times.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RATE = 250  # samples/s: enough for shares to 1%, light enough not to starve the bench
BENCHES: dict[str, list[str]] = {
    "latency": ["bench/latency.py", "--quick"],
    "http": ["bench/http_keepalive.py", "--quick"],
    "switchboard": ["bench/switchboard.py", "--quick"],
    "fanout": ["bench/fanout.py", "--quick"],
    "core": ["bench/core.py", "--quick", "--ours-only"],  # baselines would drown our paths
    "large_body": ["bench/large_body.py", "--quick"],
    # 1,000 watch_starts 256 at a time on one memo server over stdio: where a start's time goes
    "scale": ["bench/_scale_client.py", "memo", "1000", "10", "burst"],
}

# First path component of a frame's file (as py-spy prints it: relative to site-packages, or
# the script's own path) -> layer. Order of LAYERS is the order of the report's columns.
LAYERS = (
    "library",
    "servers",
    "bench",
    "MCP SDK",
    "pydantic",
    "HTTP",
    "loop+tasks",
    "JSON",
    "DB driver",
    "OTel",
    "other",
)
_BY_PACKAGE = {
    "asyncai_watch": "library",
    "asyncai_agent": "library",
    "asyncai_servers": "servers",
    "mcp": "MCP SDK",
    "mcp_types": "MCP SDK",
    "pydantic": "pydantic",
    "pydantic_core": "pydantic",
    "uvicorn": "HTTP",
    "starlette": "HTTP",
    "sse_starlette": "HTTP",
    "h11": "HTTP",
    "httpx2": "HTTP",
    "httpcore2": "HTTP",
    "httpx": "HTTP",
    "httpcore": "HTTP",
    "asyncio": "loop+tasks",
    "anyio": "loop+tasks",
    "sniffio": "loop+tasks",
    "selectors.py": "loop+tasks",
    "msgspec": "JSON",
    "json": "JSON",
    "psycopg": "DB driver",
    "psycopg_pool": "DB driver",
    "sqlite3": "DB driver",
    "opentelemetry": "OTel",
}
_BENCH_FILES = frozenset(p.name for p in (ROOT / "bench").glob("*.py"))
# Per bench, frames whose samples are set-up, not the timed work (building the fixture texts).
SETUP: dict[str, tuple[str, ...]] = {"core": ("event_bodies (core.py", "state_texts (core.py")}
_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^:]*?)(?::\d+)?\)$")
_PROCESS = re.compile(r'^process (?P<pid>\d+):"(?P<cmd>.*)"$')


def layer_of(frame: str) -> str:
    """The layer of one py-spy frame, ``func (path/to/file.py:line)``."""
    m = _FRAME.match(frame)
    if m is None:
        return "other"
    path = m["file"]
    if path.startswith("<attrs generated methods "):  # attrs' generated __init__ etc. of our classes
        path = path.removeprefix("<attrs generated methods ").replace(".", "/")
    if path in _BENCH_FILES:
        return "bench"
    return _BY_PACKAGE.get(path.split("/", 1)[0], "other")


@dataclass
class Process:
    cmd: str
    samples: int = 0
    layers: collections.Counter[str] = field(default_factory=collections.Counter)
    functions: collections.Counter[str] = field(default_factory=collections.Counter)


def role(cmd: str) -> str:
    """A short name for a sampled process, from its command line."""
    for pattern, name in (
        (r"asyncai_servers\.(\w+)", r"\1 server"),
        (r"-m asyncai_watch\.(\w+)", r"\1"),
        (r"bench/_(\w+)\.py", r"\1"),
        (r"bench/(\w+)\.py", r"\1 bench process"),
    ):
        m = re.search(pattern, cmd)
        if m:
            return m.expand(name)
    return cmd[:60]


def parse(raw: str, root: str = "bench process", setup: tuple[str, ...] = ()) -> dict[str, Process]:
    """py-spy's raw output (``frame;frame;... count`` per line, process frames first) by process;
    ``root`` names the process py-spy started (it records no command line for that one); samples
    in a frame starting with one of ``setup`` are left out, as imports are."""
    out: dict[str, Process] = {}
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        procs = [i for i, f in enumerate(frames) if _PROCESS.match(f)]
        if not procs:
            continue
        m = _PROCESS.match(frames[procs[-1]])
        assert m is not None
        own = frames[procs[-1] + 1 :]
        if not own or any("_find_and_load" in f or f.startswith(setup) for f in own):
            continue  # importing or building the fixture: set-up, not the steady state
        key = f"{role(m['cmd']) if m['cmd'] else root} [{m['pid']}]"
        proc = out.setdefault(key, Process(m["cmd"]))
        n = int(count)
        proc.samples += n
        proc.layers[layer_of(own[-1])] += n
        proc.functions[re.sub(r":\d+\)$", ")", own[-1])] += n
    return out


def report(name: str, processes: dict[str, Process], rate: int) -> None:
    print(f"\n== {name}: CPU sampled per process (s) and its share by layer (innermost frame) ==")
    used = [layer for layer in LAYERS if any(p.layers[layer] for p in processes.values())]
    print(f"  {'process':<34} {'CPU s':>6}  " + " ".join(f"{layer[:10]:>10}" for layer in used))
    ranked = sorted(processes.items(), key=lambda kv: -kv[1].samples)
    for key, proc in ranked:
        if proc.samples < rate // 10:  # under 0.1 s: noise
            continue
        shares = " ".join(f"{proc.layers[layer] / proc.samples * 100:9.1f}%" for layer in used)
        print(f"  {key:<34} {proc.samples / rate:6.2f}  {shares}")
    for key, proc in ranked[:3]:
        top = ", ".join(
            f"{f.split(' (', 1)[0]} {n / proc.samples * 100:.0f}%" for f, n in proc.functions.most_common(5)
        )
        print(f"  top of {key}: {top}")


def profile(name: str, bench: list[str], rate: int, keep: Path | None) -> dict[str, Process]:
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    with tempfile.TemporaryDirectory(prefix="floors-") as d:
        raw = Path(d) / f"{name}.txt"
        cmd = [pyspy, "record", "--subprocesses", "--gil", "-r", str(rate), "-f", "raw", "-o", str(raw)]
        cmd += ["--", sys.executable, *bench]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        print(f"\n$ {' '.join(cmd[cmd.index('--') + 1 :])}  (under py-spy, {rate} samples/s)", flush=True)
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        tail = [line for line in done.stdout.splitlines() if line.strip()][-12:]
        print("\n".join(f"  | {line}" for line in tail))
        if done.returncode != 0 or not raw.exists():
            print(f"  {name}: py-spy or the bench failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
            return {}
        text = raw.read_text()
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            (keep / raw.name).write_text(text)
    return parse(text, f"{name} bench process", SETUP.get(name, ()))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("benches", nargs="*", help=f"which, of {', '.join(BENCHES)} (default: all)")
    parser.add_argument("--rate", type=int, default=RATE, help=f"samples per second (default {RATE})")
    parser.add_argument("--keep", type=Path, help="also write each raw profile (flamegraph input) here")
    args = parser.parse_args()
    unknown = [b for b in args.benches if b not in BENCHES]
    if unknown:
        parser.error(f"unknown bench {', '.join(unknown)}: choose from {', '.join(BENCHES)}")
    for name in args.benches or list(BENCHES):
        report(name, profile(name, BENCHES[name], args.rate, args.keep), args.rate)
    print(f"\nload average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
