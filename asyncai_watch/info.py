"""What :class:`~asyncai_watch.WatchManager` reports: frozen values, no dicts.

The code-mode layer turns them into the design's dict shapes (:mod:`asyncai_watch.codemode`).
"""

from __future__ import annotations

import re
from typing import Final, Literal

import attrs

from asyncai_watch.core.events import Shape
from asyncai_watch.core.routing import ServerListing

__all__ = ["ResourceInfo", "WatchInfo", "WatchStatus", "resource_example", "resource_infos"]

WatchStatus = Literal["running", "failed", "restore_failed"]

_EXAMPLE_RE: Final = re.compile(r"Example:\s*(.+?)\s*$", re.MULTILINE)


def resource_example(description: str) -> str | None:
    """The text of a description's last ``Example:`` line (the code-mode call), or None."""
    found = _EXAMPLE_RE.findall(description or "")
    return found[-1] if found else None


@attrs.frozen(kw_only=True)
class WatchInfo:
    """One watch as :meth:`~asyncai_watch.WatchManager.watch_list` reports it."""

    name: str
    uri: str
    status: WatchStatus
    shape: Shape | None = None
    """``"state"`` or ``"event-log"``; ``None`` for a watch that never started (``restore_failed``)."""
    server: str | None = None
    watchable_by_trial: bool = False
    """The server does not advertise ``resources.subscribe``, but the subscription it was tried
    with once was accepted (the capability fallback, docs/existing-servers.md)."""
    protocol: str | None = None
    """The MCP version its server speaks: ``2026-07-28`` watches ride ``subscriptions/listen``,
    older ones ``resources/subscribe`` (``None`` for a watch that never started)."""
    on_event: str | None = None
    """The filter source, if any."""
    events: int = 0
    """Events that reached the filter or the default line."""
    notices: int = 0
    """Notices sent."""
    error: str | None = None
    """Why a ``failed`` or ``restore_failed`` watch is not running."""


@attrs.frozen(kw_only=True)
class ResourceInfo:
    """One watchable URI or template, as :meth:`~asyncai_watch.WatchManager.list_resources` reports it."""

    uri: str
    """The URI, or the RFC 6570 template when :attr:`template` is true."""
    template: bool
    server: str
    name: str = ""
    description: str = ""
    mime_type: str | None = None
    watchable: bool = False
    """A watch can work on it: its server advertises ``resources.subscribe``, or accepted the
    subscription it was tried with (:attr:`watchable_by_trial`)."""
    watchable_by_trial: bool = False
    """The server does not advertise ``resources.subscribe``, but the subscription it was tried
    with once was accepted (the capability fallback, docs/existing-servers.md)."""
    protocol: str = ""
    """The MCP version its server speaks: ``2026-07-28`` watches ride ``subscriptions/listen``,
    older ones ``resources/subscribe``."""
    never_notified: bool = False
    """Its server subscribes but says no change of it was announced yet (a server whose tools
    never notify would look just like this: docs/existing-servers.md)."""

    @property
    def example(self) -> str | None:
        """The description's ``Example:`` line (a code-mode call), if any."""
        return resource_example(self.description)


def resource_infos(catalog: ServerListing) -> list[ResourceInfo]:
    """One server's listing as :class:`ResourceInfo` values: its resources, then its templates."""
    fixed = [
        ResourceInfo(
            uri=r.uri,
            template=False,
            server=catalog.name,
            name=r.name,
            description=r.description,
            mime_type=r.mime_type,
            watchable=catalog.subscribable,
            watchable_by_trial=catalog.by_trial,
            protocol=catalog.protocol,
            never_notified=r.never_notified,
        )
        for r in catalog.resources
    ]
    return fixed + [
        ResourceInfo(
            uri=t.uri_template,
            template=True,
            server=catalog.name,
            name=t.name,
            description=t.description,
            mime_type=t.mime_type,
            watchable=catalog.subscribable,
            watchable_by_trial=catalog.by_trial,
            protocol=catalog.protocol,
            never_notified=t.never_notified,
        )
        for t in catalog.templates
    ]
