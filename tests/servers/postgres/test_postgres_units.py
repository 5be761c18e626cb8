"""The PostgreSQL server's pure parts: the row set, the config, the URIs, the payloads, the SQL.

No database here (tests/servers/postgres/test_postgres_server.py runs the real one).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp.shared.uri_template import UriTemplate
from psycopg import sql

from asyncai_servers.postgres.config import ConfigError, TableName, load_config, parse_config
from asyncai_servers.postgres.listener import DdlChanged, RowsChanged, decode
from asyncai_servers.postgres.queries import TableMeta, load_rows, query_rows, reread_rows, shared_reread
from asyncai_servers.postgres.rowset import Number, OverCap, RowSet, key_text, query_body
from asyncai_servers.postgres.uri import (
    EVENTS_SCHEME,
    STATE_SCHEME,
    QueryTarget,
    TableTarget,
    UriError,
    parse_uri,
    table_template,
)
from tests.support import ROOT

# -- the row set ---------------------------------------------------------------------------------

keys = st.integers(min_value=1, max_value=8)
values = st.sampled_from(["a", "b", "c"])
tables = st.dictionaries(keys, values, max_size=8)


def row(key: int, value: str) -> tuple[str, str]:
    return json.dumps([key]), json.dumps({"id": key, "v": value}, separators=(",", ":"))


def apply(rows: dict[str, str], changes: list[Any]) -> dict[str, str]:
    out = dict(rows)
    for change in changes:
        if change.type == "DELETED":
            assert out.pop(change.key) == change.row
        elif change.type == "ADDED":
            assert change.key not in out
            out[change.key] = change.row
        else:
            assert out[change.key] == change.old != change.row
            out[change.key] = change.row
    return out


@given(st.lists(st.tuples(st.booleans(), tables), max_size=12))
def test_replace_and_update_report_exactly_the_difference(steps: list[tuple[bool, dict[int, str]]]) -> None:
    """Whole reads and key re-reads in any order: the changes turn the old rows into the new ones,
    and the body is always the current rows."""
    rows = RowSet(max_rows=100)
    truth: dict[int, str] = {}
    for whole, table in steps:
        before = dict(rows.rows)
        if whole:
            changes = rows.replace(row(k, v) for k, v in sorted(table.items()))
        else:
            # A re-read of every key either side knows (the rest of the table unchanged).
            asked = sorted(set(truth) | set(table))
            changes = rows.update(
                (json.dumps([k]), row(k, table[k])[1] if k in table else None) for k in asked
            )
        truth = table
        assert apply(before, changes) == rows.rows
        assert {int(k): json.loads(r)["v"] for k, r in rows.rows.items()} == truth
        assert json.loads(rows.body()) == {str(k): {"id": k, "v": v} for k, v in truth.items()}
        assert not any(c.type == "MODIFIED" and c.old == c.row for c in changes)


def test_a_read_over_the_cap_changes_nothing() -> None:
    rows = RowSet(max_rows=2)
    rows.replace([row(1, "a"), row(2, "b")])
    with pytest.raises(OverCap) as caught:
        rows.replace([row(1, "a"), row(2, "b"), row(3, "c")])
    assert (caught.value.rows, caught.value.max_rows) == (3, 2)
    with pytest.raises(OverCap):
        rows.update([row(3, "c")])
    assert rows.rows == dict([("1", row(1, "a")[1]), ("2", row(2, "b")[1])])
    # A delete and an insert in one re-read stay within the cap.
    changes = rows.update([(json.dumps([1]), None), row(3, "c")])
    assert [(c.type, c.key) for c in changes] == [("DELETED", "1"), ("ADDED", "3")]


def test_keys_and_events_keep_the_database_text() -> None:
    assert key_text("[42]") == "42"
    assert key_text('["abc"]') == "abc"
    assert key_text('[7, "eu"]') == '[7,"eu"]'
    assert key_text("[12345678901234567890123]") == "12345678901234567890123"
    assert key_text("[1.50]") == "1.50"  # the value as text: no float in between
    assert key_text("[0.1000000000000000001]") != key_text("[0.1000000000000000002]")
    assert key_text('[1.50, "eu", 1e+20]') == '[1.50,"eu",1e+20]'
    rows = RowSet(max_rows=10)
    rows.replace([("[1]", '{"id":1,"amount":1.50}')])
    (change,) = rows.update([("[1]", '{"id":1,"amount":2.50}')])
    event = change.event()
    assert event["type"] == "MODIFIED"
    assert bytes(event["object"]) == b'{"id":1,"amount":2.50}'  # numeric digits kept, never re-encoded
    assert bytes(event["old"]) == b'{"id":1,"amount":1.50}'
    assert rows.body() == '{"1":{"id":1,"amount":2.50}}'


def test_query_body_is_a_list_or_keyed() -> None:
    assert query_body([]) == "[]"
    assert query_body([(None, '{"a":1}'), (None, '{"a":2}')]) == '[{"a":1},{"a":2}]'
    keyed = query_body([("[1]", '{"id":1}'), ('["x"]', '{"id":"x"}'), ("[1]", '{"id":1,"dup":true}')])
    assert json.loads(keyed) == {"1": {"id": 1}, "x": {"id": "x"}, "1#2": {"id": 1, "dup": True}}


# -- the config ----------------------------------------------------------------------------------

GOOD = """
[defaults]
max_rows = 50

