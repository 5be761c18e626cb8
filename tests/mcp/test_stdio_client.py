"""Our stdio client transport (``asyncai_watch.mcp.stdio``): the SDK untouched, the server's
process handled the way the SDK's own transport does, and an ``mcp`` outside the tested range
refused at import."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import anyio
import pytest
from mcp import Client

from asyncai_watch._mcp_version import MCP_VERSIONS
from asyncai_watch.mcp.client import McpResourceSource
from asyncai_watch.mcp.stdio import StdioTransport
from tests.support import ROOT

pytestmark = pytest.mark.anyio

WAIT = 30  # seconds: a bound on any one awaited event, never a sleep
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}

SNAPSHOT = """
import importlib, sys
def snapshot():
    return {
        name: {key: id(value) for key, value in vars(module).items()}
        for name, module in list(sys.modules.items())
        if name == "mcp" or name.startswith(("mcp.", "mcp_types"))
    }
import mcp.client.stdio, mcp.server.stdio
before = snapshot()
import asyncai_watch
from asyncai_watch import McpResourceSource, WatchManager
import asyncai_watch.mcp.stdio, asyncai_watch.server.stdio, asyncai_watch.serve
after = snapshot()
def bound_by_import(name, key):  # importing a submodule binds it on its package: not a change
    return key not in before[name] and sys.modules.get(f"{name}.{key}") is vars(sys.modules[name])[key]
