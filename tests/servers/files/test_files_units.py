"""The files server's parts without MCP: path safety, reading, directory reconcile, inotify probe."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncai_servers.files.change_source import InotifyUnavailable, NotifyTiming, check_inotify
from asyncai_servers.files.content import NotAFile, read_state
from asyncai_servers.files.dirlog import DirSpec, iso_utc, observe, reconcile, scan
from asyncai_servers.files.paths import PathRefused, RootError, Roots


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Roots, Path, Path]:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (root / "escape").symlink_to(outside)
    (root / "alias").symlink_to(root / "sub")
    return Roots.from_args([str(root)]), root, outside


def test_roots_must_exist_and_be_directories(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    for bad, expect in [
        ([], "no ROOT"),
        ([str(tmp_path / "nope")], "does not exist"),
        ([str(tmp_path / "f")], "not a directory"),
    ]:
        with pytest.raises(RootError, match=expect):
            Roots.from_args(bad)


def test_resolve_accepts_inside_and_refuses_the_rest(tree: tuple[Roots, Path, Path]) -> None:
    roots, root, outside = tree
    assert roots.resolve(f"{root}/sub/x.json") == os.path.realpath(root / "sub" / "x.json")
    assert roots.resolve(f"{root}//sub/./x") == os.path.realpath(root / "sub" / "x")
    assert roots.resolve(f"{root}/alias/x") == os.path.realpath(
        root / "sub" / "x"
    )  # a link that stays inside
    for path, why in [
        (f"{root}/../outside/x", "'..'"),
        (f"{root}/sub/..", "'..'"),
        (f"{outside}/x", "outside the served roots"),
        ("/etc/passwd", "outside the served roots"),
        (f"{root}/escape/x", "through a symlink"),
        ("relative/x", "absolute"),
    ]:
        with pytest.raises(PathRefused) as caught:
            roots.resolve(path)
        assert why in str(caught.value)
        assert str(os.path.realpath(root)) in str(caught.value)


@given(st.lists(st.sampled_from(["sub", "alias", "escape", "..", ".", "x", "", "y.json"]), max_size=6))
def test_any_accepted_path_is_inside_a_root(
    tmp_path_factory: pytest.TempPathFactory, parts: list[str]
) -> None:
    base = tmp_path_factory.getbasetemp() / "hyp-roots"
    root = base / "root"
    if not root.exists():
        (root / "sub").mkdir(parents=True)
        (base / "outside").mkdir()
        (root / "escape").symlink_to(base / "outside")
        (root / "alias").symlink_to(root / "sub")
    roots = Roots.from_args([str(root)])
    try:
        real = roots.resolve("/".join([str(root), *parts]))
    except PathRefused:
        return
    assert real == os.path.realpath(real)
    assert roots.contains_real(real)


def test_read_state_text_json_and_torn(tmp_path: Path) -> None:
    roots = Roots.from_args([str(tmp_path)])
    (tmp_path / "a.txt").write_text("hello")
    (tmp_path / "a.json").write_text('{"k": [1, 2]}')
    (tmp_path / "torn.json").write_text('{"k": [1, ')
    (tmp_path / "data").write_text('["x"]')
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe")
    (tmp_path / "big.txt").write_text("x" * 11)

    def read(name: str, **kw: Any) -> tuple[str, str, bool]:
        s = read_state(str(tmp_path / name), roots, shown=name, **kw)
        return s.text, s.mime_type, s.is_error

    assert read("a.txt") == ("hello", "text/plain", False)
    assert read("a.json") == ('{"k": [1, 2]}', "application/json", False)
    assert read("data") == ('["x"]', "application/json", False)
    for name, expect, kw in [
        ("torn.json", "not valid JSON", {}),
        ("bin.txt", "not UTF-8", {}),
        ("big.txt", "larger than 10 bytes", {"max_bytes": 10}),
    ]:
        text, mime, is_error = read(name, **kw)
        assert (mime, is_error) == ("application/json", True)
        assert expect in json.loads(text)["error"]
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(NotAFile, match="is a FIFO, not a regular file"):
        read("fifo")
    with pytest.raises(NotAFile, match="dir-events://"):
        read_state(str(tmp_path), roots, shown=str(tmp_path))


def test_read_state_refuses_a_symlink_swapped_in(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret").write_text("s")
    roots = Roots.from_args([str(root)])
    checked = roots.resolve(f"{root}/f")  # checked while it did not exist ...
    (root / "f").symlink_to(outside / "secret")  # ... then a link appears
    with pytest.raises(PathRefused, match="symlink"):
        read_state(checked, roots, shown=checked)


def test_refusals_do_not_say_where_a_symlink_leads(tmp_path: Path) -> None:
    """A refusal says the path leaves the roots, never where to: that would map the outside."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "d").mkdir(parents=True)
    (outside / "hidden").mkdir(parents=True)
    (outside / "hidden" / "secret.txt").write_text("s")
    (root / "escape").symlink_to(outside / "hidden")
    (root / "file-link").symlink_to(outside / "hidden" / "secret.txt")
    (root / "dangling").symlink_to(outside / "hidden" / "not-yet")
    roots = Roots.from_args([str(root)])
    messages = []
    for path in (f"{root}/escape/secret.txt", f"{root}/file-link", f"{root}/dangling", f"{root}/escape"):
        with pytest.raises(PathRefused) as caught:
            roots.resolve(path)
        messages.append(str(caught.value))
    # A directory swapped for a link after the check: caught on the opened descriptor.
    checked = roots.resolve(f"{root}/d/secret.txt")
    (root / "d").rmdir()
    (root / "d").symlink_to(outside / "hidden")
    with pytest.raises(PathRefused) as caught:
        read_state(checked, roots, shown=checked)
    messages.append(str(caught.value))
    for message in messages:
        assert "outside the served roots" in message, message
        assert str(outside) not in message, message
        assert "hidden" not in message, message
        assert str(root) in message, message


