"""A PostgreSQL writer in its own process, on its own connection (what any application is).

    python bench/_pg_writer.py DSN

Commands on stdin, one per line, each answered with one line on stdout:

- ``update ID VALUE`` -> ``UPDATE payments SET status = VALUE WHERE id = ID`` in its own
  transaction (autocommit); answers the ``time.monotonic()`` taken just before the statement
  (CLOCK_MONOTONIC is one clock for every process on the machine) and, after a space, the one
  taken once the commit returned;
- ``load RATE SECONDS PART PARTS BEGIN [TABLE]`` -> of the ``RATE * SECONDS`` rows ids 1..N, inserts into
  ``TABLE`` (default ``load``) those with ``id % PARTS == PART``, row N due at BEGIN + (N - 1) / RATE (several writers share a load), each in its own
  transaction, paced so that all the writers together insert RATE per second; answers a JSON
  object mapping each id to the time taken just before its insert.
"""

from __future__ import annotations

import json
import sys
import time

import psycopg
import psycopg.sql


def main(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        print("ready", flush=True)
        for raw in sys.stdin:
            command, *args = raw.split()
            if command == "update":
                t0 = time.monotonic()
                conn.execute("UPDATE payments SET status = %s WHERE id = %s", (args[1], int(args[0])))
                print(repr(t0), repr(time.monotonic()), flush=True)
            elif command == "load":
                rate, seconds, part, parts = float(args[0]), float(args[1]), int(args[2]), int(args[3])
                begin = float(args[4])  # the shared start, time.monotonic()
                table = psycopg.sql.Identifier(args[5] if len(args) > 5 else "load")
                insert = psycopg.sql.SQL("INSERT INTO {} (id, v) VALUES (%s, %s)").format(table)
                starts: dict[int, float] = {}
                for row_id in range(1, round(rate * seconds) + 1):
                    if row_id % parts != part:
                        continue
                    due = begin + (row_id - 1) / rate
                    now = time.monotonic()
                    if due > now:
                        time.sleep(due - now)  # pacing the load: a bench, not a wait on a condition
                    starts[row_id] = time.monotonic()
                    conn.execute(insert, (row_id, row_id))
                print(json.dumps(starts), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
