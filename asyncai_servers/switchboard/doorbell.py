"""The doorbell: a ``notifications/claude/channel`` that names a todo and carries nothing to act on.

Pure functions. A doorbell has ``content`` (the capped, neutralized summary)
and ``meta`` with exactly ``todo_id``, ``queue``, ``kind``, ``source``: never
the lease, never the payload, so the receiver has to claim through the ledger.
Claude Code renders it as ``<channel source=".." todo_id=".." ...>content</channel>``
and silently drops meta keys that are not identifiers, so keys are checked here.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from typing import Any, Final

import attrs

from asyncai_watch.server.text import render, truncate

__all__ = [
    "CHANNEL_CAPABILITY",
    "CHANNEL_METHOD",
    "META_KEY_RE",
    "SUMMARY_CAP",
    "Doorbell",
    "make_doorbell",
    "neutralize",
]

CHANNEL_METHOD: Final = "notifications/claude/channel"
CHANNEL_CAPABILITY: Final = "claude/channel"
SUMMARY_CAP: Final = 200
META_VALUE_CAP: Final = 128
META_KEY_RE: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DOORBELL_KEYS: Final = ("todo_id", "queue", "kind", "source")


def neutralize(text: str, cap: int) -> str:
    """Make ``text`` inert inside ``<channel>`` content or an attribute value; cap its length.

    The project's one rendering of untrusted text (:func:`asyncai_watch.core.text.render`,
    single-line): controls, U+2028/U+2029 and bidi controls replaced, ``& < > "`` escaped
    once. The cap counts code points of the result, marks a cut with ``…`` and never
    splits an entity.
    """
    return truncate(render(text), cap)


@attrs.frozen(kw_only=True)
class Doorbell:
    content: str
    meta: Mapping[str, str]

    def params(self) -> dict[str, Any]:
        return {"content": self.content, "meta": dict(self.meta)}

    @functools.cached_property
    def params_json(self) -> str:
        """:meth:`params` as compact JSON, encoded once: a fan-out sends it to every session."""
        return json.dumps(self.params(), ensure_ascii=False, separators=(",", ":"))


def make_doorbell(*, todo_id: str, queue: str, kind: str, source: str, summary: str) -> Doorbell:
    """Build the doorbell for one todo; values are neutralized, keys are checked identifiers."""
    meta = {"todo_id": todo_id, "queue": queue, "kind": kind, "source": source}
    for key in meta:
        if not META_KEY_RE.match(key):  # a receiver would drop it silently: refuse instead
            raise ValueError(f"doorbell meta key {key!r} is not an identifier ([A-Za-z_][A-Za-z0-9_]*)")
    return Doorbell(
        content=neutralize(summary, SUMMARY_CAP),
        meta={k: neutralize(v, META_VALUE_CAP) for k, v in meta.items()},
    )
