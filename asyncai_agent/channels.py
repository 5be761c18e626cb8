"""The agent side of switchboard doorbells: channel notices plus a pull worker that never misses work.

Two pieces, used together (see ``docs/servers/switchboard.md``):

- :class:`ChannelExtension`, an ``mcp.client.ClientExtension`` for
  ``claude/channel``. The SDK drops notification methods it does not know
  unless a binding exists; this binding turns each
  ``notifications/claude/channel`` into ``Notice(source="channel",
  text=content, meta={"server": ..., **meta})``.
- :class:`ChannelPuller`, which keeps one ``subscriptions/listen`` open (that
  is what makes the session *attached*, so doorbells can reach it) and drains
  the queue with the read-only ``todo_pull`` verb at start, after every
  re-listen (reconnect) and after each completed todo. A doorbell is only a
  hint; the drain is what guarantees nothing waits unseen.

Wiring, e.g. for ``asyncai-agent --mcp-http URL --token-file F``::

    puller = ChannelPuller(server="switchboard")
    source = McpResourceSource.http(url, headers={"Authorization": f"Bearer {token}"},
                                    extensions=[puller.extension])
    async with source:
        if has_channel(source.client):
            orchestrator.forward_notices(puller.notices)
            tg.start_soon(puller.run, source.client)
        # after a successful todo_complete tool call: puller.completed()

Logging: the puller writes ``channel.*`` records to the project's NDJSON log
(:mod:`asyncai_watch.log`, the watch manager's logger and shape), each with the
``server`` it pulls from; the fields are in ``docs/agent.md``. ``channel.drain_failed``
is a WARNING and always written; the rest are verbose (DEBUG, or INFO when the
puller was built with ``verbose=True``).
"""

from __future__ import annotations

import json
import re
import xml.sax.saxutils
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import Client
from mcp.client import ClientExtension, NotificationBinding
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel, ConfigDict

from asyncai_watch import Backoff, Clock, Notice, SystemClock, log

__all__ = [
    "CHANNEL_CAPABILITY",
    "CHANNEL_METHOD",
    "ChannelExtension",
    "ChannelParams",
    "ChannelPuller",
    "has_channel",
]

CHANNEL_METHOD: Final = "notifications/claude/channel"
CHANNEL_CAPABILITY: Final = "claude/channel"
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DEFAULT_BACKOFF: Final = Backoff(initial=1.0, cap=16.0, attempts=None)
"""Re-listen waits: 1, 2, 4, 8, 16 s, then 16 s for as long as it takes (pulling needs no listen)."""


def _unescape(text: str) -> str:
    # Doorbell text arrives with XML's five predefined entities escaped (it is shown inside a
    # <channel> tag); it is rendered again, escaped once, in the agent's turn.
    return xml.sax.saxutils.unescape(text, {"&apos;": "'", "&quot;": '"'})


class ChannelParams(BaseModel):
    model_config = ConfigDict(extra="allow")
    content: str
    meta: dict[str, Any] | None = None


def has_channel(client: Client) -> bool:
    """True when the server declared ``capabilities.experimental['claude/channel']``."""
    caps = client.server_capabilities
    return caps is not None and CHANNEL_CAPABILITY in (caps.experimental or {})


def _meta(raw: Mapping[str, Any] | None) -> dict[str, str]:
    """The receiver's rules (Claude Code's): identifier keys only, scalar values as strings."""
    out: dict[str, str] = {}
    for key, value in (raw or {}).items():
        if not _KEY.match(key) or key == "server":
            continue
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, str | int | float):
            out[key] = _unescape(str(value))
    return out


