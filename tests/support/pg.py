"""A real, throwaway PostgreSQL for tests: initdb + pg_ctl in a temp dir, on a free loopback port.

Import the fixture into a test module (``from pg import postgres_server``).
When the server binaries are missing the fixture skips with the reason,
unless ``ASYNCAI_REQUIRE_POSTGRES=1`` (CI), where it fails instead. As root,
the binaries run as the ``postgres`` user (``runuser -u postgres --``), since
PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

__all__ = [
    "PgServer",
    "Store",
    "find_pg_bindir",
    "module_postgres_fixture",
    "pg_store_fixture",
    "postgres_server",
    "start_postgres",
    "store_fixture",
]


def find_pg_bindir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl`` (PATH first, then Debian's versioned dirs)."""
    on_path = shutil.which("initdb")
    if on_path and shutil.which("pg_ctl"):
        return Path(on_path).parent
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(candidate) / "initdb").exists() and (Path(candidate) / "pg_ctl").exists():
            return Path(candidate)
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@attrs.define
class PgServer:
    bindir: Path
    datadir: Path
    port: int
    run_as: list[str]
    logfile: Path
    options: str = ""
    """The ``pg_ctl -o`` options it was started with (:meth:`start` after :meth:`stop` uses them)."""

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname}"

    def create_database(self) -> str:
        """A fresh, empty database (so tests sharing the server never see each other's todos)."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:16]
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.dsn(name)

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: every connection is cut, and the server is back (same port and
        options) when this returns. Blocking: call it from a thread in async tests."""
        how = ["-l", str(self.logfile), "-m", "fast", "-w", "-t", "60", "restart"]
        done = subprocess.run(
            [*self.run_as, str(self.bindir / "pg_ctl"), "-D", str(self.datadir), *how],
            check=False,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"pg_ctl restart failed: {done.stderr or done.stdout}")

    def start(self) -> None:
        """Start it again after :meth:`stop` (same port and options). Blocking: run it in a thread."""
        how = ["-o", self.options, "-l", str(self.logfile), "-w", "-t", "60", "start"]
        done = subprocess.run(
            [*self.run_as, str(self.bindir / "pg_ctl"), "-D", str(self.datadir), *how],
            check=False,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed: {done.stderr or done.stdout}")

    def stop(self) -> None:
        subprocess.run(
            [*self.run_as, str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m", "immediate", "stop"],
            check=False,
            capture_output=True,
        )


def start_postgres(base: Path, *, fsync: bool = False) -> PgServer:
    """initdb + start on a free port; raises RuntimeError with the server's log on failure."""
    bindir = find_pg_bindir()
    if bindir is None:
        raise FileNotFoundError("PostgreSQL server binaries (initdb, pg_ctl) not found")
    run_as: list[str] = []
    datadir = base / "data"
    sockdir = base / "sock"
    sockdir.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        run_as = ["runuser", "-u", "postgres", "--"]
        shutil.chown(base, "postgres")
        shutil.chown(sockdir, "postgres")
    init = subprocess.run(
        [
            *run_as,
            str(bindir / "initdb"),
            "-D",
            str(datadir),
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
            "-E",
            "UTF8",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if init.returncode != 0:
        raise RuntimeError(f"initdb failed: {init.stderr or init.stdout}")
    last = ""
    for _ in range(3):  # the free port can be taken between probing and binding; try another
        port = _free_port()
        opts = (
            f"-p {port} -k {sockdir} -c listen_addresses=127.0.0.1 -c fsync={'on' if fsync else 'off'}"
            " -c max_connections=200"
        )
        logfile = base / f"pg-{port}.log"
        started = subprocess.run(
            [
                *run_as,
                str(bindir / "pg_ctl"),
                "-D",
                str(datadir),
                "-o",
                opts,
                "-l",
                str(logfile),
                "-w",
                "-t",
                "60",
                "start",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if started.returncode == 0:
            return PgServer(
                bindir=bindir, datadir=datadir, port=port, run_as=run_as, logfile=logfile, options=opts
            )
        last = logfile.read_text() if logfile.exists() else started.stderr
    raise RuntimeError(f"PostgreSQL did not start: {last}")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PgServer]:
    yield from _throwaway_cluster()


@pytest.fixture(scope="module", name="module_postgres")
def module_postgres_fixture() -> Iterator[PgServer]:
    """A cluster of the module's own, for tests that restart it or cut its connections."""
    yield from _throwaway_cluster()


def _throwaway_cluster() -> Iterator[PgServer]:
    required = os.environ.get("ASYNCAI_REQUIRE_POSTGRES") == "1"
    if find_pg_bindir() is None:
        reason = (
            "PostgreSQL server binaries (initdb, pg_ctl) not found; install them with "
            "`apt-get install -y postgresql` (or set PATH)"
        )
        if required:
            pytest.fail(f"ASYNCAI_REQUIRE_POSTGRES=1 but {reason}")
        pytest.skip(reason)
    # Not under pytest's tmp dir: that is root-only (0700), and the server runs as ``postgres``.
    base = Path(tempfile.mkdtemp(prefix="asyncai-pg-"))
    try:
        server = start_postgres(base)
        try:
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


# -- the switchboard's two backends, as one parametrized fixture -------------------------------------


@attrs.define
class Store:
    """One empty ledger store: ``ledger()`` opens another handle on it (another replica, for PostgreSQL)."""

    kind: str
    cli: list[str]
    target: str

    def ledger(self) -> object:
        if self.kind == "sqlite":
            from asyncai_servers.switchboard.ledger_sqlite import SqliteLedger

            return SqliteLedger(Path(self.target))
        from asyncai_servers.switchboard.ledger_pg import PostgresLedger

        return PostgresLedger(self.target)


@pytest.fixture(name="store", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "sqlite":
        path = tmp_path / "switchboard.db"
        return Store(kind="sqlite", cli=["--sqlite", str(path)], target=str(path))
    server: PgServer = request.getfixturevalue("postgres_server")
    dsn = server.create_database()
    return Store(kind="postgres", cli=["--postgres", dsn], target=dsn)


@pytest.fixture(name="pg_store")
def pg_store_fixture(postgres_server: PgServer) -> Store:
    dsn = postgres_server.create_database()
    return Store(kind="postgres", cli=["--postgres", dsn], target=dsn)
