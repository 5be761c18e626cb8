"""Install the Node.js tools the tests run, cached in ``.tools/``: the official MCP conformance
suite (two versions), MCP peers this project did not write, and a Node.js they run on.

- ``@modelcontextprotocol/conformance``, every version in :data:`SUITE_VERSIONS`: the last
  stable one and the newest (a pre-release, the first with ``--requirements 2026-07-28``);
- the peers of ``tests/mcp/test_real_peers.py`` (:data:`PEERS`): the TypeScript SDK v1, which
  ``tests/support/peers/*.cjs`` are written on, and ``@modelcontextprotocol/server-everything``;
- Node >= 22 (the suite uses ``fs.globSync``), from npm itself as the ``node-linux-<arch>``
  package, so only ``npm`` (any Node it runs on) has to be on the machine.

Each package goes under ``.tools/`` in the repo root (gitignored), npm's download cache too; a
second run finds them there and downloads nothing. Versions are pinned: a new one is looked at
(``tests/support/conformance.toml`` lists every scenario of each suite) before it is run.

Usage: ``python scripts/fetch_conformance.py``; exit 0 prints what it found, one ``NAME PATH``
line each; exit 1 prints why it failed on stderr.
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import attrs

SUITE: Final = "@modelcontextprotocol/conformance"
SUITE_VERSIONS: Final = ("0.1.16", "0.2.0-alpha.12")
NODE_VERSION: Final = "22.23.5"
TS_SDK: Final = "@modelcontextprotocol/sdk"
EVERYTHING: Final = "@modelcontextprotocol/server-everything"
PEERS: Final = {TS_SDK: "1.32.2", EVERYTHING: "2026.8.31"}
TOOLS: Final = Path(__file__).resolve().parent.parent / ".tools"
_ARCH: Final = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}


@attrs.frozen
class Conformance:
    node: Path
    """A Node >= 22 binary."""
    suites: Mapping[str, Path]
    """Each suite version's CLI script: run ``node SCRIPT server|client|list ...``."""

    def argv(self, version: str, *args: str) -> list[str]:
        return [str(self.node), str(self.suites[version]), *args]


@attrs.frozen
class Peers:
    node: Path
    """The same Node >= 22."""
    modules: Path
    """The ``node_modules`` directory holding the TypeScript SDK: ``NODE_PATH`` for ``tests/support/peers/*.cjs``."""
    everything: Path
    """server-everything's launcher: ``node EVERYTHING stdio|streamableHttp``."""


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


def _package(tools: Path, prefix_name: str, package: str, version: str) -> Path:
    """The installed directory of ``package@version`` under ``tools/prefix_name``, installed if missing."""
    prefix = tools / prefix_name
    package_dir = prefix / "node_modules" / package
    if _installed_version(package_dir) != version:
        _npm_install(prefix, f"{package}@{version}", tools)
    return package_dir


def _file(path: Path) -> Path:
    if not path.is_file():
        raise RuntimeError(f"{path} is missing after the npm install")
    return path


def fetch_node(tools: Path = TOOLS) -> Path:
    """The cached Node.js binary, installed if missing."""
    package = _node_package()
    return _file(_package(tools, f"node-{NODE_VERSION}", package, NODE_VERSION) / "bin" / "node")


def fetch(tools: Path = TOOLS) -> Conformance:
    """The cached node and every suite version under ``tools``, installing whichever is missing."""
    node = fetch_node(tools)
    suites = {
        version: _file(_package(tools, f"mcp-conformance-{version}", SUITE, version) / "dist" / "index.js")
        for version in SUITE_VERSIONS
    }
    return Conformance(node=node, suites=suites)


def fetch_peers(tools: Path = TOOLS) -> Peers:
    """The cached node, TypeScript SDK and server-everything, installing whichever is missing."""
    node = fetch_node(tools)
    sdk = _package(tools, f"mcp-ts-sdk-{PEERS[TS_SDK]}", TS_SDK, PEERS[TS_SDK])
    _file(sdk / "package.json")
    everything = _package(tools, f"mcp-server-everything-{PEERS[EVERYTHING]}", EVERYTHING, PEERS[EVERYTHING])
    return Peers(node=node, modules=sdk.parent.parent, everything=_file(everything / "dist" / "index.js"))


def main() -> int:
    try:
        found = fetch()
        peers = fetch_peers()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        print(f"fetch_conformance: {exc}", file=sys.stderr)
        return 1
    print(f"node {found.node}")
    for version, script in found.suites.items():
        print(f"{SUITE}@{version} {script}")
    print(f"{TS_SDK}@{PEERS[TS_SDK]} {peers.modules / TS_SDK}")
    print(f"{EVERYTHING}@{PEERS[EVERYTHING]} {peers.everything}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
