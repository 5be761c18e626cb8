"""The client under test in the official MCP conformance suite's client scenarios.

The suite (``@modelcontextprotocol/conformance``) starts a server per scenario and
runs ``python scripts/conformance_client.py URL`` with ``MCP_CONFORMANCE_SCENARIO``
naming the scenario and, for some, ``MCP_CONFORMANCE_CONTEXT`` holding credentials.
This does what a watch client does, through
:class:`~asyncai_watch.mcp.client.McpResourceSource`: connect (``server/discover``,
falling back to ``initialize``), list the tools, call every tool the scenario's
server lists (with the arguments its ``MCP_CONFORMANCE_CONTEXT`` names, when it
names ``toolCalls``; a tool whose ``x-mcp-header`` annotations are invalid is
dropped by the SDK and never called), and carry on past a call that fails, so
each scenario sees every call it checks. OAuth scenarios use the library's OAuth set-up (:mod:`asyncai_watch.http_auth`); the
suite's authorization server approves at once, so the "browser" here is one GET
whose redirect carries the authorization code.

Exit 0 when the client did its part; 1 with a one-line reason otherwise (the suite
judges the protocol exchange either way).
"""

from __future__ import annotations

import json
import os
import sys
import urllib.parse
from typing import Any

import anyio
import httpx2
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.shared.auth import AuthorizationCodeResult

from asyncai_watch.errors import WatchError
from asyncai_watch.http_auth import MemoryTokenStorage, oauth_provider
from asyncai_watch.mcp.client import McpResourceSource
from asyncai_watch.mcp.source import ToolInfo

REDIRECT_URI = "http://localhost:3000/callback"
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"
ARGUMENTS: dict[str, dict[str, Any]] = {
    # The suite's tools that take arguments, by name; every other tool is called with {}.
    "add_numbers": {"a": 5, "b": 3},
    "valid_tool": {"region": "us-west1"},
    "lookup_user": {"id": "user-1"},
}
ECHO_TOOL = "json_schema_echo"
ECHOED_TOOL = "json_schema_2020_12_tool"


def _calls(tools: list[ToolInfo], context: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The tool calls the scenario asks for: its context's ``toolCalls`` when it names them,
    else every listed tool, with the arguments :data:`ARGUMENTS` has for it."""
    named = context.get("toolCalls")
    if isinstance(named, list):
        return [(call["name"], dict(call.get("arguments") or {})) for call in named]
    schemas = {tool.name: tool.input_schema for tool in tools}
    calls = []
    for tool in tools:
        if tool.name == ECHO_TOOL:  # hand back the schema we were given, as we kept it
            calls.append((tool.name, {"schema": schemas.get(ECHOED_TOOL, {})}))
        else:
            calls.append((tool.name, ARGUMENTS.get(tool.name, {})))
    return calls


class Unsupported(Exception):
    """A scenario for a feature this client does not offer."""


class HeadlessBrowser:
    """Follows the authorization URL once and keeps the code from the redirect."""

    def __init__(self) -> None:
        self._result: AuthorizationCodeResult | None = None

    async def redirect(self, authorization_url: str) -> None:
        async with httpx2.AsyncClient(timeout=10.0) as http:
            response = await http.get(authorization_url, follow_redirects=False)
        location = response.headers.get("location")
        if not response.is_redirect or not location:
            raise RuntimeError(f"authorization endpoint answered {response.status_code}, not a redirect")
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(location).query)
        if "code" not in query:
            raise RuntimeError(f"the redirect carries no code: {location}")
        self._result = AuthorizationCodeResult(
            code=query["code"][0],
            state=query.get("state", [None])[0],
            iss=query.get("iss", [None])[0],
        )

    async def callback(self) -> AuthorizationCodeResult:
        result, self._result = self._result, None
        if result is None:
            raise RuntimeError("no authorization code: the redirect was not followed")
        return result


def _auth(scenario: str, url: str, context: dict[str, Any]) -> httpx2.Auth | None:
    if not scenario.startswith("auth/"):
        return None
    if scenario == "auth/client-credentials-basic":
        return ClientCredentialsOAuthProvider(
            server_url=url,
            storage=MemoryTokenStorage(),
            client_id=context["client_id"],
            client_secret=context["client_secret"],
        )
    if scenario in ("auth/client-credentials-jwt", "auth/cross-app-access-complete-flow"):
        raise Unsupported(f"{scenario}: private_key_jwt / enterprise-managed authorization is not offered")
    browser = HeadlessBrowser()
    return oauth_provider(
        url,
        storage=MemoryTokenStorage(),
        redirect_uri=REDIRECT_URI,
        redirect_handler=browser.redirect,
        callback_handler=browser.callback,
        client_id=context.get("client_id"),
        client_secret=context.get("client_secret"),
        client_metadata_url=CLIENT_METADATA_URL,
    )


async def run(url: str, scenario: str, context: dict[str, Any]) -> None:
    # The suite starts every scenario's client at once: on a busy machine the handshake can take
    # longer than the library's default 30 s. The suite itself gives a client 120 s here.
    async with McpResourceSource.http(
        url, auth=_auth(scenario, url, context), connect_timeout=100, request_timeout=100
    ) as source:
        tools = await source.list_tools()
        failures: list[str] = []
        for name, arguments in _calls(tools, context):
            try:
                await source.call_tool(name, arguments)
            except WatchError as exc:
                failures.append(str(exc))
        if failures:
            raise RuntimeError("; ".join(failures))


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: conformance_client.py SERVER_URL", file=sys.stderr)
        return 2
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "initialize")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    try:
        anyio.run(run, argv[1], scenario, context)
    except (Unsupported, WatchError, RuntimeError) as exc:
        print(f"conformance_client: {scenario}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
