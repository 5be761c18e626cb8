"""Untrusted text made inert inside a tag a model reads: a channel push's content, an attribute.

The project's one rendering of untrusted text (controls, bidi controls and line separators
neutralized, XML's specials escaped once), the same a notice's ``<watch-event>`` gets, for a
server that pushes text to a model (the switchboard's doorbells). The rules are in
``asyncai_watch/core/text.py``, where the notice rendering uses them too.
"""

from __future__ import annotations

from asyncai_watch.core.text import REPLACEMENT, escape, neutralize, render, truncate, unescape

__all__ = ["REPLACEMENT", "escape", "neutralize", "render", "truncate", "unescape"]
