"""kcp reference server: Kubernetes event-log resources over API watches run with ``kubectl get --raw``.

Modules: :mod:`.uri` (URI parsing), :mod:`.jsonstream` (incremental concatenated-JSON parser),
:mod:`.state` (seed / dedupe / reconcile, sans-IO), :mod:`.kubectl` (argv, credentials, errors,
API discovery), :mod:`.watcher` (one watcher per URI: list, watch from the resourceVersion,
resume, re-list on 410, ring),
:mod:`.server` (the MCP server), :mod:`.__main__` (``asyncai-mcp-kcp`` / ``-readonly``).
"""
