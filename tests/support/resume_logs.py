"""A `FakeSource` serving an event log (``kcp://pods``) as the resume tests drive it."""

from __future__ import annotations

from typing import Any

from asyncai_watch.core.events import EVENTS_MIME_TYPE
from asyncai_watch.testing import FakeSource, ListedResource

LOG = "kcp://pods"


def log_body(log_id: str, seqs: range) -> dict[str, Any]:
    return {
        "log_id": log_id,
        "events": [
            {"seq": s, "type": "ADDED", "object": {"metadata": {"name": f"pod-{s}", "uid": f"u{s}"}}}
            for s in seqs
        ],
    }


def log_fake() -> FakeSource:
    fake = FakeSource(
        "kcp", resources=[ListedResource(uri=LOG, name="pods", description="", mime_type=EVENTS_MIME_TYPE)]
    )
    fake.set(LOG, log_body("L1", range(1, 4)), mime_type=EVENTS_MIME_TYPE)
    return fake
