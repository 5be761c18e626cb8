"""A `Watch` made the way the runtime makes one, for the tests of notices built from its lines."""

from __future__ import annotations

import json
from typing import Any

import attrs

from asyncai_watch import Limits
from asyncai_watch.core.deliver import Delivery
from asyncai_watch.core.extract import Body, Extraction

LIMITS = Limits(debounce_quiet=1.0, debounce_max_wait=10.0)


@attrs.define
class Watch:
    extraction: Extraction
    delivery: Delivery

    def read(self, value: Any, now: float, mime_type: str = "application/json") -> None:
        text = value if isinstance(value, str) else json.dumps(value)
        lines, _ = self.delivery.lines(self.extraction.read(Body.of(text, mime_type)))
        self.delivery.add(lines, now)


def watch(first: Any, mime_type: str = "application/json") -> Watch:
    x = Extraction("file:///config.json", LIMITS)
    x.baseline(Body.of(first if isinstance(first, str) else json.dumps(first), mime_type))
    return Watch(x, Delivery("cfg", "file:///config.json", LIMITS))
