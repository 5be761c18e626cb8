"""kcp reference server: Kubernetes event-log resources over ``kubectl -w``.

Modules: :mod:`.uri` (URI parsing), :mod:`.jsonstream` (incremental concatenated-JSON parser),
:mod:`.state` (seed / dedupe / reconcile, sans-IO), :mod:`.kubectl` (argv, credentials, errors,
API discovery), :mod:`.watcher` (one watcher per URI: seed, watch, reconnect, ring),
:mod:`.server` (the MCP server), :mod:`.__main__` (``asyncai-mcp-kcp`` / ``-readonly``).
"""
