"""The postgres tests' fixtures: ``db``, a fresh database on the module's throwaway cluster."""

from __future__ import annotations

import psycopg
import pytest

from asyncai_servers.postgres.triggers import install_triggers
from tests.support.pg import PgServer, module_postgres_fixture  # noqa: F401  (fixture)
from tests.support.postgres import ITEMS, NOBODY, WATCHER, Db, create_role


@pytest.fixture
def db(module_postgres: PgServer) -> Db:
    dsn = module_postgres.create_database()
    with psycopg.connect(dsn, autocommit=True) as conn:
        create_role(conn, WATCHER)
        create_role(conn, NOBODY)
        conn.execute(
            "CREATE TABLE items (id int PRIMARY KEY, status text NOT NULL DEFAULT 'open',"
            " n int NOT NULL DEFAULT 0, note text)"
        )
        conn.execute("INSERT INTO items (id, note) VALUES (1, 'one'), (2, 'two')")
        conn.execute(psycopg.sql.SQL("GRANT SELECT ON items TO {}").format(psycopg.sql.Identifier(WATCHER)))
    install_triggers(dsn, [ITEMS])
    return Db(module_postgres, dsn)
