"""The design's dict shapes for model-written code, from the manager's typed values.

One cattrs converter holds every hook, so the shapes the model sees are documented by code
(docs/watch-manager.md, "Code mode"):

- ``list_resources()`` -> ``[{"uri", "template", "name", "description", "example",
  "mime_type", "server", "subscribable", "protocol"}]``, plus ``"watchable_by_trial": true``
  where the server does not advertise ``resources.subscribe`` but accepted a subscription tried once;
- ``watch_start(...)`` -> ``{"name", "uri", "shape"}``;
- ``watch_list()`` -> ``[{"name", "uri", "shape", "events", "notices", "protocol"}]``, plus
  ``"watchable_by_trial": true`` as above, and
  ``"failed": true`` or ``"restore_failed": true`` with ``"error"`` for a watch that is not running.

``protocol`` is the MCP version the server speaks, which says how its watches ride:
``2026-07-28`` on ``subscriptions/listen``, older versions on ``resources/subscribe``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import cattrs

from asyncai_watch.info import ResourceInfo, WatchInfo

__all__ = ["converter", "resource_dicts", "started_dict", "watch_dicts"]

converter: Final = cattrs.Converter()


def _resource(info: ResourceInfo) -> dict[str, Any]:
    return (
        {
            "uri": info.uri,
            "template": info.template,
            "name": info.name,
            "description": info.description,
            "example": info.example,
            "mime_type": info.mime_type,
            "server": info.server,
            "subscribable": info.watchable,
            "protocol": info.protocol,
        }
        | ({"watchable_by_trial": True} if info.watchable_by_trial else {})
        | ({"never_notified": True} if info.never_notified and info.watchable else {})
    )


def _watch(info: WatchInfo) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": info.name,
        "uri": info.uri,
        "shape": info.shape,
        "events": info.events,
        "notices": info.notices,
    }
    if info.protocol is not None:
        out["protocol"] = info.protocol
    if info.watchable_by_trial:
        out["watchable_by_trial"] = True
    if info.status != "running":
        out[info.status] = True
        out["error"] = info.error
    return out


converter.register_unstructure_hook(ResourceInfo, _resource)
converter.register_unstructure_hook(WatchInfo, _watch)


def resource_dicts(infos: Sequence[ResourceInfo]) -> list[dict[str, Any]]:
    return [converter.unstructure(info) for info in infos]


def watch_dicts(infos: Sequence[WatchInfo]) -> list[dict[str, Any]]:
    return [converter.unstructure(info) for info in infos]


def started_dict(info: WatchInfo) -> dict[str, Any]:
    """``watch_start``'s answer: only what the call decided (``events`` and the like come later)."""
    return {"name": info.name, "uri": info.uri, "shape": info.shape}
