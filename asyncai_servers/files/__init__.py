"""The files reference server (``asyncai-mcp-files ROOT...``).

- ``file://{+path}``: a file's content as a state resource (JSON parsed for ``*.json``).
- ``dir-events://{+path}{?recursive,glob,exclude}``: a directory's changes as an event log.

Change source: inotify, its descriptor waited on by the event loop (:mod:`.change_source`), never polling.
Path safety: :mod:`.paths`. Reading without torn JSON: :mod:`.content`.
Directory events: :mod:`.dirlog`. URIs: :mod:`.uri`. The watchers: :mod:`.watchers`. The MCP server,
which owns them: :class:`.server.FilesServer`.
"""

# Nothing is imported here, so ``python -m asyncai_servers.files`` can reject bad
# arguments before the MCP SDK loads (seconds on a busy machine).
