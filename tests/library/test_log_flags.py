"""The logging flags the console scripts share (asyncai_watch/log_flags.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# The scripts wired to the shared flags so far (the others keep their own spellings for now).
SCRIPTS = [
    "asyncai-mcp-simple",
    "asyncai-mcp-files",
    "asyncai-mcp-kcp",
    "asyncai-mcp-kcp-readonly",
    "asyncai-mcp-postgres",
    "asyncai-mcp-webhooks",
    "asyncai-switchboard",
]
BIN = Path(sys.executable).parent


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_wired_script_offers_the_four_logging_flags(script: str) -> None:
    done = subprocess.run([BIN / script, "--help"], capture_output=True, text=True, timeout=60, check=True)
    for flag in ("-v, --verbose", "-q, --quiet", "--log-level LEVEL", "--log-file PATH"):
        assert flag in done.stdout, f"{script} --help lacks {flag}"


def test_a_bad_log_level_is_a_usage_error_naming_what_is_accepted() -> None:
    done = subprocess.run(
        [BIN / "asyncai-mcp-webhooks", "--log-level", "loud"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "--log-level" in done.stderr
    assert "DEBUG, INFO, WARNING, ERROR, CRITICAL" in done.stderr
    assert "Traceback" not in done.stderr


_PROGRAM = """
import argparse, logging, sys
from asyncai_watch.log_flags import add_log_flags, configure_logging
p = argparse.ArgumentParser()
add_log_flags(p)
configure_logging(p.parse_args(sys.argv[1:]))
logging.getLogger("asyncai_servers.demo").debug("detail", extra={"n": 1})
logging.getLogger("asyncai_servers.demo").warning("careful")
"""


def _run(*flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _PROGRAM, *flags], capture_output=True, text=True, timeout=60, check=True
    )


def test_log_file_gets_ndjson_at_the_level_asked(tmp_path: Path) -> None:
    log = tmp_path / "server.ndjson"
    done = _run("--log-level", "debug", "--log-file", str(log))
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["level"], r["event"]) for r in records] == [("DEBUG", "detail"), ("WARNING", "careful")]
    assert records[0]["n"] == 1
    assert "detail" in done.stderr  # stderr shows the same level as text


def test_quiet_silences_stderr_but_not_the_log_file(tmp_path: Path) -> None:
    log = tmp_path / "server.ndjson"
    done = _run("-q", "--log-file", str(log))
    assert done.stderr == ""
    assert [json.loads(line)["event"] for line in log.read_text().splitlines()] == ["careful"]


def test_verbose_means_debug() -> None:
    assert "detail" in _run("-v").stderr
    assert "detail" not in _run().stderr  # default WARNING


def test_a_server_writes_its_ndjson_log_at_debug_to_log_file_and_q_keeps_stderr_to_its_contract(
    tmp_path: Path,
) -> None:
    log = tmp_path / "memo.ndjson"
    argv = [BIN / "asyncai-mcp-simple", "--http", "127.0.0.1:0", "-q", "--log-level", "debug"]
    with subprocess.Popen([*argv, "--log-file", str(log)], stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stderr is not None
        lines = []
        # Read until the READY line (a blocking read of the server's own output, no polling);
        # pytest-timeout bounds it.
        while not (line := proc.stderr.readline()).startswith("READY ") and line:
            lines.append(line)
        assert line.startswith("READY http://127.0.0.1:")
        proc.terminate()
        lines.extend(proc.stderr.readlines())
        assert proc.wait(timeout=60) == 0
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert any(r["level"] == "DEBUG" and r["logger"] == "mcp.server.lowlevel.server" for r in records)
    # -q: only the server's contract lines (the token's place, READY) reach stderr, no log record.
    assert not [line for line in lines if "DEBUG" in line or "INFO" in line]
