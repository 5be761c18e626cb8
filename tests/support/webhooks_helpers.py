"""Real-shaped webhook deliveries, signed the way each provider signs, and the server to send them to.

The signing here is written from each provider's documentation, independently of the server's
verify.py (the Standard Webhooks sender uses the ``standardwebhooks`` package, as Svix's
senders do): a test that signs wrong fails against a server that verifies right.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import Subscription
from mcp.shared._httpx_utils import create_mcp_http_client

from asyncai_servers.webhooks.fields import describe
from asyncai_servers.webhooks.verify import Delivery
from asyncai_watch.server.eventlog import AFTER_META_KEY
from asyncai_watch.server.http import running_http_server

WAIT = 30.0
GITHUB_SECRET = "It's a Secret to Everybody"
STRIPE_SECRET = "whsec_test_stripe_0123456789"
STANDARD_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
HMAC_SECRET = "deploys-secret"
TOKEN = "webhooks-test-token-0123456789"


def write_config(tmp: Path, extra: str = "") -> Path:
    (tmp / "github.secret").write_text(GITHUB_SECRET + "\n")
    (tmp / "github.old").write_text("an-old-secret-being-rotated-out\n")
    (tmp / "stripe.secret").write_text(STRIPE_SECRET)
    (tmp / "standard.secret").write_text(STANDARD_SECRET)
    (tmp / "deploys.secret").write_text(HMAC_SECRET)
    path = tmp / "hooks.toml"
    path.write_text(
        """
[[source]]
name = "github"
kind = "github"
secrets = [{ file = "github.old" }, { file = "github.secret" }]

[[source]]
name = "stripe"
kind = "stripe"
secrets = [{ file = "stripe.secret" }]

[[source]]
name = "svix"
kind = "standard"
secrets = [{ file = "standard.secret" }]