def test_check_inotify_explains_why_it_is_unavailable() -> None:
    check_inotify()  # real inotify works here
    for code, expect in [
        (errno.ENOSYS, "no inotify"),
        (errno.EMFILE, "max_user_instances"),
        (errno.EACCES, "errno"),
    ]:
        with pytest.raises(InotifyUnavailable) as caught:
            check_inotify(lambda _flags, code=code: -code)
        assert expect in str(caught.value)
        assert "never falls back to polling" in str(caught.value)


def test_timing_is_validated() -> None:
    assert NotifyTiming().debounce_ms == 0  # each change is handled at once unless asked otherwise
    with pytest.raises(ValueError, match="debounce_ms"):
        NotifyTiming(debounce_ms=-1)


def test_observe_and_reconcile_a_directory(tmp_path: Path) -> None:
    spec = DirSpec(str(tmp_path), recursive=True, glob=None)
    (tmp_path / "a").write_text("1")
    known = scan(spec)
    assert set(known) == {str(tmp_path / "a")}
    (tmp_path / "a").rename(tmp_path / "b")
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "e" / "f").write_text("x")  # reported only as the new directory "d"
    events = reconcile(
        known, observe(spec, [str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "d")], tuple(known))
    )
    assert [(e["type"], e["object"]["name"]) for e in events] == [
        ("DELETED", "a"),
        ("ADDED", "b"),
        ("ADDED", "d"),
        ("ADDED", "d/e"),
        ("ADDED", "d/e/f"),
    ]
    # A directory moved out of the tree takes its known children with it.
    os.rename(tmp_path / "d", tmp_path.parent / f"{tmp_path.name}-moved-out")
    events = reconcile(known, observe(spec, [str(tmp_path / "d")], tuple(known)))
    assert {(e["type"], e["object"]["name"]) for e in events} == {
        ("DELETED", "d"),
        ("DELETED", "d/e"),
        ("DELETED", "d/e/f"),
    }
    assert set(known) == {str(tmp_path / "b")}


def test_non_recursive_and_glob_scope(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    for name in ("top.json", "top.txt", "s/deep.json"):
        (tmp_path / name).write_text("{}")
    assert {os.path.relpath(p, tmp_path) for p in scan(DirSpec(str(tmp_path)))} == {
        "s",
        "top.json",
        "top.txt",
    }
    assert {os.path.relpath(p, tmp_path) for p in scan(DirSpec(str(tmp_path), True, "*.json"))} == {
        "top.json",
        "s/deep.json",
    }


_objects = st.fixed_dictionaries(
    {
        "size": st.integers(0, 3),
        "mtime": st.sampled_from([1.0, 2.0]),
        "type": st.sampled_from(["file", "dir"]),
    }
)


@given(
    st.dictionaries(st.sampled_from("abcde"), _objects),
    st.dictionaries(st.sampled_from("abcde"), st.none() | _objects),
)
def test_reconcile_events_take_known_to_observed(before: dict[str, Any], seen: dict[str, Any]) -> None:
    def obj(name: str, o: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if o is None else {"path": f"/r/{name}", "name": name, **o}

    known = {f"/r/{k}": obj(k, v) for k, v in before.items()}
    observed = {f"/r/{k}": obj(k, v) for k, v in seen.items()}
    start = dict(known)
    events = reconcile(known, observed)
    # Replaying the events on the starting map gives the reconciled map.
    replay: dict[str, Any] = dict(start)
    for e in events:
        if e["type"] == "DELETED":
            assert replay.pop(e["object"]["path"]) == e["object"]
        elif e["type"] == "ADDED":
            assert e["object"]["path"] not in replay
            replay[e["object"]["path"]] = e["object"]
        else:
            assert replay[e["object"]["path"]] == e["old"] != e["object"]
            replay[e["object"]["path"]] = e["object"]
    assert replay == known
    for path, o in observed.items():
        if o is None:
            assert path not in known
        elif o["type"] != "dir" or start.get(path) is None or start[path]["type"] != "dir":
            assert known[path] == o
    assert not reconcile(known, observed)  # idempotent: a repeated batch reports nothing


def test_exclude_leaves_out_matches_and_everything_below_them(tmp_path: Path) -> None:
    for name in ("keep.txt", "a.tmp", ".git/HEAD", "src/node_modules/p/i.js", "src/main.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    spec = DirSpec(str(tmp_path), True, None, (".git", "node_modules", "*.tmp"))
    assert {os.path.relpath(p, tmp_path) for p in scan(spec)} == {"keep.txt", "src", "src/main.py"}
    assert spec.excluded(str(tmp_path / "src" / "node_modules" / "p" / "i.js"))
    assert not spec.excluded(str(tmp_path))  # the watched directory itself never is
    assert not spec.excluded(str(tmp_path.parent / "x.tmp"))  # nor anything outside it
    changed = [str(tmp_path / ".git" / "new"), str(tmp_path / "b.tmp"), str(tmp_path / "src" / "main.py")]
    assert list(observe(spec, changed, known=())) == [str(tmp_path / "src" / "main.py")]


def test_iso_utc_is_exact_to_the_nanosecond() -> None:
    assert iso_utc(0) == "1970-01-01T00:00:00.000000000Z"
    assert iso_utc(1_764_681_600_120_000_001) == "2025-12-02T13:20:00.120000001Z"
    assert iso_utc(-1) == "1969-12-31T23:59:59.999999999Z"