changed = sorted(
    f"{name}.{key}"
    for name, names in before.items()
    for key in names.keys() | after[name].keys()
    if names.get(key) != after[name].get(key) and not bound_by_import(name, key)
)
print(changed)
"""


def test_importing_asyncai_watch_changes_nothing_in_the_sdk() -> None:
    """Every name of every ``mcp`` module loaded before is the same object after the library's
    import: another SDK user in the process keeps the SDK's own stdio reader."""
    done = subprocess.run(
        [sys.executable, "-c", SNAPSHOT], env=ENV, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_tested_mcp_range_is_the_one_pyproject_declares() -> None:
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"mcp{MCP_VERSIONS}" in dependencies


@pytest.mark.parametrize("found", ["2.4.0", "2.2.9", "3.0.0"])
def test_an_mcp_outside_the_tested_range_is_refused_at_import_with_one_clear_error(
    tmp_path: Path, found: str
) -> None:
    """Installed metadata saying another mcp version (a fake distribution found first on the
    path): ``import asyncai_watch`` fails with one line naming the range and the fix."""
    info = tmp_path / f"mcp-{found}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: mcp\nVersion: {found}\n")
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(tmp_path), ENV["PYTHONPATH"]])}
    done = subprocess.run(
        [sys.executable, "-c", "import asyncai_watch"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last == (
        "asyncai_watch._mcp_version.McpVersionError: asyncai-watch is tested with mcp>=2.3,<2.4, "
        f"but mcp {found} is installed: pip install 'mcp>=2.3,<2.4'"
    ), done.stderr
    assert "KeyError" not in done.stderr
    assert "AttributeError" not in done.stderr


PROBE = """
import os, sys
sys.stderr.write(f"probe {os.environ['ASYNCAI_PROBE']} in {os.getcwd()}\\n")
sys.stderr.flush()
os.execv(sys.executable, [sys.executable, "-m", "asyncai_servers.memo"])
"""


async def test_the_server_gets_env_and_cwd_and_its_stderr_goes_to_errlog(tmp_path: Path) -> None:
    errlog = tmp_path / "server.err"
    workdir = tmp_path / "work"
    workdir.mkdir()
    env = {"ASYNCAI_PROBE": "value-42", "PYTHONPATH": ENV["PYTHONPATH"]}
    with errlog.open("w") as err:
        transport = StdioTransport(sys.executable, ["-c", PROBE], env=env, cwd=workdir, errlog=err)
        with anyio.fail_after(WAIT):
            async with Client(transport, cache=None) as client:
                (content,) = (await client.read_resource("memo://notes")).contents
                assert getattr(content, "text", None) == "{}"
    assert f"probe value-42 in {workdir}\n" in errlog.read_text()
    with pytest.raises(RuntimeError, match="entered once"):
        async with transport:
            pass


ENV_PROBE = """
import os, sys
sys.stderr.write(f"probe sees {os.environ.get('ASYNCAI_ENV_PROBE', '<unset>')}\\n")
sys.stderr.flush()
os.execv(sys.executable, [sys.executable, "-m", "asyncai_servers.memo"])
"""


async def test_a_library_stdio_server_gets_the_callers_environment_unless_env_replaces_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 33 item 6: ``McpResourceSource.stdio`` passes this process's environment, as the
    CLI's ``--server`` does (a KUBECONFIG or a DSN must reach the server); ``env=`` replaces it."""
    monkeypatch.setenv("ASYNCAI_ENV_PROBE", "dsn-from-the-shell")
    monkeypatch.setenv("PYTHONPATH", ENV["PYTHONPATH"])
    inherited, replaced = tmp_path / "inherited.err", tmp_path / "replaced.err"
    for errlog, env in ((inherited, None), (replaced, {"PYTHONPATH": ENV["PYTHONPATH"]})):
        with errlog.open("w") as err:
            source = McpResourceSource.stdio([sys.executable, "-c", ENV_PROBE], env=env, errlog=err)
            with anyio.fail_after(WAIT):
                async with source:
                    assert (await source.read("memo://notes")).text == "{}"
    assert "probe sees dsn-from-the-shell\n" in inherited.read_text()
    assert "probe sees <unset>\n" in replaced.read_text()


async def test_an_errlog_without_a_descriptor_is_refused_and_a_replaced_stderr_is_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server's stderr needs a descriptor: an explicit errlog without one is a clear error
    before anything starts; a ``sys.stderr`` replaced by one without (a test's capture) makes
    the server inherit our fd 2 instead of failing."""
    with pytest.raises(ValueError, match="errlog must be a file with a descriptor"):
        async with StdioTransport(sys.executable, ["-c", "pass"], errlog=io.StringIO()):
            pass
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    transport = StdioTransport(sys.executable, ["-m", "asyncai_servers.memo"], env={"PYTHONPATH": str(ROOT)})
    with anyio.fail_after(WAIT):
        async with Client(transport, cache=None) as client:
            (content,) = (await client.read_resource("memo://notes")).contents
    assert getattr(content, "text", None) == "{}"


STUBBORN = """
import json, os, signal, sys
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by the child below
child = os.fork()
if child == 0:
    signal.pause()  # a member of the server's process group that ignores SIGTERM and stdin
    os._exit(0)
sys.stdout.write(json.dumps({"jsonrpc": "2.0", "method": "pids", "params": {"pids": [os.getpid(), child]}}) + "\\n")
sys.stdout.flush()
while True:
    signal.pause()  # never reads stdin, ignores SIGTERM
"""


async def test_a_server_that_ignores_stdin_close_and_sigterm_is_killed_with_its_process_group() -> None:
    """Leaving the transport ends the server even when it and its child ignore both the closed
    stdin and SIGTERM: the whole process group gets SIGKILL after the grace periods."""
    with anyio.fail_after(WAIT):
        async with StdioTransport(sys.executable, ["-c", STUBBORN]) as (read, _write):
            first = await read.receive()
            assert not isinstance(first, Exception)
            pids = first.message.params["pids"]  # type: ignore[union-attr,index]
            exits = [os.pidfd_open(pid) for pid in pids]
        try:
            for fd in exits:
                await anyio.wait_readable(fd)  # each process ends (the child is not ours to reap)
        finally:
            for fd in exits:
                os.close(fd)


async def test_a_large_answer_and_the_lines_around_it_arrive_in_order(tmp_path: Path) -> None:
    """A server writing a 3 MiB line between two small ones: every message reaches the session,
    in order, the large one decoded in steps."""
    big = "é" * (3 << 20)
    script = tmp_path / "three.py"
    lines = [
        {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": n}}
        for n in ("first", big, "last")
    ]
    script.write_text(
        "import sys\n"
        f"sys.stdout.write({''.join(json.dumps(line) + chr(10) for line in lines)!r})\n"
        "sys.stdout.flush()\n"
        "sys.stdin.read()\n"
    )
    with anyio.fail_after(WAIT):
        async with StdioTransport(sys.executable, [str(script)]) as (read, _write):
            got = [await read.receive() for _ in lines]
    assert [m.message.params["data"] for m in got] == ["first", big, "last"]  # type: ignore[union-attr,index]