[[source]]
name = "deploys"
kind = "hmac"
secrets = [{ file = "deploys.secret" }]
signature_header = "X-Signature"
id_header = "X-Delivery"
event_header = "X-Event"
"""
        + extra
    )
    return path


def server_argv(tmp: Path, *more: str, store: Sequence[str] | None = None) -> list[str]:
    """``store``: where deliveries go (default ``--db tmp/hooks.sqlite3``)."""
    return [
        sys.executable,
        "-m",
        "asyncai_servers.webhooks",
        "--config",
        str(write_config(tmp)),
        *(store if store is not None else ["--db", str(tmp / "hooks.sqlite3")]),
        "--receive",
        "127.0.0.1:0",
        *more,
    ]


def workflow_run(
    run_id: int, *, branch: str = "main", action: str = "completed", conclusion: str | None = "failure"
) -> dict[str, Any]:
    """A ``workflow_run`` payload in the shape GitHub documents (trimmed to the usual fields)."""
    return {
        "action": action,
        "workflow_run": {
            "id": run_id,
            "name": "CI",
            "head_branch": branch,
            "head_sha": "acb5820ced9479c074f688cc328bf03f341a511d",
            "run_number": 562,
            "event": "push",
            "status": "completed" if action == "completed" else "in_progress",
            "conclusion": conclusion if action == "completed" else None,
            "workflow_id": 159038,
            "html_url": f"https://github.com/octo-org/octo-repo/actions/runs/{run_id}",
            "created_at": "2026-12-05T00:00:00Z",
            "updated_at": "2026-12-05T00:01:00Z",
        },
        "workflow": {"id": 159038, "name": "CI", "path": ".github/workflows/ci.yml"},
        "repository": {
            "id": 186853002,
            "name": "octo-repo",
            "full_name": "octo-org/octo-repo",
            "private": False,
        },
        "sender": {"login": "octocat", "id": 1},
    }


def github(
    body: bytes, event: str, delivery: str | None = None, secret: str = GITHUB_SECRET
) -> dict[str, str]:
    """The headers GitHub sends: X-Hub-Signature-256 is sha256= and the hex HMAC of the raw body."""
    return {
        "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/044aadd",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "X-GitHub-Hook-ID": "292430182",
        "X-Hub-Signature-256": "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest(),
    }


def stripe_event(event_id: str, typ: str = "invoice.payment_failed") -> bytes:
    return json.dumps(
        {
            "id": event_id,
            "object": "event",
            "api_version": "2024-06-20",
            "created": int(time.time()),
            "type": typ,
            "livemode": False,
            "data": {
                "object": {
                    "id": "in_1MtHbELkdIwHu7ixl4OzzPMv",
                    "object": "invoice",
                    "customer": "cus_NffrFeUfNV2Hib",
                }
            },
        }
    ).encode()


def stripe(body: bytes, at: int | None = None, secret: str = STRIPE_SECRET) -> dict[str, str]:
    """Stripe-Signature: t=<unix>,v1=<hex HMAC-SHA256 of "<t>.<body>">, the secret used as is."""
    t = int(time.time()) if at is None else at
    sig = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return {"Content-Type": "application/json; charset=utf-8", "Stripe-Signature": f"t={t},v1={sig}"}


def standard(
    body: bytes, msg_id: str, at: int | None = None, secret: str = STANDARD_SECRET
) -> dict[str, str]:
    from standardwebhooks.webhooks import Webhook

    t = int(time.time()) if at is None else at
    signature = Webhook(secret).sign(msg_id, datetime.fromtimestamp(t, tz=UTC), body)
    return {
        "Content-Type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(t),
        "webhook-signature": signature,
    }


def hmac_headers(body: bytes, delivery: str, event: str, secret: str = HMAC_SECRET) -> dict[str, str]:
    return {
        "X-Signature": "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest(),
        "X-Delivery": delivery,
        "X-Event": event,
    }


async def post(url: str, body: bytes, headers: Mapping[str, str]) -> httpx2.Response:
    async with httpx2.AsyncClient(trust_env=False, timeout=WAIT) as http:
        return await http.post(url, content=body, headers=dict(headers))


def text_of(result: Any) -> str:
    content = result.contents[0]
    text = getattr(content, "text", None)
    assert isinstance(text, str), content
    return text


async def sources(client: Client) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(text_of(await client.read_resource("webhooks://sources")))
    return body


@asynccontextmanager
async def http_server(
    tmp: Path, *more: str, store: Sequence[str] | None = None
) -> AsyncIterator[tuple[str, str, dict[str, str], anyio.abc.Process]]:
    """The server over Streamable HTTP (a bearer token, so it holds under any loopback default):
    ``(mcp url, receiver base url, client headers, process)``."""
    token_file = tmp / "token"
    token_file.write_text(TOKEN)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    argv = [*server_argv(tmp, *more, store=store), "--http", "127.0.0.1:0", "--token-file", str(token_file)]
    env = {k: v for k, v in os.environ.items() if k != "ASYNCAI_HTTP_TOKEN"}
    async with running_http_server(argv, env=env) as (url, proc):
        async with mcp_client(url, headers) as client:
            with anyio.fail_after(WAIT):
                endpoint = (await sources(client))["sources"]["github"]["endpoint"]
        yield url, endpoint.removesuffix("github"), headers, proc


@asynccontextmanager
async def mcp_client(url: str, headers: Mapping[str, str]) -> AsyncIterator[Client]:
    """A 2026-era client of the server at ``url``."""
    async with (
        create_mcp_http_client(headers=dict(headers)) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


RUNS = "webhook-events://github/workflow_run"


def body_of(payload: Any) -> bytes:
    return json.dumps(payload).encode()


async def read_log(client: Any, uri: str, after: tuple[str, int] | None = None) -> dict[str, Any]:
    meta = None if after is None else {AFTER_META_KEY: {"log_id": after[0], "seq": after[1]}}
    body: dict[str, Any] = json.loads(text_of(await client.read_resource(uri, meta=meta)))
    return body


async def log_until(
    client: Any, sub: Subscription, uri: str, done: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    with anyio.fail_after(WAIT):
        while not done(body := await read_log(client, uri)):
            await sub.__anext__()
    return body


NOW = 1_796_000_000.0


def run_delivery(run_id: int, *, branch: str = "main", conclusion: str = "failure") -> tuple[Delivery, Any]:
    payload = workflow_run(run_id, branch=branch, conclusion=conclusion)
    return Delivery("github", f"d-{run_id}", "workflow_run", payload), describe(
        "github", "workflow_run", payload
    )
