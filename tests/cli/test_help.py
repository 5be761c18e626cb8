"""Every console script in pyproject.toml, and every subcommand of one, has a --help with a
description and examples, and each example is a command line its parser accepts."""

from __future__ import annotations

import argparse
import importlib
import shlex
import tomllib
from collections.abc import Iterator

import pytest

from asyncai_watch.cli_help import EXAMPLES
from tests.support import ROOT

SCRIPTS: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


class _Built(Exception):
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser


def parser_of(entry: str, monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    """The parser the console script's main() builds (caught as it starts parsing)."""
    module, _, function = entry.partition(":")
    main = getattr(importlib.import_module(module), function)

    def caught(self: argparse.ArgumentParser, *_args: object, **_kw: object) -> None:
        raise _Built(self)

    with monkeypatch.context() as patch:
        patch.setattr(argparse.ArgumentParser, "parse_args", caught)
        with pytest.raises(_Built) as built:
            main([])
    return built.value.parser


def commands(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """``parser`` and each of its subcommands' parsers, with the words that name them."""
    yield words, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, (*words, name))


def every_command() -> list[tuple[str, str]]:
    return [(script, entry) for script, entry in SCRIPTS.items()]


@pytest.mark.parametrize(("script", "entry"), every_command(), ids=list(SCRIPTS))
def test_every_command_has_a_description_and_examples_that_parse(
    script: str, entry: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    top = parser_of(entry, monkeypatch)
    found = list(commands(top))
    assert found, script
    for words, parser in found:
        name = " ".join((script, *words))
        text = parser.format_help()
        assert parser.description, f"{name} --help has no description"
        assert EXAMPLES in text, f"{name} --help has no examples:\n{text}"
        lines = [
            line.split("  #", 1)[0].strip()
            for line in text.split(EXAMPLES, 1)[1].splitlines()
            if line.strip() and not line.strip().startswith("#")
        ]
        assert lines, f"{name} --help lists no example"
        for line in lines:
            argv = shlex.split(line)
            assert argv[0] == script, f"{name}: example {line!r} does not run {script}"
            if "--help" in argv or "COMMAND" in argv:
                continue
            assert argv[1 : 1 + len(words)] == list(words) or not words, f"{name}: {line!r}"
            _, unknown = top.parse_known_args(argv[1:])
            assert unknown == [], f"{name}: example {line!r} has unknown arguments {unknown}"
