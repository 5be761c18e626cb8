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

_TAG = re.compile(r"<(\s*/?\s*)(channel)", re.IGNORECASE)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# Invisible format characters (zero-width space, joiners, bidi controls) could hide a tag from
# the pattern above while a renderer ignores them: they go before the tag check, like controls.
_INVISIBLE = re.compile(r"[\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff]")


def neutralize(text: str, cap: int) -> str:
    """Make ``text`` unable to open or close a ``<channel>`` tag or end an attribute; cap its length.

    ``<channel`` / ``</channel`` (any case, any inner spaces) lose their ``<``;
    double quotes become ``&quot;``; control characters become spaces. The cap
    counts code points of the result and marks a cut with ``…``.
    """
    # Controls and invisible characters first: "<\x01/channel" must not slip past the tag check.
    out = _INVISIBLE.sub("", _CONTROL.sub(" ", text))
    out = _TAG.sub(lambda m: "&lt;" + m.group(1) + m.group(2), out)
    out = out.replace('"', "&quot;")
    if len(out) > cap:
        out = out[: cap - 1].rstrip() + "…"
    return out


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
    text = summary.replace("\r\n", " ").replace("\n", " ")
    return Doorbell(
        content=neutralize(text, SUMMARY_CAP),
        meta={k: neutralize(v.replace("\n", " "), META_VALUE_CAP) for k, v in meta.items()},
    )
