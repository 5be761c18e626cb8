"""A --watch-state file nested too deeply: one StateFileError, and one line from the agent CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from asyncai_watch.errors import StateFileError
from asyncai_watch.state_file import StateFile
from tests.support.agent_state_run import run_agent_with_state

DEEP = "[" * 100_000 + "]" * 100_000  # 200 kB of valid JSON that the decoder cannot recurse into


def test_a_deeply_nested_file_is_one_state_file_error(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text(DEEP)
    with pytest.raises(StateFileError, match="nested too deeply") as info:
        StateFile(path).load()
    assert str(path) in str(info.value)
    assert path.read_text() == DEEP  # left untouched


def test_a_value_nested_just_under_the_limit_is_a_shape_error(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    deep_name = "[" * 900 + "]" * 900
    path.write_text(f'{{"version": 1, "watches": [{{"name": {deep_name}, "uri": "x"}}]}}')
    with pytest.raises(StateFileError, match=r"expected shape .*watches\[0\]\.name") as info:
        StateFile(path).load()
    assert len(str(info.value).splitlines()) == 1


def test_the_agent_reports_a_deeply_nested_state_file_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text(DEEP)
    proc = run_agent_with_state(tmp_path, path)
    assert proc.stderr.splitlines() == [
        f"asyncai-agent: error: watch state file {path} is nested too deeply to be a watch state file; "
        'it was left untouched. Fix or remove it; the expected shape is {"version": 2, '
        '"watches": [{"name": ..., "uri": ..., "on_event": ...}]}'
    ]
    assert proc.returncode == 2
    assert path.read_text() == DEEP
