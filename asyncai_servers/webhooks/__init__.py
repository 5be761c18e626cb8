"""``asyncai-mcp-webhooks``: webhook deliveries (GitHub, Stripe, Standard Webhooks, signed HMAC)
as watchable MCP resources, verified, stored once and pushed as they arrive.

Where things are:

- ``config.py``: the sources and their secrets; ``uri.py``: the URIs and what each names.
- ``verify.py`` (pure): each source's signature scheme; ``fields.py`` (pure): the fields a URI
  filters on and the object a state resource follows.
- ``store.py``: the SQLite file (exactly once, durable, numbered logs, retention).
- ``receiver.py``: the ``POST /hooks/SOURCE`` endpoint; ``server.py``: the MCP handlers and
  where a delivery becomes a notification. docs/servers/webhooks.md is the user's guide.
"""