[[table]]
name = "payments"
where = ["status"]

[[table]]
schema = "ops"
name = "Job Queue"
columns = ["id", "state"]
max_rows = 7

[[query]]
name = "failed"
sql = "SELECT id FROM payments WHERE status = 'failed';"
depends_on = ["payments", "ops.Job Queue"]
key = ["id"]
"""


def test_config_toml_and_json(tmp_path: Path) -> None:
    path = tmp_path / "pg.toml"
    path.write_text(GOOD)
    config = load_config(path)
    payments, jobs = config.tables
    assert (payments.table, payments.where, payments.columns, payments.max_rows) == (
        TableName("public", "payments"),
        ("status",),
        None,
        50,
    )
    assert (jobs.table, jobs.columns, jobs.max_rows) == (TableName("ops", "Job Queue"), ("id", "state"), 7)
    (query,) = config.queries
    assert query.sql == "SELECT id FROM payments WHERE status = 'failed'"  # the ';' would break the subquery
    assert query.depends_on == (TableName("public", "payments"), TableName("ops", "Job Queue"))
    assert config.trigger_tables() == [TableName("ops", "Job Queue"), TableName("public", "payments")]
    as_json = tmp_path / "pg.json"
    as_json.write_text(json.dumps({"table": [{"name": "payments"}]}))
    assert load_config(as_json).tables[0].max_rows == 1000


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"table": [{"name": "t", "wher": ["a"]}]}, "unknown key(s) ['wher']; accepted: schema, name, where"),
        ({"table": [{"schema": "x"}]}, "[[table]] #1: name (the table's name) is required"),
        ({"table": [{"name": "t", "max_rows": 0}]}, "max_rows must be an integer >= 1, got 0"),
        ({"table": [{"name": "t", "where": "status"}]}, "where must be a non-empty list of column names"),
        ({"table": [{"name": "t"}, {"schema": "public", "name": "t"}]}, "table 'public.t' is listed twice"),
        ({"query": [{"name": "q", "sql": "SELECT 1"}]}, "depends_on must list the tables"),
        ({"query": [{"name": "a b", "sql": "SELECT 1", "depends_on": ["t"]}]}, "name must be letters"),
        ({"tables": []}, "unknown section(s) ['tables']"),
        ({}, "names no [[table]] and no [[query]]"),
        ({"table": [{"name": "x" * 64}]}, "must be a PostgreSQL name (1-63 bytes)"),
    ],
)
def test_config_errors_say_what_is_accepted(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(raw, source="pg.toml")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_config_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read config .*nope.toml"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[[table]\n")
    with pytest.raises(ConfigError, match=r"is not valid TOML"):
        load_config(bad)


# -- URIs ----------------------------------------------------------------------------------------

CONFIG = parse_config(
    {
        "table": [
            {"name": "payments", "where": ["status", "customer"]},
            {"schema": "ops", "name": "Job Queue"},
        ],
        "query": [{"name": "failed", "sql": "SELECT 1", "depends_on": ["payments"]}],
    }
)


def test_uris_name_targets_and_spellings_share_one() -> None:
    state = parse_uri("pg://public/payments", CONFIG)
    assert isinstance(state.target, TableTarget)
    assert (state.target.table, state.target.filter, state.events) == (
        TableName("public", "payments"),
        (),
        False,
    )
    events = parse_uri("pg-events://public/payments", CONFIG)
    assert events.events
    assert events.target == state.target  # one source serves both
    a = parse_uri("pg://public/payments?status=failed&customer=caf%C3%A9", CONFIG)
    b = parse_uri("pg://public/payments?customer=caf%c3%a9&status=failed", CONFIG)
    assert a == b
    assert isinstance(a.target, TableTarget)
    assert a.target.filter == (("customer", "café"), ("status", "failed"))
    assert parse_uri("pg://ops/Job%20Queue", CONFIG).target.table == TableName("ops", "Job Queue")  # type: ignore[union-attr]
    query = parse_uri("pg-query://failed", CONFIG)
    assert isinstance(query.target, QueryTarget)
    assert query.target.spec.name == "failed"


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        (
            "pg://public/orders",
            "table public.orders is not in the config; the config names: public.payments, ops.Job Queue",
        ),
        (
            "pg://public/payments?amount=1",
            "'amount' is not a filter column of public.payments; allowed: status, customer",
        ),
        ("pg://ops/Job%20Queue?x=1", "allowed: none (the config's where = [...] lists them)"),
        ("pg://public/payments?status=a&status=b", "'status' is given twice"),
        ("pg://public/payments?status", "a filter is COLUMN=VALUE"),
        ("pg://public", "expected pg://SCHEMA/TABLE"),
        ("pg-query://nope", "no such named query; the config names: failed"),
        (
            "memo://notes",
            "this server serves pg://SCHEMA/TABLE (state), pg-events://SCHEMA/TABLE (event log)",
        ),
    ],
)
def test_uri_errors_say_what_is_served(uri: str, message: str) -> None:
    with pytest.raises(UriError) as caught:
        parse_uri(uri, CONFIG)
    assert message in str(caught.value)


def test_templates_route_the_uris_the_server_parses() -> None:
    spec = CONFIG.tables[0]
    for scheme in (STATE_SCHEME, EVENTS_SCHEME):
        template = UriTemplate.parse(table_template(scheme, spec))
        uri = template.expand({"status": "in progress"})
        assert template.match(uri) is not None
        parsed = parse_uri(uri, CONFIG)
        assert parsed.target.filter == (("status", "in progress"),)  # type: ignore[union-attr]


# -- NOTIFY payloads -----------------------------------------------------------------------------


def test_payloads_decode() -> None:
    assert decode('{"s" : "public", "t" : "t", "op" : "UPDATE", "k" : [[1], [3]]}') == RowsChanged(
        TableName("public", "t"), "UPDATE", ((1,), (3,))
    )
    assert decode('{"s":"public","t":"t","op":"TRUNCATE"}') == RowsChanged(
        TableName("public", "t"), "TRUNCATE", None
    )
    assert decode('{"ddl":"DROP TABLE","oids":[16386]}') == DdlChanged("DROP TABLE", frozenset({16386}))
    assert decode('{"ddl":"GRANT"}') == DdlChanged("GRANT", None)
    # What jsonb_agg makes of an oid (the event triggers of earlier installs send these).
    assert decode('{"ddl":"ALTER TABLE","oids":["16768"]}') == DdlChanged("ALTER TABLE", frozenset({16768}))
    assert decode("not json") is None
    assert decode('{"op":"INSERT"}') is None


# -- SQL -----------------------------------------------------------------------------------------

HOSTILE = parse_config(
    {"table": [{"schema": 'x"; DROP TABLE y; --', "name": "t t", "where": ['c"c'], "columns": ["id", 'c"c']}]}
)
META = TableMeta(
    name=HOSTILE.tables[0].table,
    oid=1,
    kind="r",
    primary_key=("id",),
    columns=("id", 'c"c'),
    triggers=frozenset(),
    readable=True,
    role="r",
)


def text(query: sql.Composable) -> str:
    return query.as_string(None)


def test_names_are_quoted_by_the_driver_and_values_are_parameters() -> None:
    target = TableTarget(HOSTILE.tables[0], (('c"c', "'; DELETE FROM z; --"),))
    query, params = load_rows(META, target)
    rendered = text(query)
    assert '"x""; DROP TABLE y; --"."t t"' in rendered
    assert '"t"."c""c" = "f"."c""c"' in rendered
    assert "DELETE" not in rendered  # the value is a parameter
    assert [p.obj for p in params] == [{'c"c': "'; DELETE FROM z; --"}] * 2  # type: ignore[attr-defined]
    assert rendered.endswith("LIMIT 1001)")
    query, params = reread_rows(META, target, [(1,), (2,)])
    assert params[0].obj == [{"id": 1}, {"id": 2}]  # type: ignore[attr-defined]
    # The shared re-read: no filter in the SQL, the where column's match computed for memory.
    query, params = shared_reread(META, HOSTILE.tables[0], [(Number("1.50"),)])
    rendered = text(query)
    assert '"x""; DROP TABLE y; --"."t t"' in rendered
    assert 'trim_scale("t"."c""c"::text::numeric)' in rendered
    assert "DELETE" not in rendered
    assert params[0].dumps(params[0].obj) == '[{"id":1.50}]'  # type: ignore[attr-defined]  # exact
    named = parse_config(
        {"query": [{"name": "q", "sql": "SELECT 1 AS id", "depends_on": ["t"], "key": ["id"]}]}
    )
    query, params = query_rows(named.queries[0])
    assert (
        text(query)
        == 'SELECT json_build_array("q"."id")::text, row_to_json(q.*)::text FROM (SELECT 1 AS id\n) AS q LIMIT 1001'
    )
    assert params == []


def test_the_docs_config_example_is_a_valid_config() -> None:
    page = (ROOT / "docs" / "servers" / "postgres.md").read_text()
    example = page.split("```toml\n", 1)[1].split("```", 1)[0]
    config = parse_config(tomllib.loads(example), source="docs")
    assert [str(t.table) for t in config.tables] == ["public.payments"]
    assert config.tables[0].where == ("status", "customer_id")
    assert [q.name for q in config.queries] == ["failed_today"]
    assert config.queries[0].key == ("id",)


# -- the durable change log's pure parts (capture.py) ------------------------------------------------


def test_retention_flags_parse_and_say_what_is_accepted() -> None:
    from datetime import timedelta

    from asyncai_servers.postgres.capture import Retention, parse_age, parse_size

    assert parse_age("7d") == timedelta(days=7)
    assert parse_age("90") == timedelta(seconds=90)
    assert parse_size("64kB") == 64 << 10
    assert parse_size("2GB") == 2 << 30
    assert (
        Retention(timedelta(hours=12), 16 << 10).text() == "changes of the last 12h, at most 16kB per table"
    )
    with pytest.raises(
        ValueError, match=r"--retain-age expects a positive number with s, m, h or d .* got '0d'"
    ):
        parse_age("0d")
    with pytest.raises(ValueError, match=r"--retain-size expects a size with B, kB, MB or GB .* got '1 TB'"):
        parse_size("1 TB")


def test_a_log_page_keeps_the_database_text_and_says_when_more_follows() -> None:
    from asyncai_servers.postgres.capture import log_body

    head = ("L1", 3, 9, 604800.0, 1 << 20, None, None, None, None, None, None)
    at = '"2026-12-04T21:00:00+00:00"'
    rows = [
        head,
        (None,) * 5 + (4, "700", "I", None, '{"id":1,"amount":1.50,"secret":"s"}', at),
        (None,) * 5
        + (5, "701", "U", '{"id":1,"amount":1.50,"secret":"s"}', '{"id":1,"amount":2.50,"secret":"t"}', at),
        (None,) * 5 + (6, "702", "D", '{"id":1,"amount":2.50,"secret":"t"}', None, at),
        (None,) * 5 + (7, "703", "T", None, None, at),
    ]
    page = log_body(rows, TableName("public", "pay"), ("id",), ("id", "amount"))
    assert page.more  # seq 7 of 9
    assert page.text.startswith(
        '{"log_id":"L1","last_seq":9,"first_seq":3,"retention":"changes of the last 7d'
    )
    assert '"object":{"id":1,"amount":1.50}' in page.text  # the database's digits, the config's columns
    body = json.loads(page.text)
    assert [(e["seq"], e["type"], e.get("key"), e["txid"]) for e in body["events"]] == [
        (4, "ADDED", "1", 700),
        (5, "MODIFIED", "1", 701),
        (6, "DELETED", "1", 702),
        (7, "TRUNCATED", None, 703),
    ]
    assert body["events"][1]["old"] == {"id": 1, "amount": 1.5}
    assert body["events"][3]["object"] == {"table": "public.pay"}
    assert not log_body([head], TableName("public", "pay"), ("id",), None).more  # nothing after the position


def test_a_bad_retention_flag_is_refused_saying_what_is_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from asyncai_servers.postgres.__main__ import main

    config = tmp_path / "pg.toml"
    config.write_text('[[table]]\nname = "t"\n')
    with pytest.raises(SystemExit) as exited:
        main(["--config", str(config), "--install-triggers", "--retain-size", "1TB"])
    assert exited.value.code == 2
    assert "--retain-size expects a size with B, kB, MB or GB (e.g. 256MB), at least 1 byte, got '1TB'" in (
        capsys.readouterr().err
    )