class ChannelExtension(ClientExtension):
    """Turns ``notifications/claude/channel`` into Notices handed to ``on_notice``."""

    identifier = CHANNEL_CAPABILITY

    def __init__(self, server: str, on_notice: Callable[[Notice], None]) -> None:
        self.server = server
        self._on_notice = on_notice

    def notifications(self) -> Sequence[NotificationBinding[Any]]:
        return [NotificationBinding(method=CHANNEL_METHOD, params_type=ChannelParams, handler=self._handle)]

    async def _handle(self, params: ChannelParams) -> None:
        # The server escaped markup for harnesses that paste content raw. A Notice carries plain
        # text (the agent's renderer escapes once, and a library user may show it elsewhere), so
        # the five XML entities are decoded; numeric and HTML references are not (they could
        # spell a control character).
        self._on_notice(
            Notice(
                Notice.CHANNEL,
                _unescape(params.content),
                meta={"server": self.server, **_meta(params.meta)},
            )
        )


class ChannelPuller:
    """Doorbells plus the degrade-to-pull drain, as one stream of Notices (:attr:`notices`)."""

    def __init__(
        self,
        *,
        server: str = "switchboard",
        queue: str | None = None,
        buffer: int = 256,
        backoff: Backoff = DEFAULT_BACKOFF,
        clock: Clock | None = None,
        remember: int = 4096,
        verbose: bool = False,
    ) -> None:
        self.server = server
        self.queue = queue
        self.verbose = verbose
        self._send: MemoryObjectSendStream[Notice]
        self._send, self._recv = anyio.create_memory_object_stream[Notice](buffer)
        if backoff.attempts is not None:  # a listen is what lets doorbells in: never stop trying
            raise ValueError(
                f"ChannelPuller re-listens forever: backoff.attempts must be None, got {backoff.attempts}"
            )
        self._backoff = backoff
        self._clock: Clock = clock if clock is not None else SystemClock()
        # todo id -> the drain generation that last saw (or rang) it; see drain().
        self._announced: OrderedDict[str, int] = OrderedDict()
        self._generation = 0
        self._remember = remember
        self._drain_wanted = anyio.Event()
        self.extension = ChannelExtension(server, self._doorbell)
        self.dropped = 0
        self.drains = 0
        self.attached = anyio.Event()
        """Set while a listen is open (the server can ring this session); cleared on loss."""
        self.drained = anyio.Event()
        """Set once every drain asked for so far has completed (the puller is caught up with the
        queue); a fresh event replaces it whenever another drain is asked for or started."""

    @property
    def notices(self) -> MemoryObjectReceiveStream[Notice]:
        return self._recv

    # -- inputs ------------------------------------------------------------
    def _emit(self, notice: Notice) -> bool:
        """Hand ``notice`` on; False when it was dropped (full buffer, or nobody reads)."""
        try:
            self._send.send_nowait(notice)
        except anyio.WouldBlock:
            self.dropped += 1  # the todo is still in the ledger; the next drain lists it
            return False
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return False
        return True

    def _remember_id(self, todo_id: str) -> bool:
        """Mark ``todo_id`` seen in this generation; False if it was already announced."""
        known = todo_id in self._announced
        self._announced[todo_id] = self._generation
        self._announced.move_to_end(todo_id)
        while len(self._announced) > self._remember:
            self._announced.popitem(last=False)
        return not known

    def _announce(self, todo_id: str | None, notice: Notice) -> bool:
        """Hand ``notice`` on; False when it was dropped."""
        delivered = self._emit(notice)
        # A notice that could not be handed on must not count as announced, or no later
        # drain would list its todo again and the work would be lost to the agent.
        if not delivered and todo_id:
            self._announced.pop(todo_id, None)
        return delivered

    def _doorbell(self, notice: Notice) -> None:
        todo_id = notice.meta.get("todo_id")
        if todo_id:
            self._remember_id(todo_id)
        delivered = self._announce(todo_id, notice)
        self._log("channel.doorbell", todo_id=todo_id, delivered=delivered, dropped=self.dropped)

    def _log(self, event: str, **fields: Any) -> None:
        log.emit(event, verbose=self.verbose, server=self.server, **fields)

    def _want_drain(self) -> None:
        self._drain_wanted.set()
        if self.drained.is_set():
            self.drained = anyio.Event()

    def completed(self) -> None:
        """A todo was completed: drain again (call after a successful ``todo_complete``)."""
        self._want_drain()

    def reconnected(self) -> None:
        """The connection was re-established by its owner: drain again."""
        self._want_drain()

    def observe_tool_call(self, name: str, ok: bool) -> None:
        """Convenience hook for the agent's tool dispatcher."""
        if name == "todo_complete" and ok:
            self.completed()

    # -- worker ------------------------------------------------------------
    async def drain(self, client: Client) -> int:
        """Page through ``todo_pull`` until the end; announce each open todo not announced yet.

        After a complete drain, ids that neither this drain listed nor a doorbell rang during it
        are forgotten: those todos were claimed or done, and if one comes back to the queue (a
        release, an expired lease) the next drain announces it again.
        """
        self.drained = anyio.Event() if self.drained.is_set() else self.drained
        self._generation += 1
        generation = self._generation
        after: str | None = None
        fresh = listed = 0
        while True:
            args: dict[str, Any] = {"limit": 100}
            if self.queue is not None:
                args["queue"] = self.queue
            if after is not None:
                args["after"] = after
            result = await client.call_tool("todo_pull", args)
            if result.is_error:
                text = " ".join(getattr(c, "text", "") for c in result.content)
                raise MCPError(-32603, f"todo_pull failed: {text}")
            page = result.structured_content
            if page is None:
                page = json.loads(getattr(result.content[0], "text", "{}"))
            for todo in page.get("todos", []):
                listed += 1
                todo_id = str(todo["id"])
                if self._remember_id(todo_id):
                    fresh += 1
                    meta = {"todo_id": todo_id, "queue": str(todo["queue"]), "kind": str(todo["kind"])}
                    delivered = self._announce(
                        todo_id,
                        Notice(
                            Notice.CHANNEL,
                            str(todo["summary"]),
                            meta={"server": self.server, **meta, "via": "pull"},
                        ),
                    )
                    self._log("channel.announced", **meta, delivered=delivered, dropped=self.dropped)
            after = page.get("next_after")
            if after is None:
                break
        forgotten = [t for t, seen in self._announced.items() if seen < generation]
        for todo_id in forgotten:
            del self._announced[todo_id]
        self.drains += 1
        self._log(
            "channel.drained",
            queue=self.queue,
            drains=self.drains,
            listed=listed,
            announced=fresh,
            forgotten=len(forgotten),
        )
        if not self._drain_wanted.is_set():  # another drain is already asked for: not caught up yet
            self.drained.set()
        return fresh

    async def run(self, client: Client) -> None:
        """Until cancelled: drain, keep a listen open, drain after each re-listen and each completion."""
        self._want_drain()  # at start, whether or not a listen ever succeeds (pull needs no push)
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._drain_on_request, client)
            await self._attach(client)

    async def _drain_on_request(self, client: Client) -> None:
        while True:
            await self._drain_wanted.wait()
            self._drain_wanted = anyio.Event()
            try:
                await self.drain(client)
            except Exception as exc:  # a server error or a malformed page: report it, keep the agent up
                # Always written (WARNING): the next re-listen or completion drains again.
                log.logger.warning(
                    "channel.drain_failed",
                    extra={
                        "server": self.server,
                        "queue": self.queue,
                        "error": f"{type(exc).__name__}: {exc}",
                    },
                )

    async def _attach(self, client: Client) -> None:
        failures = 0
        while True:
            reason = "the listen stream ended"
            try:
                async with client.listen(tools_list_changed=True) as sub:
                    self._log("channel.attached", attempt=failures)
                    failures = 0
                    self.attached.set()
                    self._want_drain()  # at start and after every reconnect
                    async for _ in sub:  # list changes are not ours to act on; the stream is the point
                        pass
            except Exception as exc:  # SubscriptionLost, MCPError, a closed stream, transport errors
                reason = f"{type(exc).__name__}: {exc}"
            if self.attached.is_set():
                self.attached = anyio.Event()
            delay = self._backoff.delay(failures)
            assert delay is not None  # attempts=None: checked in __init__
            failures += 1
            self._log("channel.relistening", attempt=failures, delay=delay, reason=reason)
            # A backoff after a failure, not a poll: nothing runs while attached.
            await self._clock.sleep_until(self._clock.now() + delay)
