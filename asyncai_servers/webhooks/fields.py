"""What a verified delivery says, in the few fields a URI filters on. Pure.

The fields (each a string, absent when the payload has no such thing):

- every source: ``action`` (GitHub's ``action``; the part of a Stripe or Standard Webhooks type
  after its last dot is not split off: filter those by event name in the URI path);
- GitHub: ``repository`` (``owner/name``), ``sender`` (login), ``branch`` (``workflow_run``,
  ``workflow_job``, ``check_run``, ``check_suite``: the head branch; ``pull_request`` and its
  reviews: the head ref; ``push``: the branch of ``refs/heads/...``), ``conclusion`` and
  ``status`` (runs, jobs, checks), ``workflow`` (a run's or job's workflow name);
- Stripe: ``object`` (``data.object.object``, e.g. ``invoice``), ``customer``, ``livemode``;
- Standard Webhooks and hmac: none beyond ``action`` when the payload has one.

Beside them, for a notice to show: ``id`` (the object's, below) and ``url`` (its ``html_url``).

A source's *object*, where it has one, is what a state resource follows: a GitHub workflow run,
job, check run or check suite (by its ``id``), a pull request (by ``number``, prefixed by the
repository), a Stripe object (``data.object.id``), a Standard Webhooks payload's ``data.id``.
"""

from __future__ import annotations

from typing import Any, Final

import attrs

__all__ = ["FILTER_FIELDS", "Described", "describe"]

FILTER_FIELDS: Final = (
    "action",
    "branch",
    "conclusion",
    "customer",
    "livemode",
    "object",
    "repository",
    "sender",
    "status",
    "workflow",
)
"""The fields a ``webhook-events://`` URI may filter on (``?branch=main&conclusion=failure``)."""

_GITHUB_OBJECTS: Final = ("workflow_run", "workflow_job", "check_run", "check_suite")


@attrs.frozen
class Described:
    fields: dict[str, str]
    object_id: str | None
    """The natural object's id (a state resource's last path part), or None."""
    object: Any
    """The natural object itself (a state resource's body), or None."""


def _get(value: Any, *path: str) -> Any:
    for part in path:
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _text(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int) and value != "":
        return str(value)
    return None


def describe(kind: str, event: str, payload: Any) -> Described:
    fields: dict[str, str | None] = {"action": _text(_get(payload, "action"))}
    object_id: str | None = None
    obj: Any = None
    if kind == "github":
        fields["repository"] = _text(_get(payload, "repository", "full_name"))
        fields["sender"] = _text(_get(payload, "sender", "login"))
        if event in _GITHUB_OBJECTS:
            obj = _get(payload, event)
            fields["branch"] = _text(_get(obj, "head_branch") or _get(obj, "check_suite", "head_branch"))
            fields["conclusion"] = _text(_get(obj, "conclusion"))
            fields["status"] = _text(_get(obj, "status"))
            fields["workflow"] = _text(
                _get(obj, "name") if event == "workflow_run" else _get(obj, "workflow_name")
            )
            object_id = _text(_get(obj, "id"))
        elif event in ("pull_request", "pull_request_review", "pull_request_review_comment"):
            obj = _get(payload, "pull_request")
            fields["branch"] = _text(_get(obj, "head", "ref"))
            number = _text(_get(obj, "number"))
            if number is not None and fields["repository"] is not None:
                object_id = f"{fields['repository']}#{number}"
        elif event == "push":
            ref = _text(_get(payload, "ref"))
            if ref is not None and ref.startswith("refs/heads/"):
                fields["branch"] = ref.removeprefix("refs/heads/")
    elif kind == "stripe":
        obj = _get(payload, "data", "object")
        fields["object"] = _text(_get(obj, "object"))
        customer = _get(obj, "customer")
        fields["customer"] = _text(customer if not isinstance(customer, dict) else customer.get("id"))
        fields["livemode"] = _text(_get(payload, "livemode"))
        object_id = _text(_get(obj, "id"))
    else:
        obj = _get(payload, "data")
        object_id = _text(_get(obj, "id"))
    if object_id is None:
        obj = None
    else:  # shown in notices beside the filter fields (not filterable: the state URI names an object)
        fields["id"] = object_id
        fields["url"] = _text(_get(obj, "html_url"))
    return Described({k: v for k, v in fields.items() if v is not None}, object_id, obj)
