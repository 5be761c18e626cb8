"""What a background source hands the agent: a Notice."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Final

import attrs

__all__ = ["SOURCE_CHANNEL", "SOURCE_RESTORE", "SOURCE_WATCH", "Notice"]

SOURCE_WATCH: Final = "watch"
"""A watch's batched lines; ``meta`` has ``name`` and ``uri``."""
SOURCE_RESTORE: Final = "watch.restore"
"""The one notice listing watches restored from ``--watch-state``."""
SOURCE_CHANNEL: Final = "channel"
"""A ``notifications/claude/channel`` doorbell; ``meta`` has ``server`` plus the doorbell's meta."""


@attrs.frozen
class Notice:
    """A message for the agent from outside the conversation.

    The manager only produces these; it never calls the model. The agent's
    orchestrator renders them (e.g. as ``<watch-event>``) and runs a turn.
    """

    WATCH: ClassVar[str] = SOURCE_WATCH
    RESTORE: ClassVar[str] = SOURCE_RESTORE
    CHANNEL: ClassVar[str] = SOURCE_CHANNEL

    source: str
    """Who sent it: :attr:`WATCH`, :attr:`RESTORE` or :attr:`CHANNEL` (a doorbell), which decides
    how :func:`~asyncai_watch.render_notice` frames it."""
    text: str
    meta: Mapping[str, str] = attrs.field(factory=dict, hash=False, kw_only=True)
