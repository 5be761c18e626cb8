"""A test database (`Db`) with the items table and its triggers, and the postgres server as a subprocess."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import psycopg

from asyncai_servers.postgres.config import TableName
from tests.support.pg import PgServer

WAIT = 30.0
WATCHER = "asyncai_watcher"  # a login role that may only read (granted per test database)
NOBODY = "asyncai_nobody"  # a login role granted nothing
EVENTS = "pg-events://public/items"
ITEMS = TableName("public", "items")
CONFIG = """
[[table]]
name = "items"
where = ["status"]

[[query]]
name = "failed"
sql = "SELECT id, note FROM items WHERE status = 'failed' ORDER BY id"
depends_on = ["items"]
"""


class Db:
    def __init__(self, server: PgServer, dsn: str) -> None:
        self.server = server
        self.dsn = dsn

    def as_role(self, role: str) -> str:
        return self.dsn.replace("user=postgres", f"user={role}")

    def run(self, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            cur = conn.execute(statement, params)
            return cur.fetchall() if cur.description else []

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[psycopg.AsyncConnection[tuple[Any, ...]]]:
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
            yield conn

    async def psql(self, script: str) -> None:
        """Run ``script`` in a psql process (one transaction: psql -c sends it as one query)."""
        beside = self.server.bindir / "psql"  # initdb's directory, else PATH (Debian links only some)
        psql = str(beside) if beside.exists() else "psql"
        with anyio.fail_after(WAIT):
            await anyio.run_process([psql, self.dsn, "-v", "ON_ERROR_STOP=1", "-qc", script])


def create_role(conn: psycopg.Connection[tuple[Any, ...]], role: str) -> None:
    with contextlib.suppress(psycopg.errors.DuplicateObject):  # roles are the cluster's: made before
        conn.execute(psycopg.sql.SQL("CREATE ROLE {} LOGIN").format(psycopg.sql.Identifier(role)))


def write_config(tmp_path: Path, text: str = CONFIG) -> Path:
    path = tmp_path / "pg.toml"
    path.write_text(text)
    return path


def server_argv(config: Path, dsn: str, *extra: str) -> list[str]:
    # A short reconnect backoff: the test that cuts the LISTEN connection waits on its return.
    return [
        sys.executable,
        "-m",
        "asyncai_servers.postgres",
        "--config",
        str(config),
        "--dsn",
        dsn,
        "--reconnect",
        "0.05:0.5",
        *extra,
    ]
