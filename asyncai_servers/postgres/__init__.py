"""``asyncai-mcp-postgres``: PostgreSQL tables and named queries as watchable MCP resources.

The database pushes (``LISTEN``/``NOTIFY`` from triggers the server installs); the server reads
only what changed, and nothing while nothing changes. Where things are:

- ``config.py``: the file naming what may be read; ``uri.py``: the URIs and what each names.
- ``triggers.py``: the triggers and what their ``NOTIFY`` says; ``listener.py``: hearing it.
- ``rowset.py`` (pure): a table's rows by key, and the changes each read shows.
- ``queries.py``: every statement, composed by the driver; ``db.py``: read-only connections.
- ``sources.py``: one source per watched target; ``server.py``: the MCP handlers, and where a
  subscription (the shared ``SubscriptionRegistry``) starts and stops a source.
  docs/servers/postgres.md is the user's guide.
"""
