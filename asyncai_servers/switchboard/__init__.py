"""switchboard: a durable todo queue over MCP whose channel notifications are only doorbells.

Where things are: the ledger interface (:mod:`.ledger`) and its backends
(:mod:`.ledger_sqlite`, :mod:`.ledger_pg` with its connection pool :mod:`.pg_pool`
and schema versions :mod:`.pg_schema`); the verbs, event log and lease timer
(:mod:`.core`); the doorbell shape and neutralizing (:mod:`.doorbell`); the
bounded fan-out (:mod:`.hub`); the MCP server and bearer auth (:mod:`.server`);
credentials (:mod:`.config`).
"""
