"""Install the official MCP conformance suite and a Node.js it runs on, cached in ``.tools/``.

The suite, ``@modelcontextprotocol/conformance`` (pinned below), needs Node >= 22
(it uses ``fs.globSync``). Node itself comes from npm as the ``node-linux-<arch>``
package, so only ``npm`` (any Node it runs on) has to be on the machine. Both go
under ``.tools/`` in the repo root (gitignored), npm's download cache too; a
second run finds them there and downloads nothing.

Usage: ``python scripts/fetch_conformance.py``; exit 0 prints two lines (the node
binary, the suite's ``dist/index.js``), exit 1 prints why it failed on stderr.
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Final

import attrs

SUITE: Final = "@modelcontextprotocol/conformance"
SUITE_VERSION: Final = "0.1.16"
NODE_VERSION: Final = "22.23.5"
TOOLS: Final = Path(__file__).resolve().parent.parent / ".tools"
_ARCH: Final = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}


@attrs.frozen
class Conformance:
    node: Path
    """A Node >= 22 binary."""
    suite: Path
    """The suite's CLI script: run ``node SUITE server|client|list ...``."""

    def argv(self, *args: str) -> list[str]:
        return [str(self.node), str(self.suite), *args]


def _node_package() -> str:
    arch = _ARCH.get(platform.machine().lower())
    if sys.platform != "linux" or arch is None:
        raise RuntimeError(
            f"no npm Node.js package for {sys.platform}/{platform.machine()} (linux x64/arm64 only)"
        )
    return f"node-linux-{arch}"


def _installed_version(package_dir: Path) -> str | None:
    try:
        version = json.loads((package_dir / "package.json").read_text(encoding="utf-8")).get("version")
    except (OSError, ValueError):
        return None
    return version if isinstance(version, str) else None


def _npm_install(prefix: Path, spec: str, tools: Path) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm not found on PATH (install Node.js and npm, e.g. apt-get install npm)")
    # Into a side directory first: a half-finished install is never mistaken for a cached one.
    part = prefix.with_name(prefix.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir(parents=True)
    argv = [npm, "install", "--prefix", str(part), "--cache", str(tools / "npm-cache")]
    argv += ["--no-audit", "--no-fund", "--no-update-notifier", "--loglevel=error", spec]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        shutil.rmtree(part, ignore_errors=True)
        raise RuntimeError(
            f"npm install {spec} failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}"
        )
    shutil.rmtree(prefix, ignore_errors=True)
    part.replace(prefix)


def fetch(tools: Path = TOOLS) -> Conformance:
    """The cached node and suite under ``tools``, installing whichever is missing."""
    package = _node_package()
    node_prefix = tools / f"node-{NODE_VERSION}"
    node_dir = node_prefix / "node_modules" / package
    if _installed_version(node_dir) != NODE_VERSION:
        _npm_install(node_prefix, f"{package}@{NODE_VERSION}", tools)
    node = node_dir / "bin" / "node"
    suite_prefix = tools / f"mcp-conformance-{SUITE_VERSION}"
    suite_dir = suite_prefix / "node_modules" / SUITE
    if _installed_version(suite_dir) != SUITE_VERSION:
        _npm_install(suite_prefix, f"{SUITE}@{SUITE_VERSION}", tools)
    suite = suite_dir / "dist" / "index.js"
    for path in (node, suite):
        if not path.is_file():
            raise RuntimeError(f"{path} is missing after the npm install")
    return Conformance(node=node, suite=suite)


def main() -> int:
    try:
        found = fetch()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        print(f"fetch_conformance: {exc}", file=sys.stderr)
        return 1
    print(found.node)
    print(found.suite)
    return 0


if __name__ == "__main__":
    sys.exit(main())
