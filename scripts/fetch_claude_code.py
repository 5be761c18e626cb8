"""Install the real Claude Code CLI, pinned, cached in ``.tools/``, for tests/serve/test_claude_code.py.

``@anthropic-ai/claude-code`` (pinned below) is a wrapper whose postinstall copies a native
binary out of one of its optional dependencies, one npm package per platform
(``@anthropic-ai/claude-code-linux-x64``, ``-linux-arm64``, ``-linux-x64-musl``, ...). This
installs that platform package alone, straight from the npm registry (no install script runs,
and nothing is downloaded from anywhere but npm): the binary is its ``claude`` file. Only
``npm`` has to be on the machine; Node.js is not needed to run the binary. A second run finds
it in ``.tools/claude-code-<version>/`` and downloads nothing.

Usage: ``python scripts/fetch_claude_code.py``; exit 0 prints the binary's path, exit 1 prints
why it failed on stderr.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Final

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fetch_conformance import TOOLS, _installed_version, _npm_install  # one npm install for .tools/

PACKAGE: Final = "@anthropic-ai/claude-code"
VERSION: Final = "2.1.332"
_ARCH: Final = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}


def platform_package() -> str:
    """The npm package that carries the native binary for this machine."""
    arch = _ARCH.get(platform.machine().lower())
    if sys.platform != "linux" or arch is None:
        raise RuntimeError(
            f"no Claude Code package for {sys.platform}/{platform.machine()} here (linux x64/arm64 only)"
        )
    musl = platform.libc_ver()[0] != "glibc"
    return f"{PACKAGE}-linux-{arch}" + ("-musl" if musl else "")


def fetch(tools: Path = TOOLS) -> Path:
    """The cached ``claude`` binary under ``tools``, installing it if it is missing; it answers
    ``--version`` with the pinned version or this raises."""
    package = platform_package()
    prefix = tools / f"claude-code-{VERSION}"
    package_dir = prefix / "node_modules" / package
    if _installed_version(package_dir) != VERSION:
        _npm_install(prefix, f"{package}@{VERSION}", tools)
    binary = package_dir / "claude"
    if not binary.is_file():
        raise RuntimeError(f"{binary} is missing after the npm install of {package}@{VERSION}")
    if not os.access(binary, os.X_OK):
        binary.chmod(0o755)
    proc = subprocess.run(
        [str(binary), "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    if proc.returncode != 0 or not proc.stdout.startswith(VERSION):
        raise RuntimeError(
            f"{binary} --version answered {proc.stdout.strip()!r} (exit {proc.returncode}): "
            f"{proc.stderr.strip()[-500:]}"
        )
    return binary


def main() -> int:
    try:
        binary = fetch()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        print(f"fetch_claude_code: {exc}", file=sys.stderr)
        return 1
    print(binary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
