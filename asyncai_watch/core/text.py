"""Untrusted text rendered into a tag: one neutralization, one escape, applied once.

Everything a notice or a doorbell carries comes from outside the process
(object names, file contents, todo summaries), and it ends up inside a
wrapper tag a model or a terminal reads: ``<watch-event>``, ``<channel>``,
``<watch-restore>``. :func:`render` makes such text inert there:

1. :func:`neutralize` replaces every character that can steer a reader
   without being seen: Unicode ``Cc`` (C0 incl. tab, DEL, C1 such as U+009B
   CSI), ``Zl``/``Zp`` (U+2028, U+2029), the bidi controls (U+061C, U+200E,
   U+200F, U+202A-U+202E, U+2066-U+2069) and lone surrogates. Whitespace
   controls (tab, CR, LF, VT, FF, NEL, U+2028, U+2029) become a space; the
   rest become U+FFFD, so a reader sees that something was there. With
   ``multiline=True`` a line feed (or CRLF) stays a line break: a notice body
   has one line per event by design, while attribute values and a doorbell's
   content are single-line.
2. :func:`escape` XML-escapes ``&``, ``<``, ``>`` and ``"`` *once*: an ``&``
   that already starts one of XML's five predefined entities (``&amp;``,
   ``&lt;``, ``&gt;``, ``&quot;``, ``&apos;``) is left alone, so text that was
   neutralized upstream (a doorbell's content) is not shown as ``&amp;lt;``.
   No raw ``<`` or ``>`` survives, so nothing can close a wrapper or forge one.

Both steps are idempotent, and so is :func:`render`.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = [
    "REPLACEMENT",
    "escape",
    "neutralize",
    "render",
    "truncate",
    "unescape",
]

REPLACEMENT: Final = "\ufffd"
"""What a non-whitespace control, bidi control or lone surrogate becomes."""

_BIDI: Final = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
# Cc is exactly U+0000-U+001F and U+007F-U+009F; Zl is U+2028 and Zp U+2029 (the Unicode
# database has no other members), so the classes below are the whole categories.
_SPACE_LIKE: Final = "\t\n\x0b\x0c\r\x85\u2028\u2029"
_UNSAFE: Final = re.compile(f"\r\n|[\x00-\x1f\x7f-\x9f\u2028\u2029{_BIDI}\ud800-\udfff]")
_ENTITY_OR_SPECIAL: Final = re.compile(r"&(?!(?:amp|lt|gt|quot|apos);)|[<>\"]")
_ESCAPES: Final = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}
_ENTITY: Final = re.compile(r"&(amp|lt|gt|quot|apos);")
_UNESCAPES: Final = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}
# A cut must not split an entity: "&qu…" would be re-escaped as "&amp;qu…".
_PARTIAL_ENTITY: Final = re.compile(r"&[a-z]{0,4}$")


def neutralize(text: str, *, multiline: bool = False) -> str:
    """Replace controls, line/paragraph separators, bidi controls and lone surrogates.

    Whitespace controls become a space and the others U+FFFD; with ``multiline`` a
    line feed (``\\n`` or ``\\r\\n``) stays ``\\n``. Idempotent.
    """

    def repl(m: re.Match[str]) -> str:
        ch = m.group()
        if ch in ("\n", "\r\n"):
            return "\n" if multiline else " "
        return " " if ch in _SPACE_LIKE else REPLACEMENT

    return _UNSAFE.sub(repl, text)


def escape(text: str) -> str:
    """XML-escape ``&``, ``<``, ``>``, ``"`` once: an existing predefined entity is kept. Idempotent."""
    return _ENTITY_OR_SPECIAL.sub(lambda m: _ESCAPES[m.group()[0]], text)


def unescape(text: str) -> str:
    """Decode XML's five predefined entities (what :func:`escape` produces), nothing else."""
    return _ENTITY.sub(lambda m: _UNESCAPES[m.group(1)], text)


def render(text: str, *, multiline: bool = False) -> str:
    """:func:`neutralize` then :func:`escape`: ``text`` made inert inside a tag or an attribute value."""
    return escape(neutralize(text, multiline=multiline))


def truncate(rendered: str, cap: int) -> str:
    """Cap rendered text at ``cap`` code points, marking a cut with ``…`` and never splitting an entity."""
    if len(rendered) <= cap:
        return rendered
    cut = _PARTIAL_ENTITY.sub("", rendered[: max(cap - 1, 0)])
    return cut.rstrip() + "…"
