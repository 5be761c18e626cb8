"""``asyncai-watch serve``: watches for any Channels host (placeholder until built)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``serve`` subcommand's options."""


def main(args: argparse.Namespace) -> int:
    print("asyncai-watch serve: not built yet", flush=True)
    return 2
