"""What a server lists: its fixed resources and its resource templates."""

from __future__ import annotations

import attrs

__all__ = ["ListedResource", "ListedTemplate"]


@attrs.frozen(kw_only=True)
class ListedResource:
    """One entry of a server's ``resources/list``."""

    uri: str
    name: str = ""
    description: str = ""
    mime_type: str | None = None
    never_notified: bool = False
    """The server says (``_meta["io.github.asyncai-watch/notified"]: false``, as servers made with
    ``asyncai_watch.server.kit`` do) that no change of it was announced since it started."""


@attrs.frozen(kw_only=True)
class ListedTemplate:
    """One entry of a server's ``resources/templates/list`` (an RFC 6570 template)."""

    uri_template: str
    name: str = ""
    description: str = ""
    mime_type: str | None = None
    never_notified: bool = False
    """The server says (``_meta["io.github.asyncai-watch/notified"]: false``, as servers made with
    ``asyncai_watch.server.kit`` do) that no change of it was announced since it started."""
