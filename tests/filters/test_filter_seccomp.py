"""The filter worker's seccomp filter, checked from inside real locked-down processes.

Restricted code cannot reach ``os`` or ``socket``, so these tests stand in for a sandbox
escape: a fresh ``python -I`` runs the worker's own ``_lock_down`` with the engine's config
and then tries what escaped code would try.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from asyncai_watch.filters import EmptyCatalog, RestrictedPythonEngine

pytestmark = pytest.mark.anyio

# Everything is imported before the lock-down (afterwards no file can be opened). Each
# attempt prints "ok" or the errno's name; exec goes last, on its own line, because if it
# works the process is gone.
ESCAPE = """\
import errno, json, os, socket, subprocess, sys
sys.path.append(sys.argv[1])
from asyncai_watch.filters import _worker
notes = _worker._lock_down(json.loads(sys.argv[2]))
scratch = sys.argv[3]

def fork():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)

def bypass_nofile_then_open():
    os.close(2)  # RLIMIT_NOFILE=3 counts descriptors, so this frees a slot
    open("/etc/passwd").close()

def spawn():
    os.close(0)  # subprocess needs two free descriptors for its pipe
    subprocess.run(["/bin/true"], stdin=subprocess.DEVNULL, stdout=1, stderr=1, close_fds=False)

attempts = [
    ("open", bypass_nofile_then_open),
    ("socket", lambda: socket.socket().close()),
    ("fork", fork),
    ("subprocess", spawn),
    ("kill_parent", lambda: os.kill(os.getppid(), 0)),
    ("kill_self", lambda: os.kill(os.getpid(), 0)),
    ("mkdir", lambda: os.mkdir(os.path.join(scratch, "made"))),
    ("unlink", lambda: os.unlink(os.path.join(scratch, "file"))),
    ("rename", lambda: os.rename(os.path.join(scratch, "file"), os.path.join(scratch, "moved"))),
    ("symlink", lambda: os.symlink("/etc/passwd", os.path.join(scratch, "link"))),
    ("chmod", lambda: os.chmod(os.path.join(scratch, "file"), 0o777)),
]
results = {}
for name, attempt in attempts:
    try:
        attempt()
        results[name] = "ok"
    except OSError as exc:
        results[name] = errno.errorcode.get(exc.errno, str(exc.errno))
print(json.dumps({"notes": notes, "results": results}), flush=True)
try:
    os.execv("/bin/true", ["true"])
except OSError as exc:
    print(json.dumps({"exec": errno.errorcode.get(exc.errno, str(exc.errno))}), flush=True)
"""


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A directory the worker could change even as nobody, so only seccomp can refuse.
    (pytest's tmp_path sits under a 0700 directory, which would refuse nobody anyway.)"""
    path = Path(tempfile.mkdtemp(prefix="asyncai-seccomp-"))
    try:
        path.chmod(0o777)
        (path / "file").write_text("x")
        (path / "file").chmod(0o666)
        yield path
    finally:
        shutil.rmtree(path)


async def escape_attempts(engine: RestrictedPythonEngine, scratch: Path) -> dict[str, Any]:
    python, _isolated, _c, _boot, root, config = engine.command()
    with anyio.fail_after(60):
        done = await anyio.run_process(
            [python, "-I", "-c", ESCAPE, root, config, str(scratch)],
            env={},
            stdin=subprocess.DEVNULL,
            check=False,
        )
    lines = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert lines, f"the escape script printed nothing (exit {done.returncode}): {done.stderr.decode()}"
    report: dict[str, Any] = lines[0]
    report["results"]["exec"] = lines[1]["exec"] if len(lines) > 1 else "ok (the process was replaced)"
    return report


@pytest.mark.parametrize(
    "drop_privileges",
    [True, False],
    ids=["default", "same-uid-as-agent"],  # False stands in for a non-root install
)
async def test_escaped_code_cannot_open_connect_spawn_or_touch_files(
    drop_privileges: bool, scratch: Path
) -> None:
    report = await escape_attempts(RestrictedPythonEngine(drop_privileges=drop_privileges), scratch)
    refused = {
        name: "EPERM"
        for name in (
            "open",
            "socket",
            "fork",
            "subprocess",
            "exec",
            "kill_parent",
            "mkdir",
            "unlink",
            "rename",
            "symlink",
            "chmod",
        )
    }
    assert report["results"] == {**refused, "kill_self": "ok"}
    assert report["notes"]["seccomp"] == "on"
    assert report["notes"]["no_new_privs"] is True
    assert os.listdir(scratch) == ["file"]
    assert stat.S_IMODE(os.stat(scratch / "file").st_mode) == 0o666


async def test_a_live_worker_reports_seccomp_on_and_still_runs_filters() -> None:
    engine = RestrictedPythonEngine()
    async with await engine.open("event['a'] * 2", catalog=EmptyCatalog()) as session:
        assert (await session.run([{"a": 21}]))[0].line == "42"
        probe = await session.probe()
    assert probe["seccomp"] == "on"
    assert probe["no_new_privs"] is True
    assert probe["threads"] == 1  # clone is refused outright, so no thread may be needed
    assert engine.seccomp == "on"


async def test_without_libseccomp_the_worker_runs_and_says_seccomp_is_off(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A Python on which libseccomp.so.2 cannot be found; it stands in for `python -I -c BOOT ...`.
    python = tmp_path / "python-without-libseccomp"
    python.write_text(
        f"#!{sys.executable}\n"
        "import ctypes.util, sys\n"
        "_find = ctypes.util.find_library\n"
        "ctypes.util.find_library = lambda name: None if name == 'seccomp' else _find(name)\n"
        "assert sys.argv[1:3] == ['-I', '-c'], sys.argv\n"
        "code, sys.argv = sys.argv[3], ['-c', *sys.argv[4:]]\n"
        "exec(compile(code, '<boot>', 'exec'), {'__name__': '__main__'})\n"
    )
    python.chmod(0o755)
    engine = RestrictedPythonEngine(python=str(python))
    caplog.set_level(logging.WARNING, logger="asyncai_watch.filters.restricted")
    for _ in range(2):
        async with await engine.open("event['a'] * 2", catalog=EmptyCatalog()) as session:
            assert (await session.run([{"a": 21}]))[0].line == "42"
            probe = await session.probe()
    why = "off: cannot load libseccomp (RuntimeError: Unable to find libseccomp)"
    assert probe["seccomp"] == why
    assert engine.seccomp == why
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"filter workers run without their seccomp filter ({why}); see docs/filters.md"]
    assert probe["rlimits"]["RLIMIT_NOFILE"] == [3, 3]  # the rest of the lock-down still holds
    if os.geteuid() == 0:
        assert probe["uid"] == 65534
