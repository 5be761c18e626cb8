"""Verification of one delivery, by its source's documented scheme. Pure: the time comes in.

- ``github``: ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>``; the delivery
  id is ``X-GitHub-Delivery``, the event ``X-GitHub-Event``.
- ``stripe``: ``Stripe-Signature: t=<unix>,v1=<hex HMAC-SHA256 of "<t>.<body>">`` (several
  ``v1`` while Stripe rolls a secret), ``t`` within ``tolerance`` of now; the delivery id is
  the event's ``id`` (``evt_...``), the event its ``type``.
- ``standard`` (Standard Webhooks: Svix and others): ``webhook-id``, ``webhook-timestamp``,
  ``webhook-signature: v1,<base64>`` (space-separated list); the signature is computed by the
  maintained ``standardwebhooks`` package (its secret decoding, ``whsec_`` prefix included),
  the timestamp checked here against the injected time (the package reads the system clock);
  the delivery id is ``webhook-id``, the event the payload's ``type``.
- ``hmac``: one header holding the body's HMAC-SHA256 (hex or base64, with a prefix), for
  senders with no standard scheme.

Every secret of the source is tried (rotation), each compare constant-time
(:func:`hmac.compare_digest`). A refusal says what was wrong and never echoes a secret.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import parse_qs

import attrs
import msgspec

from asyncai_servers.webhooks.config import SourceSpec

__all__ = ["MAX_ID_CHARS", "Delivery", "Refused", "verify"]

MAX_ID_CHARS: Final = 200
"""The longest delivery id and event name accepted (GitHub's are 36 and about 30)."""


class Refused(Exception):
    """The delivery is refused with HTTP ``status``; the message says why and what is accepted."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@attrs.frozen
class Delivery:
    """A verified delivery: who sent it, its id (the dedupe key), its event name and payload."""

    source: str
    delivery_id: str
    event: str
    payload: Any


def verify(spec: SourceSpec, headers: Mapping[str, str], body: bytes, now: float) -> Delivery:
    """Verify ``body`` (exactly as received) with ``headers`` (lower-case names) at time ``now``
    (Unix seconds); raise :class:`Refused` (401 for a signature, 400 for a malformed delivery)."""
    if spec.kind == "github":
        return _github(spec, headers, body)
    if spec.kind == "stripe":
        return _stripe(spec, headers, body, now)
    if spec.kind == "standard":
        return _standard(spec, headers, body, now)
    return _hmac(spec, headers, body)


def _digest(secret: bytes, data: bytes) -> bytes:
    return hmac.new(secret, data, hashlib.sha256).digest()


def _any_match(spec: SourceSpec, given: list[bytes], signed: bytes) -> bool:
    # Every secret against every signature, with no early exit on the secrets that fail.
    ok = False
    for secret in spec.secrets:
        expected = _digest(secret, signed)
        for candidate in given:
            ok |= hmac.compare_digest(expected, candidate)
    return ok


def _header(spec: SourceSpec, headers: Mapping[str, str], name: str, what: str) -> str:
    value = headers.get(name)
    if not value:
        raise Refused(401, f"{spec.name}: the {name} header is missing; {what}")
    return value


def _json(spec: SourceSpec, body: bytes) -> Any:
    try:
        return msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise Refused(400, f"{spec.name}: the body is not JSON ({exc}); accepted: a JSON payload") from None


def _id(spec: SourceSpec, value: Any, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_ID_CHARS or not value.isprintable():
        raise Refused(
            400, f"{spec.name}: {what} must be 1-{MAX_ID_CHARS} printable characters, got {str(value)[:40]!r}"
        )
    return value


def _github(spec: SourceSpec, headers: Mapping[str, str], body: bytes) -> Delivery:
    given = _header(spec, headers, "x-hub-signature-256", "GitHub signs with sha256=<hex> (set a secret)")
    prefix, _, hexdigest = given.partition("=")
    try:
        digest = bytes.fromhex(hexdigest)
    except ValueError:
        digest = b""
    if prefix != "sha256" or not _any_match(spec, [digest], body):
        raise Refused(
            401, f"{spec.name}: X-Hub-Signature-256 does not match the body for any configured secret"
        )
    delivery_id = _id(spec, headers.get("x-github-delivery"), "X-GitHub-Delivery")
    event = _id(spec, headers.get("x-github-event"), "X-GitHub-Event")
    if headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        # The webhook's "Content type" may be form: the JSON is its `payload` field.
        fields = parse_qs(body.decode("utf-8", "replace"), max_num_fields=10)
        body = fields.get("payload", [""])[0].encode()
    return Delivery(spec.name, delivery_id, event, _json(spec, body))


def _stripe(spec: SourceSpec, headers: Mapping[str, str], body: bytes, now: float) -> Delivery:
    given = _header(spec, headers, "stripe-signature", "Stripe signs with t=<unix>,v1=<hex>")
    stamp: str | None = None
    signatures: list[bytes] = []
    for part in given.split(",")[:32]:
        key, _, value = part.strip().partition("=")
        if key == "t":
            stamp = value
        elif key == "v1":
            try:
                signatures.append(bytes.fromhex(value))
            except ValueError:
                continue
    if stamp is None or not stamp.isdigit() or not signatures:
        raise Refused(401, f"{spec.name}: Stripe-Signature needs t=<unix seconds> and at least one v1=<hex>")
    _check_time(spec, int(stamp), now, "Stripe-Signature t")
    if not _any_match(spec, signatures, stamp.encode() + b"." + body):
        raise Refused(401, f"{spec.name}: Stripe-Signature does not match the body for any configured secret")
    payload = _json(spec, body)
    if not isinstance(payload, dict):
        raise Refused(400, f"{spec.name}: a Stripe event is a JSON object with id and type")
    return Delivery(
        spec.name,
        _id(spec, payload.get("id"), "the event id"),
        _id(spec, payload.get("type"), "the event type"),
        payload,
    )


def _check_time(spec: SourceSpec, stamp: int, now: float, what: str) -> None:
    if abs(now - stamp) > spec.tolerance:
        raise Refused(
            401,
            f"{spec.name}: {what} is {abs(now - stamp):.0f} s from this server's time, past the tolerance of "
            f"{spec.tolerance:g} s (tolerance in the config; a replayed or delayed delivery, or a clock off)",
        )


def _standard(spec: SourceSpec, headers: Mapping[str, str], body: bytes, now: float) -> Delivery:
    from standardwebhooks.webhooks import Webhook  # the [webhooks] extra

    what = "Standard Webhooks sends webhook-id, webhook-timestamp and webhook-signature"
    msg_id = _id(spec, _header(spec, headers, "webhook-id", what), "webhook-id")
    stamp = _header(spec, headers, "webhook-timestamp", what)
    given = _header(spec, headers, "webhook-signature", what)
    if not stamp.isdigit():
        raise Refused(401, f"{spec.name}: webhook-timestamp must be Unix seconds, got {stamp[:20]!r}")
    _check_time(spec, int(stamp), now, "webhook-timestamp")
    at = datetime.fromtimestamp(int(stamp), tz=UTC)
    signatures: list[bytes] = []
    for versioned in given.split(" ")[:32]:
        version, _, value = versioned.partition(",")
        if version == "v1":
            try:
                signatures.append(base64.b64decode(value, validate=True))
            except binascii.Error:
                continue
    ok = False
    for secret in spec.secrets:
        signer = Webhook(secret.decode())
        expected = base64.b64decode(signer.sign(msg_id, at, body).partition(",")[2])
        for candidate in signatures:
            ok |= hmac.compare_digest(expected, candidate)
    if not ok:
        raise Refused(
            401, f"{spec.name}: webhook-signature does not match the body for any configured secret"
        )
    payload = _json(spec, body)
    event = payload.get("type") if isinstance(payload, dict) else None
    return Delivery(spec.name, msg_id, _id(spec, event or "message", "the payload's type"), payload)


def _hmac(spec: SourceSpec, headers: Mapping[str, str], body: bytes) -> Delivery:
    name = spec.signature_header
    given = _header(spec, headers, name, f"this source expects {spec.prefix}<{spec.encoding} HMAC-SHA256>")
    if not given.startswith(spec.prefix):
        raise Refused(401, f"{spec.name}: {name} must start with {spec.prefix!r}")
    text = given[len(spec.prefix) :]
    try:
        digest = bytes.fromhex(text) if spec.encoding == "hex" else base64.b64decode(text, validate=True)
    except (ValueError, binascii.Error):
        digest = b""
    if not _any_match(spec, [digest], body):
        raise Refused(401, f"{spec.name}: {name} does not match the body for any configured secret")
    payload = _json(spec, body)
    if spec.id_header is not None:
        delivery_id = _id(spec, headers.get(spec.id_header), spec.id_header)
    else:  # no id from the sender: the same body retried is the same delivery
        delivery_id = "sha256:" + hashlib.sha256(body).hexdigest()
    if spec.event_header is not None:
        event = _id(spec, headers.get(spec.event_header), spec.event_header)
    else:
        found = payload.get("type") if isinstance(payload, dict) else None
        event = _id(spec, found if isinstance(found, str) and found else "message", "the payload's type")
    return Delivery(spec.name, delivery_id, event, payload)
