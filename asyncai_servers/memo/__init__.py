"""asyncai-mcp-simple: the memo reference server (a JSON-object state resource).

``memo://notes`` is watchable; ``memo_set`` / ``memo_delete`` change it and
notify listeners; ``memo_get`` is read-only. See ``docs/servers/memo.md``.
"""

from __future__ import annotations

from asyncai_servers.memo.server import MIME_TYPE, NOTE_TEMPLATE, NOTES_URI, MemoState, build_server

__all__ = ["MIME_TYPE", "NOTES_URI", "NOTE_TEMPLATE", "MemoState", "build_server"]
